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
  readonly thread: number;
  readonly req?: number;
  readonly ev: string;
  readonly url?: string;
  readonly writes?: number;
  readonly statementsMs?: number;
  readonly commitMs?: number;
  readonly waitedMs?: number;
}

/** The points of a call's way, in order, and what the time up to each is spent on. */
const SEGMENTS: readonly (readonly [from: string, to: string, label: string])[] = [
  ["arrive", "handler", "authentication and the body (facade hooks)"],
  ["handler", "ledger.placeHold.sent", "admission and preparation (core)"],
  ["ledger.placeHold.sent", "ledger.placeHold.done", "the hold: writer thread, group commit, fsync"],
  ["ledger.placeHold.done", "upstream.create", "encoding and sending to the provider"],
  ["upstream.create", "upstream.headers", "the provider's answer headers (its latency)"],
  ["upstream.headers", "upstream.end", "the provider's body"],
  ["upstream.end", "ledger.settle.sent", "usage and pricing"],
  ["ledger.settle.sent", "ledger.settle.done", "the settlement: writer thread, group commit, fsync"],
  ["ledger.settle.done", "finish", "receipt and the answer out"],
];

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

const row = (values: number[]) => {
  const sorted = values.sort((a, b) => a - b);
  return [50, 90, 99].map((p) => percentile(sorted, p).toFixed(2).padStart(8)).join(" ");
};

/** The timeline as lines of text. */
export function timelineText(text: string): string[] {
  const events = text
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as Event);
  const calls = new Map<number, Map<string, number>>();
  const urls = new Map<number, string>();
  for (const e of events) {
    if (e.req === undefined) continue;
    if (e.ev === "arrive") urls.set(e.req, e.url ?? "");
    let points = calls.get(e.req);
    if (points === undefined) {
      points = new Map();
      calls.set(e.req, points);
    }
    // The first time a call reaches a point (a call writes its hold and its settlement once).
    if (!points.has(e.ev)) points.set(e.ev, e.t);
  }
  const complete = [...calls.entries()].filter(
    ([id, points]) =>
      urls.get(id) === "/v1/messages" && SEGMENTS.every(([from, to]) => points.has(from) && points.has(to)),
  );
  const lines = [
    `${complete.length} complete non-streaming /v1/messages calls (of ${calls.size} requests recorded)`,
    "",
    `${"ms between points".padEnd(58)}      p50      p90      p99`,
  ];
  for (const [from, to, label] of SEGMENTS)
    lines.push(`${label.padEnd(58)} ${row(complete.map(([, p]) => p.get(to)! - p.get(from)!))}`);
  lines.push(
    `${"the whole call, arrival to the last byte".padEnd(58)} ${row(complete.map(([, p]) => p.get("finish")! - p.get("arrive")!))}`,
  );
  const groups = events.filter((e) => e.ev === "group");
  if (groups.length > 0) {
    lines.push(
      "",
      `ledger writer thread: ${groups.length} group commits`,
      `${"".padEnd(58)}      p50      p90      p99`,
      `${"writes per group".padEnd(58)} ${row(groups.map((g) => g.writes ?? 0))}`,
      `${"a group's statements (ms)".padEnd(58)} ${row(groups.map((g) => g.statementsMs ?? 0))}`,
      `${"its COMMIT, fsync included (ms)".padEnd(58)} ${row(groups.map((g) => g.commitMs ?? 0))}`,
      `${"its first write's wait for the group to start (ms)".padEnd(58)} ${row(groups.map((g) => g.waitedMs ?? 0))}`,
    );
  }
  return lines;
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === resolve(import.meta.filename)) {
  console.log(timelineText(readFileSync(process.argv[2]!, "utf8")).join("\n"));
}
