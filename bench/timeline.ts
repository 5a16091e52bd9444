/**
 * The timeline of a billed call, from what bench/timeline-hook.ts recorded in the gateway during
 * a run (`bench/run.ts --timeline FILE`): for each non-streaming `/v1/messages` call, how long
 * it spent between consecutive points of its way, as percentiles over the calls; and the ledger
 * writer thread's group commits. `node dist/bench/timeline.js FILE` prints it for a kept file.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";

interface Event {
  readonly t: number;
  readonly thread?: number;
  readonly req?: number;
  readonly ev: string;
  readonly url?: string;
  readonly label?: string;
  readonly write?: number;
  readonly ids?: readonly number[];
  readonly writes?: number;
  readonly statementsMs?: number;
  readonly commitMs?: number;
  readonly waitedMs?: number;
  readonly proc?: string;
  readonly ms?: number;
  readonly kind?: number;
  readonly items?: number;
  readonly failed?: readonly string[];
  readonly text?: string;
  readonly used?: Readonly<Record<string, number>>;
  readonly pid?: number;
  readonly cmd?: string;
}

/**
 * PostgreSQL's settings for a timed run: log what can hold every call at once, with each line
 * stamped in Unix epoch milliseconds (`%n`) to line up with the hook's events. No spaces: pg_ctl
 * passes its `-o` options through a shell.
 */
export const PG_TIMELINE_SETTINGS: readonly string[] = [
  "log_line_prefix=%n:%p:%b:",
  "log_checkpoints=on",
  "log_autovacuum_min_duration=0",
  "log_min_duration_statement=10",
  "log_lock_waits=on",
];

/**
 * PostgreSQL's log (with {@link PG_TIMELINE_SETTINGS}) as timeline events, one JSON line each:
 * `{ t, ev: "pg", proc, ms, text }`, `t` the moment the logged work began where the line gives
 * its length (a statement's `duration`, autovacuum's `elapsed`, a checkpoint's `total`).
 */
export function pgLogEvents(log: string): string {
  const out: string[] = [];
  for (const raw of log.split("\n")) {
    const m = /^(\d+\.\d+):(\d+):([^:]*):\s*(?:LOG|WARNING|ERROR|FATAL):\s+(.*)$/.exec(raw);
    if (m === null) continue;
    const [, stamp, pid, backend, text] = m as unknown as [string, string, string, string, string];
    const seconds = /(?:elapsed: |total=)([\d.]+) s/.exec(text);
    const millis = /duration: ([\d.]+) ms/.exec(text);
    const ms = millis !== null ? Number(millis[1]) : seconds !== null ? Number(seconds[1]) * 1000 : 0;
    out.push(
      JSON.stringify({
        t: Number(stamp) * 1000 - ms,
        ev: "pg",
        proc: `postgres ${backend} ${pid}`,
        ms,
        text: text.slice(0, 140),
      }),
    );
  }
  return out.length === 0 ? "" : `${out.join("\n")}\n`;
}

/** The points of a call's way, in order, and what the time up to each is spent on. */
const SEGMENTS: readonly (readonly [from: string, to: string, label: string])[] = [
  ["arrive", "handler", "authentication and the body (facade hooks)"],
  ["handler", "ledger.placeHold.sent", "admission and preparation (core)"],
  ["ledger.placeHold.sent", "ledger.placeHold.done", "the hold, durable (writer thread, below)"],
  ["ledger.placeHold.done", "upstream.create", "encoding and sending to the provider"],
  ["upstream.create", "upstream.headers", "the provider's answer headers (its latency)"],
  ["upstream.headers", "upstream.end", "the provider's body"],
  ["upstream.end", "ledger.settle.sent", "usage and pricing"],
  ["ledger.settle.sent", "ledger.settle.done", "the settlement, durable (writer thread, below)"],
  ["ledger.settle.done", "finish", "receipt and the answer out"],
];

