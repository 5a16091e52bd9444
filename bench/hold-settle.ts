/**
 * The cost of a durable hold + settle on its own: the gateway's billing core (Billing over the
 * SQLite ledger, its writes group-committed on this thread as `groupCommittedWrites` does for
 * the CLI) on a real SQLite file in WAL mode with synchronous=FULL, timed pair by pair for D
 * seconds in a process of its own. One JSON result on stdout.
 *
 * What the figures are: each hold and each settle is awaited before the next is asked for, so
 * every GroupCommit group holds exactly one write — one `BEGIN IMMEDIATE` transaction and one
 * commit (with its fsync) per hold and per settle, as before group commit — plus the turn of the
 * event loop (`setImmediate`) GroupCommit waits for before it runs a group, and the ledger's
 * reads (account, default chain, hold) on the same connection. That is the latency of one
 * uncontended call's billing, not the throughput of many calls in flight (whose writes share
 * groups and fsyncs), and it leaves out the message hop to the ledger writer thread `serve` uses
 * (`openSqliteLedger(..., { thread: true })`).
 *
 * Usage: node dist/bench/hold-settle.js DATA_DIR SECONDS
 */
import { performance } from "node:perf_hooks";
import { Billing } from "../src/core/billing/billing.js";
import { defaultPriceCatalog } from "../src/core/billing/default-catalog.js";
import { defaultChainRegistry } from "../src/core/billing/default-chains.js";
import { AuthRepository } from "../src/store/sqlite/accounts.js";
import { openDatabase } from "../src/store/sqlite/database.js";
import { groupCommittedWrites, SqliteLedger } from "../src/store/sqlite/ledger-store.js";

/** What the hold + settle run reports. */
export interface HoldSettleResult {
  readonly pairs: number;
  readonly pairsPerSecond: number;
  /**
   * One hold plus one settle, each its own committed transaction (a group of one), in
   * milliseconds; includes the event-loop turn each write waits for before its group runs.
   */
  readonly pairMs: { readonly p50: number; readonly p99: number };
  readonly holdMs: { readonly p50: number; readonly p99: number };
  readonly settleMs: { readonly p50: number; readonly p99: number };
  readonly synchronous: string;
  readonly journalMode: string;
}

const [dataDir = "", seconds = "5"] = process.argv.slice(2);
const db = openDatabase(dataDir);
const now = Date.now;
const chains = defaultChainRegistry();
const ledger = new SqliteLedger(db, groupCommittedWrites(db));
const billing = new Billing({
  ledger,
  chains,
  catalog: defaultPriceCatalog(),
  now,
});
const accountId = `acct_bench${process.pid}`;
new AuthRepository(db).createAccount(accountId, "bench", now());
await billing.credit({
  accountId,
  chain: chains.defaultChain,
  amount: 1_000_000_000_000_000n,
  reason: "benchmark funds",
  creditId: "",
});

const hold: number[] = [];
const settle: number[] = [];
const pair: number[] = [];
const until = performance.now() + Number(seconds) * 1000;
const started = performance.now();
for (let i = 0; performance.now() < until; i++) {
  const t0 = performance.now();
  const state = await billing.holdNewCall({
    accountId,
    requestId: `req_bench_${i}`,
    keyId: "",
    chain: chains.defaultChain,
    call: { kind: "text", model: "model-haiku-4-5", inputTokens: 100n, maxTokens: 64n },
  });
  const t1 = performance.now();
  await billing.settleDelivered(state.hold, {
    inputTokens: 12n,
    outputTokens: 9n,
    cacheWrite5mTokens: 0n,
    cacheWrite1hTokens: 0n,
    cacheReadTokens: 0n,
    images: 0,
  });
  const t2 = performance.now();
  hold.push(t1 - t0);
  settle.push(t2 - t1);
  pair.push(t2 - t0);
}
const elapsed = (performance.now() - started) / 1000;
const pct = (samples: number[]) => {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
  return { p50: at(0.5), p99: at(0.99) };
};
const result: HoldSettleResult = {
  pairs: pair.length,
  pairsPerSecond: pair.length / elapsed,
  pairMs: pct(pair),
  holdMs: pct(hold),
  settleMs: pct(settle),
  synchronous: String(db.pragma("synchronous", { simple: true })),
  journalMode: String(db.pragma("journal_mode", { simple: true })),
};
await ledger.close();
db.close();
process.stdout.write(`${JSON.stringify(result)}\n`);
