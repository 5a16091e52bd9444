/**
 * The writer-thread crossing on its own (issue 30; docs/performance.md §22): the real ledger
 * writer (`startLedgerWriter` on a temporary data directory, its thread, its group commit, a
 * real SQLite file with synchronous=FULL) driven with the hold + settle of a billed text call,
 * exactly the two writes a billed non-streaming call sends, with the arguments Billing sends.
 * No HTTP, no Billing reads: what is left is the crossing and the writer's own work.
 *
 * Two loads, in a process of its own each:
 * - `rate R`: a pair started every 1/R s (each hold, once durable, followed by its settle);
 * - `saturate C`: C pairs in flight, each followed by the next as soon as its settle is durable;
 * - `inline C`: as `saturate C`, but the writes group-committed on a connection of this thread
 *   with synchronous=OFF (no thread, no fsync): the CPU of the writes' statements alone.
 *
 * Reports, per pair: CPU of the serving (main) thread, of the writer thread and of the rest of
 * the process (V8's helpers), read from /proc/self/task/<tid>/stat (clock ticks, so runs of a
 * few seconds); messages crossing each way (the `tollgate:ledger:crossing` channel) and the
 * bytes of what crosses (v8.serialize of each message, i.e. its structured clone); context
 * switches of the process (`process.resourceUsage`). And, once per run, the SQLite statements
 * one hold and one settle execute on the writer's connection (better-sqlite3's `verbose` on a
 * connection of the same code, `groupCommittedWrites`, transaction statements included).
 *
 * Usage: node dist/bench/crossing.js (rate R | saturate C | inline C) SECONDS [DATA_DIR]
 * One JSON line on stdout.
 */
import { subscribe } from "node:diagnostics_channel";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { serialize } from "node:v8";
import Database from "better-sqlite3";
import { type NewHold, SYSTEM_MANUAL_CREDIT, type UsageCounts } from "../src/core/ports/ledger.js";
import { AuthRepository } from "../src/store/sqlite/accounts.js";
import { DATABASE_FILE, openDatabase } from "../src/store/sqlite/database.js";
import { groupCommittedWrites } from "../src/store/sqlite/ledger-store.js";
import { startLedgerWriter } from "../src/store/sqlite/ledger-writer.js";
import type { LedgerWrites } from "../src/store/sqlite/ledger-writes.js";

/** What one run reports. */
export interface CrossingResult {
  readonly load: string;
  readonly pairs: number;
  readonly pairsPerSecond: number;
  /**
   * CPU per pair in microseconds: serving thread, writer thread (each: `cpu` from schedstat, its
   * user/system split from clock ticks, coarse), the rest of the process's threads, the total.
   */
  readonly cpuUsPerPair: {
    readonly main: { readonly cpu: number; readonly user: number; readonly system: number };
    readonly writer: { readonly cpu: number; readonly user: number; readonly system: number };
    readonly other: number;
    readonly total: number;
  };
  readonly messagesPerPair: { readonly toWriter: number; readonly fromWriter: number };
  /** Mean structured-clone size of one message, and per pair, each way. */
  readonly bytes: {
    readonly perMessageToWriter: number;
    readonly perMessageFromWriter: number;
    readonly perPairToWriter: number;
    readonly perPairFromWriter: number;
  };
  readonly contextSwitchesPerPair: { readonly voluntary: number; readonly involuntary: number };
  readonly pairMs: { readonly p50: number; readonly p99: number };
  readonly statements: { readonly hold: readonly string[]; readonly settle: readonly string[] };
  readonly loadAverage: number;
}

const [mode = "rate", amount = "200", seconds = "5", given] = process.argv.slice(2);
const dataDir = given ?? mkdtempSync(join(tmpdir(), "tollgate-crossing-"));
const chain = "base";
const accountId = `acct_bench${process.pid}`;

// The database, an account and funds, written here before the writer starts.
{
  const db = openDatabase(dataDir);
  new AuthRepository(db).createAccount(accountId, "bench", Date.now());
  const setup = groupCommittedWrites(db);
  await setup.credit({
    entryId: "bench-funds",
    accountId,
    chain,
    amount: 1_000_000_000_000_000n,
    from: SYSTEM_MANUAL_CREDIT,
    memo: "benchmark funds",
    createdAt: Date.now(),
  });
  await setup.close();
  db.close();
}

