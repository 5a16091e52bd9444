/**
 * Loaded into the gateway with `node --import` by `bench/run.ts --gc FILE`: measures the serving
 * thread's garbage collection over a window the harness opens and closes with SIGUSR2 (the first
 * signal opens it, the next closes it). Over the window it records every GC of the main thread's
 * isolate with `v8.GCProfiler` (its kind and pause), the bytes the thread allocated (the heap's
 * growth between one GC's end and the next one's start, summed), the process's CPU time and the
 * young generation's size. With $TOLLGATE_BENCH_HEAP_PROFILE set it also runs V8's sampling heap
 * profiler over the window, keeping samples of objects already collected (so it shows where
 * bytes were allocated, not what is still alive) and writes the profile (`.heapprofile`, Chrome
 * DevTools' format) there; with $TOLLGATE_BENCH_HEAP_SURVIVORS set as well, the samples of
 * objects a young-generation collection freed are dropped, so the profile shows where the bytes
 * that survived a scavenge (and were copied, then promoted) were allocated. One line of JSON per
 * window is appended to $TOLLGATE_BENCH_GC.
 * Nothing in the gateway changes.
 */
import { appendFileSync, writeFileSync } from "node:fs";
import { Session } from "node:inspector";
import { GCProfiler, getHeapSpaceStatistics, getHeapStatistics } from "node:v8";
import { isMainThread } from "node:worker_threads";

/** One GC as `v8.GCProfiler` reports it (Node 20). */
interface GcRecord {
  readonly gcType: string;
  /** Its pause, in microseconds. */
  readonly cost: number;
  readonly beforeGC: { readonly heapStatistics: { readonly usedHeapSize: number } };
  readonly afterGC: { readonly heapStatistics: { readonly usedHeapSize: number } };
}

/** What one window measured (a line of $TOLLGATE_BENCH_GC). */
export interface GcWindow {
  readonly ms: number;
  readonly cpuMs: number;
  readonly allocatedBytes: number;
  /** Per GC kind: how many, their summed and longest pause (ms). */
  readonly kinds: Record<string, { count: number; totalMs: number; maxMs: number }>;
  /** Every scavenge's pause (ms), in order. */
  readonly scavengeMs: number[];
  readonly semiSpaceBytes: number;
  readonly newSpaceBytes: number;
  readonly heapProfile?: string;
}

const file = process.env.TOLLGATE_BENCH_GC;
const heapFile = process.env.TOLLGATE_BENCH_HEAP_PROFILE;

if (file !== undefined && isMainThread) {
  let open:
    | { profiler: GCProfiler; started: number; cpu: NodeJS.CpuUsage; used: number; session?: Session }
    | undefined;
  const post = (session: Session, method: string, params?: object) =>
    new Promise<unknown>((resolvePromise, reject) =>
      session.post(method, params ?? {}, (error, result) => (error ? reject(error) : resolvePromise(result))),
    );
  process.on("SIGUSR2", () => {
    if (open === undefined) {
      let session: Session | undefined;
      if (heapFile !== undefined) {
        session = new Session();
        session.connect();
        void post(session, "HeapProfiler.startSampling", {
          samplingInterval: 16_384,
          includeObjectsCollectedByMajorGC: true,
          includeObjectsCollectedByMinorGC: process.env.TOLLGATE_BENCH_HEAP_SURVIVORS === undefined,
        });
      }
      const profiler = new GCProfiler();
      profiler.start();
      open = {
        profiler,
        started: performance.now(),
        cpu: process.cpuUsage(),
        used: getHeapStatistics().used_heap_size,
        session,
      };
      return;
    }
    const window = open;
    open = undefined;
    const usedNow = getHeapStatistics().used_heap_size;
    const cpu = process.cpuUsage(window.cpu);
    const ms = performance.now() - window.started;
    const records = (window.profiler.stop()?.statistics ?? []) as unknown as GcRecord[];
    let allocated = 0;
    let last = window.used;
    const kinds: GcWindow["kinds"] = {};
    const scavengeMs: number[] = [];
    for (const gc of records) {
      allocated += Math.max(0, gc.beforeGC.heapStatistics.usedHeapSize - last);
      last = gc.afterGC.heapStatistics.usedHeapSize;
      const pause = gc.cost / 1000;
      kinds[gc.gcType] ??= { count: 0, totalMs: 0, maxMs: 0 };
      const kind = kinds[gc.gcType]!;
      kind.count++;
      kind.totalMs += pause;
      kind.maxMs = Math.max(kind.maxMs, pause);
      if (gc.gcType === "Scavenge") scavengeMs.push(pause);
    }
    allocated += Math.max(0, usedNow - last);
    const newSpace = getHeapSpaceStatistics().find((space) => space.space_name === "new_space");
    const write = (heapProfile?: string) =>
      appendFileSync(
        file,
        `${JSON.stringify({
          ms,
          cpuMs: (cpu.user + cpu.system) / 1000,
          allocatedBytes: allocated,
          kinds,
          scavengeMs,
          // new_space is the two semi-spaces' active half; its size is what a scavenge empties.
          semiSpaceBytes: newSpace?.space_size ?? 0,
          newSpaceBytes: newSpace?.space_available_size ?? 0,
          ...(heapProfile === undefined ? {} : { heapProfile }),
        } satisfies GcWindow)}\n`,
      );
    const session = window.session;
    if (session === undefined || heapFile === undefined) return write();
    void post(session, "HeapProfiler.stopSampling").then((result) => {
      writeFileSync(heapFile, JSON.stringify((result as { profile: unknown }).profile));
      session.disconnect();
      write(heapFile);
    });
  });
}
