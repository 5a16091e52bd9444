/**
 * The cost of a durable hold + settle on its own: the gateway's billing core (the same Billing
 * and LedgerRepository `serve` builds) on a real SQLite file in WAL mode with synchronous=FULL,
 * timed pair by pair for D seconds in a process of its own. One JSON result on stdout.
 *
 * Usage: node dist/bench/hold-settle.js DATA_DIR SECONDS
 */
import { performance } from "node:perf_hooks";
import { Billing } from "../src/core/billing/billing.js";
import { defaultPriceCatalog } from "../src/core/billing/default-catalog.js";
import { defaultChainRegistry } from "../src/core/billing/default-chains.js";
import { AuthRepository } from "../src/store/auth-repository.js";
import { openDatabase } from "../src/store/database.js";
import { LedgerRepository } from "../src/store/ledger-repository.js";

/** What the hold + settle run reports. */
export interface HoldSettleResult {
  readonly pairs: number;
  readonly pairsPerSecond: number;
  /** One hold plus one settle, each its own committed transaction, in milliseconds. */
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
const billing = new Billing({
  ledger: new LedgerRepository(db),
  chains,
  catalog: defaultPriceCatalog(),
  now,
});
const accountId = `acct_bench${process.pid}`;
new AuthRepository(db).createAccount(accountId, "bench", now());
billing.credit({
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
  const state = billing.holdNewCall({
    accountId,
    requestId: `req_bench_${i}`,
    keyId: "",
    chain: chains.defaultChain,
    call: { kind: "text", model: "model-haiku-4-5", inputTokens: 100n, maxTokens: 64n },
  });
  const t1 = performance.now();
  billing.settleDelivered(state.hold.id, {
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
db.close();
process.stdout.write(`${JSON.stringify(result)}\n`);