let seq = 0;
const newHold = (): NewHold => ({
  id: `hold_bench_${process.pid}_${++seq}`,
  accountId,
  requestId: `req_bench_${seq}`,
  keyId: "key_bench",
  chain,
  amount: 1_234_000n,
  callKind: "text",
  model: "model-haiku-4-5",
  inputTokens: 100n,
  maxTokens: 64n,
  imageSize: "",
  imageCount: 0,
  createdAt: Date.now(),
});
const usage: UsageCounts = {
  inputTokens: 12n,
  outputTokens: 9n,
  cacheWrite5mTokens: 0n,
  cacheWrite1hTokens: 0n,
  cacheReadTokens: 0n,
  images: 0,
};
const CHARGES =
  '[{"dimension":"input","tokens":"12","pico":"120000"},{"dimension":"output","tokens":"9","pico":"450000"}]';

/** One billed call's two writes, the settle after the hold is durable. */
async function pair(writes: Pick<LedgerWrites, "placeHold" | "settle">): Promise<void> {
  const placed = await writes.placeHold(newHold());
  if (placed.kind !== "placed") throw new Error(`hold not placed: ${placed.kind}`);
  const settled = await writes.settle(placed.state.hold.id, 567_000n, usage, Date.now(), CHARGES);
  if (settled.kind !== "resolved") throw new Error(`not settled: ${settled.kind}`);
}

/** The statements one hold and one settle run on a connection of the writer's code. */
async function countStatements(): Promise<CrossingResult["statements"]> {
  let log: string[] = [];
  const db = new Database(join(dataDir, DATABASE_FILE), { verbose: (s) => log.push(String(s)) });
  db.pragma("journal_mode = WAL");
  db.pragma("synchronous = FULL");
  db.pragma("foreign_keys = ON");
  db.pragma("busy_timeout = 5000");
  const writes = groupCommittedWrites(db);
  await pair(writes); // prepares everything (and the first-use statements)
  log = [];
  const placed = await writes.placeHold(newHold());
  const hold = log;
  log = [];
  if (placed.kind !== "placed") throw new Error("hold not placed");
  await writes.settle(placed.state.hold.id, 567_000n, usage, Date.now(), CHARGES);
  const settle = log;
  log = [];
  await writes.close();
  db.close();
  const short = (s: string) => s.replace(/\s+/g, " ").slice(0, 60);
  return { hold: hold.map(short), settle: settle.map(short) };
}

/**
 * CPU of each thread of this process: [user ticks, system ticks, nanoseconds on a CPU] (the
 * ticks, 10 ms each, split user from system; schedstat's nanoseconds give the total precisely).
 */
function threadTicks(): Map<number, [number, number, number]> {
  const out = new Map<number, [number, number, number]>();
  for (const tid of readdirSync("/proc/self/task")) {
    try {
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      const ns = Number(readFileSync(`/proc/self/task/${tid}/schedstat`, "utf8").split(" ")[0]);
      out.set(Number(tid), [Number(fields[11]), Number(fields[12]), ns]);
    } catch {
      // the thread ended meanwhile
    }
  }
  return out;
}

const statements = await countStatements();
const before = new Set(threadTicks().keys());
let inline: Database.Database | undefined;
if (mode === "inline") {
  inline = new Database(join(dataDir, DATABASE_FILE));
  inline.pragma("journal_mode = WAL");
  inline.pragma("synchronous = OFF");
  inline.pragma("foreign_keys = ON");
}
const writes = inline === undefined ? await startLedgerWriter(dataDir) : groupCommittedWrites(inline);
const writerTids = [...threadTicks().keys()].filter((tid) => !before.has(tid));