/** A ledger write's way through the writer thread, by the write's id. */
const CROSSING: readonly (readonly [from: string, to: string, label: string])[] = [
  ["sent", "posted", "waits for the end of the serving thread's turn"],
  ["posted", "received", "crosses to the writer thread"],
  ["received", "replied", "queued, run and committed (fsync) in a group"],
  ["replied", "arrived", "its answer crosses back"],
  ["arrived", "done", "until the waiting call resumes"],
];

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

const row = (values: number[]) => {
  const sorted = values.sort((a, b) => a - b);
  return [50, 90, 99].map((p) => percentile(sorted, p).toFixed(2).padStart(8)).join(" ");
};
const HEAD = `${"".padEnd(60)}      p50      p90      p99`;
const line = (label: string, values: number[]) => `${label.padEnd(60)} ${row(values)}`;

/** The timeline as lines of text: one per measured window (all events when none was marked). */
export function timelineText(text: string): string[] {
  const events = text
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as Event);
  const windows: { label: string; from: number; to: number }[] = [];
  for (const e of events) {
    if (e.ev === "window.start")
      windows.push({ label: e.label ?? "", from: e.t, to: Number.POSITIVE_INFINITY });
    if (e.ev === "window.end" && windows.length > 0) windows[windows.length - 1]!.to = e.t;
  }
  if (windows.length === 0) windows.push({ label: "the whole run", from: 0, to: Number.POSITIVE_INFINITY });
  return windows.flatMap((w, i) => [...(i > 0 ? [""] : []), ...windowText(events, w)]);
}

function windowText(events: readonly Event[], window: { label: string; from: number; to: number }): string[] {
  const inside = (t: number) => t >= window.from && t <= window.to;
  const calls = new Map<number, Map<string, number>>();
  const urls = new Map<number, string>();
  const writeOf = new Map<string, number>();
  const writes = new Map<number, Map<string, number>>();
  const at = (map: Map<number, Map<string, number>>, key: number) => {
    let points = map.get(key);
    if (points === undefined) {
      points = new Map();
      map.set(key, points);
    }
    return points;
  };
  for (const e of events) {
    if (e.req !== undefined) {
      if (e.ev === "arrive") urls.set(e.req, e.url ?? "");
      const points = at(calls, e.req);
      // The first time a call reaches a point (a call writes its hold and its settlement once).
      if (!points.has(e.ev)) points.set(e.ev, e.t);
      const m = /^ledger\.(\w+)\.(sent|done)$/.exec(e.ev);
      if (m !== null && e.write !== undefined) {
        writeOf.set(`${e.req}:${m[1]}`, e.write);
        const points = at(writes, e.write);
        if (!points.has(m[2]!)) points.set(m[2]!, e.t);
      }
    }
    if (e.ev.startsWith("crossing.") && e.ids !== undefined) {
      const phase = e.ev.slice("crossing.".length);
      for (const id of e.ids) {
        const points = at(writes, id);
        if (!points.has(phase)) points.set(phase, e.t);
      }
    }
  }
  const complete = [...calls.entries()].filter(
    ([id, points]) =>
      urls.get(id) === "/v1/messages" &&
      inside(points.get("arrive") ?? -1) &&
      SEGMENTS.every(([from, to]) => points.has(from) && points.has(to)),
  );
  const lines = [
    `${window.label}: ${complete.length} complete non-streaming /v1/messages calls`,
    "",
    `${"ms between points of the call".padEnd(60)}      p50      p90      p99`,
  ];
  for (const [from, to, label] of SEGMENTS)
    lines.push(
      line(
        label,
        complete.map(([, p]) => p.get(to)! - p.get(from)!),
      ),
    );
  lines.push(
    line(
      "the whole call, arrival to the last byte",
      complete.map(([, p]) => p.get("finish")! - p.get("arrive")!),
    ),
  );
  lines.push(...slowest(complete, window.from, events));
  const batches = events.filter((e) => e.ev === "batch" && inside(e.t));
  if (batches.length > 0) {
    const failed = new Map<string, number>();
    for (const state of batches.flatMap((b) => b.failed ?? []))
      failed.set(state, (failed.get(state) ?? 0) + 1);
    lines.push(
      `  PostgreSQL batches of two or more: ${batches.length}, carrying ${batches.reduce((n, b) => n + (b.items ?? 0), 0)} ` +
        `items; items failed and sent again alone: ${failed.size === 0 ? "none" : [...failed].map(([state, n]) => `${n} (${state})`).join(", ")}`,
    );
  }
  lines.push(...cores(events, window, complete.length));
  const fsyncs = events.filter((e) => e.ev === "fsync" && inside(e.t)).map((e) => e.ms!);
  if (fsyncs.length > 0 || events.some((e) => e.proc === "probe"))
    lines.push(
      `  the disk over the window (the probe's fdatasync every 10 ms): ${fsyncs.length} over 5 ms, ` +
        `${fsyncs.filter((ms) => ms > 20).length} over 20 ms, the longest ${Math.max(0, ...fsyncs).toFixed(1)} ms`,
    );
  for (const op of ["placeHold", "settle"]) {
    const ways = complete
      .map(([id]) => writes.get(writeOf.get(`${id}:${op}`) ?? -1))
      .filter(
        (p): p is Map<string, number> => p !== undefined && CROSSING.every(([f, t]) => p.has(f) && p.has(t)),
      );
    if (ways.length === 0) continue;
    lines.push(
      "",
      `${op === "placeHold" ? "the hold" : "the settlement"} through the writer thread (ms)`,
      HEAD,
    );
    for (const [from, to, label] of CROSSING)
      lines.push(
        line(
          label,
          ways.map((p) => p.get(to)! - p.get(from)!),
        ),
      );
  }
  const groups = events.filter((e) => e.ev === "group" && inside(e.t));
  if (groups.length > 0) {
    lines.push(
      "",
      `the ledger writer thread: ${groups.length} group commits`,
      HEAD,
      line(
        "writes per group",
        groups.map((g) => g.writes ?? 0),
      ),
      line(
        "a group's statements (ms)",
        groups.map((g) => g.statementsMs ?? 0),
      ),
      line(
        "its COMMIT, fsync included (ms)",
        groups.map((g) => g.commitMs ?? 0),
      ),
      line(
        "its first write's wait for the group to start (ms)",
        groups.map((g) => g.waitedMs ?? 0),
      ),
    );
  }
  return lines;
}

