/**
 * The disk beside a measured run: in a process of its own, an 8 KiB write and its `fdatasync`
 * every 50 ms in a file under the folder it is given (the one the stores keep their files in),
 * until its stdin closes; then one line of JSON, a {@link DiskProbe}. A durable commit on this
 * disk (SQLite's WAL with `synchronous=FULL`, PostgreSQL's WAL flush) waits for the same kind of
 * fsync, so a slow one here is one every call then in flight waited for on either store
 * (docs/store.md, "The p99 at 300/s"). 20 a second: a few percent of what a store does at 300/s.
 *
 *   node dist/bench/disk-probe.js DIR  (stop it by closing stdin)
 */
import { closeSync, fdatasyncSync, openSync, rmSync, writeSync } from "node:fs";
import { join, resolve } from "node:path";
import { performance } from "node:perf_hooks";

/** What one probe measured (ms). */
export interface DiskProbe {
  readonly fsyncs: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  /** How many took longer than 20 ms. */
  readonly over20Ms: number;
}

const EVERY_MS = 50;
const FILE_BYTES = 16 * 2 ** 20;

/**
 * Every `everyMs`, an 8 KiB write and its `fdatasync` in a file of its own under `dir`, each
 * fsync's start (performance.now()) and duration given to `each`; the returned function stops
 * and removes the file. Also the timeline's probe (bench/timeline-hook.ts).
 */
export function timeFsyncs(
  dir: string,
  everyMs: number,
  each: (startedMs: number, ms: number) => void,
): () => void {
  const file = join(dir, `disk-probe-${process.pid}.dat`);
  const fd = openSync(file, "w");
  const page = Buffer.alloc(8192, 1);
  let offset = 0;
  const timer = setInterval(() => {
    writeSync(fd, page, 0, page.length, offset);
    offset = (offset + page.length) % FILE_BYTES;
    const started = performance.now();
    fdatasyncSync(fd);
    each(started, performance.now() - started);
  }, everyMs).unref();
  return () => {
    clearInterval(timer);
    closeSync(fd);
    rmSync(file, { force: true });
  };
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === resolve(import.meta.filename)) {
  const times: number[] = [];
  const stop = timeFsyncs(process.argv[2]!, EVERY_MS, (_, ms) => times.push(ms));
  process.stdin.resume();
  process.stdin.on("end", () => {
    stop();
    const sorted = [...times].sort((a, b) => a - b);
    const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
    const probe: DiskProbe = {
      fsyncs: sorted.length,
      p50Ms: at(0.5),
      p99Ms: at(0.99),
      maxMs: sorted.at(-1) ?? 0,
      over20Ms: sorted.filter((ms) => ms > 20).length,
    };
    process.stdout.write(`${JSON.stringify(probe)}\n`);
  });
}