let toWriter = 0;
let fromWriter = 0;
let bytesTo = 0;
let bytesFrom = 0;
let sampledTo = 0;
let sampledFrom = 0;
const SAMPLE_EVERY = 16;
subscribe("tollgate:ledger:crossing", (message) => {
  const m = message as { phase: string; message?: unknown };
  if (m.phase === "posted") {
    if (toWriter++ % SAMPLE_EVERY === 0 && m.message !== undefined) {
      bytesTo += serialize(m.message).length;
      sampledTo++;
    }
  } else if (m.phase === "arrived") {
    if (fromWriter++ % SAMPLE_EVERY === 0 && m.message !== undefined) {
      bytesFrom += serialize(m.message).length;
      sampledFrom++;
    }
  }
});

// Warm up, then measure.
for (let i = 0; i < 200; i++) await pair(writes);
toWriter = fromWriter = bytesTo = bytesFrom = sampledTo = sampledFrom = 0;
const times: number[] = [];
const timed = async () => {
  const t0 = performance.now();
  await pair(writes);
  times.push(performance.now() - t0);
};
const ticks0 = threadTicks();
const usage0 = process.resourceUsage();
const started = performance.now();
const until = started + Number(seconds) * 1000;
if (mode === "saturate" || mode === "inline") {
  const loop = async () => {
    while (performance.now() < until) await timed();
  };
  await Promise.all(Array.from({ length: Number(amount) }, loop));
} else {
  const interval = 1000 / Number(amount);
  const inFlight: Promise<void>[] = [];
  let next = started;
  while (next < until) {
    inFlight.push(timed());
    next += interval;
    const wait = next - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  }
  await Promise.all(inFlight);
}
const elapsed = (performance.now() - started) / 1000;
const ticks1 = threadTicks();
const usage1 = process.resourceUsage();
const n = times.length;

const TICK_US = 10_000; // USER_HZ = 100 on Linux
const delta = (tid: number): [number, number, number] => {
  const a = ticks0.get(tid) ?? [0, 0, 0];
  const b = ticks1.get(tid) ?? a;
  return [b[0] - a[0], b[1] - a[1], b[2] - a[2]];
};
let writer: [number, number, number] = [0, 0, 0];
for (const tid of writerTids) {
  const d = delta(tid);
  // The writer's JS thread is the new thread that worked most (V8's helpers are shared).
  if (d[2] > writer[2]) writer = d;
}
const main = delta(process.pid);
let all = 0;
for (const tid of ticks1.keys()) all += delta(tid)[2];
const perPair = (ticks: number) => Math.round((ticks * TICK_US) / n);
const usPerPair = (ns: number) => Math.round(ns / 1000 / n);
const sorted = times.sort((a, b) => a - b);
const at = (q: number) => sorted[Math.min(n - 1, Math.floor(q * n))] ?? Number.NaN;
const result: CrossingResult = {
  load: `${mode} ${amount}`,
  pairs: n,
  pairsPerSecond: Math.round(n / elapsed),
  cpuUsPerPair: {
    main: { cpu: usPerPair(main[2]), user: perPair(main[0]), system: perPair(main[1]) },
    writer: { cpu: usPerPair(writer[2]), user: perPair(writer[0]), system: perPair(writer[1]) },
    other: usPerPair(all - main[2] - writer[2]),
    total: usPerPair(all),
  },
  messagesPerPair: { toWriter: toWriter / n, fromWriter: fromWriter / n },
  bytes: {
    perMessageToWriter: Math.round(bytesTo / sampledTo),
    perMessageFromWriter: Math.round(bytesFrom / sampledFrom),
    perPairToWriter: Math.round(((bytesTo / sampledTo) * toWriter) / n),
    perPairFromWriter: Math.round(((bytesFrom / sampledFrom) * fromWriter) / n),
  },
  contextSwitchesPerPair: {
    voluntary: (usage1.voluntaryContextSwitches - usage0.voluntaryContextSwitches) / n,
    involuntary: (usage1.involuntaryContextSwitches - usage0.involuntaryContextSwitches) / n,
  },
  pairMs: { p50: at(0.5), p99: at(0.99) },
  statements,
  loadAverage: Number(readFileSync("/proc/loadavg", "utf8").split(" ")[0]),
};
await writes.close();
inline?.close();
if (given === undefined) rmSync(dataDir, { recursive: true, force: true });
process.stdout.write(`${JSON.stringify(result)}\n`);