/** What a process is, from its command line (the probe's `proc` events), for the cores' table. */
function role(cmd: string): string {
  if (/bench\/load\.js/.test(cmd)) return "the load generator";
  if (/fake-upstream/.test(cmd)) return "the stand-in provider";
  if (/passthrough-proxy/.test(cmd)) return "the pass-through";
  if (/disk-probe/.test(cmd)) return "the disk probe";
  if (/timeline-hook\.js -e/.test(cmd)) return "the timeline's probe";
  if (/main\.js serve/.test(cmd)) return /semi-space/.test(cmd) ? "a gateway" : "a gateway (or its launcher)";
  if (/main\.js worker/.test(cmd)) return "a chain worker";
  if (/^postgres: (?!tollgate)/.test(cmd))
    return `PostgreSQL's ${
      cmd
        .slice("postgres: ".length)
        .trim()
        .split(/\s{2,}/)[0]
    }`;
  if (/^postgres: /.test(cmd)) return "PostgreSQL's backends";
  return cmd === "" ? "the kernel's threads" : "other";
}

/**
 * Who used the machine's cores over the window (the probe's 100 ms samples of /proc): each role's
 * CPU as a share of one core and per call, the busiest first, and the machine's total.
 */
function cores(events: readonly Event[], window: { from: number; to: number }, calls: number): string[] {
  const samples = events.filter((e) => e.ev === "cpu" && e.t > window.from && e.t <= window.to);
  if (samples.length < 2) return [];
  const names = new Map<number, string>();
  for (const e of events) if (e.ev === "proc" && e.pid !== undefined) names.set(e.pid, e.cmd ?? "");
  const byRole = new Map<string, number>();
  for (const e of samples)
    for (const [key, ms] of Object.entries(e.used ?? {})) {
      const pid = Number(key.slice(key.lastIndexOf(" ") + 1));
      const r = role(names.get(pid) ?? "");
      byRole.set(r, (byRole.get(r) ?? 0) + ms);
    }
  const seconds = (samples.at(-1)!.t - samples[0]!.t) / 1000 + 0.1;
  const total = [...byRole.values()].reduce((a, b) => a + b, 0);
  const row = (label: string, ms: number) =>
    `    ${label.padEnd(40)} ${(ms / seconds / 1000).toFixed(2).padStart(5)} of a core, ${(ms / Math.max(1, calls)).toFixed(2).padStart(5)} ms per call`;
  return [
    `  who used the cores (/proc every 100 ms, ${seconds.toFixed(1)} s):`,
    ...[...byRole].sort((a, b) => b[1] - a[1]).map(([r, ms]) => row(r, ms)),
    row("the machine, all together", total),
  ];
}

