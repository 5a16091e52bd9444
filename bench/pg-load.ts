/**
 * The load the PostgreSQL benchmarks share (pg-hold-settle.ts, pg-pooler.ts, pg-driver.ts):
 * `accounts` funded accounts, and `workers` loops each sending a billed call's hold+settle pair
 * for an account of its own (`acct_{worker mod accounts}`) until `seconds` have passed, timing
 * every pair.
 */
import { performance } from "node:perf_hooks";
import type pg from "pg";
import { SYSTEM_MANUAL_CREDIT } from "../src/core/ports/ledger.js";
import { PgAccountStore } from "../src/store/postgres/accounts.js";
import { PgLedger } from "../src/store/postgres/ledger.js";

/** How many loops, over how many accounts, for how long. */
export interface PairLoad {
  readonly accounts: number;
  readonly workers: number;
  readonly seconds: number;
}

/** What a run measured: pairs per second and the pair's p50/p99 (ms). */
export interface PairFigures {
  readonly pairsPerSecond: number;
  readonly pairMs: { readonly p50: number; readonly p99: number };
}

/** One hold+settle pair: the hold `id` for `accountId`. */
export type Pair = (id: string, accountId: string) => Promise<void>;

/** The usage every settled pair reports. */
const USAGE = {
  inputTokens: 10n,
  outputTokens: 10n,
  cacheWrite5mTokens: 0n,
  cacheWrite1hTokens: 0n,
  cacheReadTokens: 0n,
  images: 0,
};

/** Opens `acct_0` … `acct_{accounts-1}` on `pool`, each credited 10^15 (never the limit). */
export async function fundAccounts(pool: pg.Pool, accounts: number): Promise<void> {
  const store = new PgAccountStore(pool);
  const ledger = new PgLedger(pool);
  for (let a = 0; a < accounts; a++) {
    await store.insertAccount(`acct_${a}`, "bench", 1);
    await ledger.credit({
      entryId: `funds_${a}`,
      accountId: `acct_${a}`,
      chain: "base",
      amount: 10n ** 15n,
      from: SYSTEM_MANUAL_CREDIT,
      memo: "bench",
      createdAt: 1,
    });
  }
}

/** The pair as the gateway sends it: the ledger's `placeHold`, then `settle`. */
export function ledgerPair(ledger: PgLedger): Pair {
  return async (id, accountId) => {
    await ledger.placeHold({
      id,
      accountId,
      requestId: id,
      keyId: "key_bench",
      chain: "base",
      amount: 7_000n,
      callKind: "text",
      model: "bench",
      inputTokens: 10n,
      maxTokens: 64n,
      imageSize: "",
      imageCount: 0,
      createdAt: Date.now(),
    });
    await ledger.settle(id, 500n, USAGE, Date.now(), "");
  };
}

/** Runs `pair` from every worker for `load.seconds`, the holds named `{prefix}_{n}`. */
export async function runPairs(load: PairLoad, prefix: string, pair: Pair): Promise<PairFigures> {
  const pairMs: number[] = [];
  let next = 0;
  const end = performance.now() + load.seconds * 1000;
  await Promise.all(
    Array.from({ length: load.workers }, async (_, w) => {
      while (performance.now() < end) {
        const id = `${prefix}_${next++}`;
        const started = performance.now();
        await pair(id, `acct_${w % load.accounts}`);
        pairMs.push(performance.now() - started);
      }
    }),
  );
  pairMs.sort((a, b) => a - b);
  const at = (q: number) => pairMs[Math.min(pairMs.length - 1, Math.floor(q * pairMs.length))]!;
  return {
    pairsPerSecond: Math.round(pairMs.length / load.seconds),
    pairMs: { p50: at(0.5), p99: at(0.99) },
  };
}
