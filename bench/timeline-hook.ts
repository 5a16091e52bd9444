/**
 * Loaded into the gateway with `node --import` by `bench/run.ts --timeline FILE`: records, for
 * every HTTP request the process serves, when it reached each point of its way — arrival, the
 * route's handler (after authentication and the body), each ledger write sent to the writer
 * thread and answered durable, the provider request created, its headers and its end, the
 * response finished — and, on the ledger writer thread, each group commit's size and how long
 * its commit took. Nothing in the gateway changes: the points are Node's, Fastify's and undici's
 * `diagnostics_channel`s and the gateway's own `tollgate:ledger:*` channels (published only
 * while someone subscribes). Lines of JSON go to $TOLLGATE_BENCH_TIMELINE; bench/timeline.ts
 * reads them.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { channel, subscribe } from "node:diagnostics_channel";
import { appendFileSync, readdirSync, readFileSync } from "node:fs";
import { PerformanceObserver, performance } from "node:perf_hooks";
import { isMainThread, threadId } from "node:worker_threads";
import { timeFsyncs } from "./disk-probe.js";

const file = process.env.TOLLGATE_BENCH_TIMELINE;

if (file !== undefined) {
  const lines: string[] = [];
  const flush = () => {
    if (lines.length === 0) return;
    appendFileSync(file, `${lines.join("\n")}\n`);
    lines.length = 0;
  };
  setInterval(flush, 250).unref();
  process.on("exit", flush);
  /**
   * Call and write ids unique across the processes that share the file (several hosts): this
   * process's pid above the counter's digits.
   */
  const base = process.pid * 10_000_000;
  /** Absolute milliseconds, comparable across threads. */
  const now = () => performance.timeOrigin + performance.now();
  const record = (event: Record<string, unknown>) =>
    lines.push(JSON.stringify({ t: now(), thread: threadId, ...event }));

  // What holds every call at once: the event loop late by more than 5 ms (the loop blocked, or
  // the process not run), and each GC pause over 2 ms; tagged with the process
  // ($TOLLGATE_BENCH_TIMELINE_PROC: the harness's probe, an otherwise idle process, is "probe").
  const proc = process.env.TOLLGATE_BENCH_TIMELINE_PROC ?? `gateway ${process.pid}`;
  if (isMainThread) {
    const TICK = 2;
    let last = performance.now();
    setInterval(() => {
      const at = performance.now();
      const late = at - last - TICK;
      if (late > 5) record({ ev: "stall", proc, ms: late });
      last = at;
    }, TICK).unref();
    new PerformanceObserver((list) => {
      for (const entry of list.getEntries())
        if (entry.duration > 2)
          lines.push(
            JSON.stringify({
              t: performance.timeOrigin + entry.startTime,
              ev: "gc",
              proc,
              ms: entry.duration,
              kind: (entry as { detail?: { kind?: number } }).detail?.kind,
            }),
          );
    }).observe({ entryTypes: ["gc"] });
  }

  // The probe also times the disk: an 8 KiB write and its fdatasync every 10 ms, in the folder
  // the stores keep their files in ($TOLLGATE_BENCH_TIMELINE_DISK), each over 5 ms recorded.
  const disk = process.env.TOLLGATE_BENCH_TIMELINE_DISK;
  if (disk !== undefined && isMainThread)
    timeFsyncs(disk, 10, (started, ms) => {
      if (ms > 5) lines.push(JSON.stringify({ t: performance.timeOrigin + started, ev: "fsync", proc, ms }));
    });

  // The probe also samples who used the machine's cores: every 100 ms, each process's CPU time
  // since the last sample (/proc/<pid>/stat's utime + stime, in clock ticks of 10 ms), recorded
  // for the processes that used any, by pid and command.
  if (process.env.TOLLGATE_BENCH_TIMELINE_CPU !== undefined && isMainThread) {
    const TICK_MS = 10;
    let previous = new Map<number, number>();
    const named = new Set<number>();
    setInterval(() => {
      const t = now();
      const current = new Map<number, number>();
      const used: Record<string, number> = {};
      for (const entry of readdirSync("/proc")) {
        const pid = Number(entry);
        if (!Number.isInteger(pid)) continue;
        let stat: string;
        try {
          stat = readFileSync(`/proc/${pid}/stat`, "utf8");
        } catch {
          continue;
        }
        // "pid (comm) state ppid …": the fields after the command's closing parenthesis.
        const close = stat.lastIndexOf(")");
        const fields = stat.slice(close + 2).split(" ");
        const ticks = Number(fields[11]) + Number(fields[12]);
        current.set(pid, ticks);
        const before = previous.get(pid);
        if (before !== undefined && ticks > before) {
          used[`${stat.slice(stat.indexOf("(") + 1, close)} ${pid}`] = (ticks - before) * TICK_MS;
          if (!named.has(pid)) {
            named.add(pid);
            let cmd = "";
            try {
              cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ").slice(0, 200);
            } catch {}
            lines.push(JSON.stringify({ t, ev: "proc", pid, cmd }));
          }
        }
      }
      previous = current;
      if (Object.keys(used).length > 0) lines.push(JSON.stringify({ t, ev: "cpu", proc, used }));
    }, 100).unref();
  }

  if (isMainThread) {
    const call = new AsyncLocalStorage<number>();
    const ids = new WeakMap<object, number>();
    let next = 0;
    subscribe("http.server.request.start", (message) => {
      const { request } = message as { request: object & { url?: string; method?: string } };
      const id = base + ++next;
      ids.set(request, id);
      // The request's handling continues from this synchronous point: everything it awaits
      // (hooks, the core in process, the provider, the ledger) carries the id.
      call.enterWith(id);
      record({ req: id, ev: "arrive", method: request.method, url: request.url });
    });
    subscribe("tracing:fastify.request.handler:start", (message) => {
      const id = ids.get((message as { request: { raw: object } }).request.raw);
      if (id !== undefined) record({ req: id, ev: "handler" });
    });
    subscribe("http.server.response.finish", (message) => {
      const id = ids.get((message as { request: object }).request);
      if (id !== undefined) record({ req: id, ev: "finish" });
    });
    const upstream = new WeakMap<object, number>();
    subscribe("undici:request:create", (message) => {
      const id = call.getStore();
      const { request } = message as { request: object & { path?: string } };
      if (id === undefined) return;
      upstream.set(request, id);
      record({ req: id, ev: "upstream.create", path: request.path });
    });
    for (const [name, ev] of [
      ["undici:request:headers", "upstream.headers"],
      ["undici:request:trailers", "upstream.end"],
    ] as const) {
      subscribe(name, (message) => {
        const id = upstream.get((message as { request: object }).request);
        if (id !== undefined) record({ req: id, ev });
      });
    }
    channel("tollgate:ledger:write").subscribe((message) => {
      const id = call.getStore();
      const { op, phase, id: write } = message as { op: string; phase: "sent" | "done"; id: number };
      if (id !== undefined) record({ req: id, ev: `ledger.${op}.${phase}`, write: base + write });
    });
  }
  // PostgreSQL's batches (src/store/postgres/batches.ts): their size and their items that failed.
  channel("tollgate:ledger:batch").subscribe((message) => {
    record({ ev: "batch", ...(message as { items: number; failed: string[] }) });
  });
  // Both sides of the writer thread: posted → received → (group) → replied → arrived.
  channel("tollgate:ledger:crossing").subscribe((message) => {
    const { phase, ids } = message as { phase: string; ids: number[] };
    record({ ev: `crossing.${phase}`, ids: ids.map((write) => base + write) });
  });
  if (!isMainThread) {
    channel("tollgate:ledger:group").subscribe((message) => {
      record({ ev: "group", ...(message as Record<string, number>) });
    });
  }
}