/**
 * The calls at or above the whole call's p99: where their time went (each segment's p50 over
 * them), and whether they come together (a pause of the machine, the store or the collector
 * holds every call in flight) or spread over the window (each slow on its own): how many 250 ms
 * windows they fall in, and the most in one.
 */
function slowest(
  calls: readonly (readonly [number, Map<string, number>])[],
  from: number,
  events: readonly Event[],
): string[] {
  const whole = (p: Map<string, number>) => p.get("finish")! - p.get("arrive")!;
  const sorted = calls.map(([, p]) => whole(p)).sort((a, b) => a - b);
  const p99 = percentile(sorted, 99);
  const slow = calls.filter(([, p]) => whole(p) >= p99);
  if (slow.length === 0) return [];
  const buckets = new Map<number, number>();
  for (const [, p] of slow) {
    const bucket = Math.floor((p.get("arrive")! - (Number.isFinite(from) ? from : 0)) / 250);
    buckets.set(bucket, (buckets.get(bucket) ?? 0) + 1);
  }
  const crowded = [...buckets.entries()].sort((a, b) => b[1] - a[1]).slice(0, 5);
  return [
    "",
    `the ${slow.length} calls at or above the p99 (${p99.toFixed(2)} ms): each segment's p50 over them`,
    ...SEGMENTS.map(([f, t, label]) =>
      line(
        label,
        slow.map(([, p]) => p.get(t)! - p.get(f)!),
      ),
    ),
    `  they arrived in ${buckets.size} windows of 250 ms; the most in one: ` +
      crowded.map(([b, n]) => `${n} at +${((b * 250) / 1000).toFixed(2)} s`).join(", "),
    ...crowded.flatMap(([b]) => {
      // Each process's stalls and GC pauses from 100 ms before the window to its end.
      const start = (Number.isFinite(from) ? from : 0) + b * 250;
      const near = events.filter(
        (e) =>
          (e.ev === "stall" || e.ev === "gc" || e.ev === "fsync") && e.t >= start - 100 && e.t <= start + 250,
      );
      // PostgreSQL's logged work that overlaps those 350 ms.
      const server = events.filter(
        (e) => e.ev === "pg" && e.t <= start + 250 && e.t + (e.ms ?? 0) >= start - 100,
      );
      return [
        ...(near.length === 0
          ? []
          : [
              `  near +${((b * 250) / 1000).toFixed(2)} s: ` +
                near
                  .map(
                    (e) =>
                      `${e.proc} ${e.ev === "gc" ? `gc(${e.kind})` : e.ev === "fsync" ? "fsync" : "late"} ${e.ms!.toFixed(1)} ms at ${(e.t - start).toFixed(0)}`,
                  )
                  .join("; "),
            ]),
        ...server
          .slice(0, 8)
          .map((e) => `    ${e.proc} at ${(e.t - start).toFixed(0)} ms, ${e.ms!.toFixed(1)} ms: ${e.text}`),
        ...(server.length > 8 ? [`    … and ${server.length - 8} more PostgreSQL lines`] : []),
      ];
    }),
  ];
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === resolve(import.meta.filename)) {
  console.log(timelineText(readFileSync(process.argv[2]!, "utf8")).join("\n"));
}
