/**
 * The PostgreSQL ledger alone under concurrent holds and settlements: `workers` loops, each
 * placing a hold and settling it, over `accounts` accounts, on one pool, against a real
 * PostgreSQL the script starts (Debian's, fsync on) and stops. Prints one JSON line.
 *
 *   npx tsc -p tsconfig.bench.json && node dist/bench/pg-hold-settle.js --accounts 1 --workers 64
 *
 * Options: --accounts N (default 1), --workers N (64), --pool N (10), --seconds N (5).
 */
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { SYSTEM_MANUAL_CREDIT } from "../src/core/ports/ledger.js";
import { PgAccountStore } from "../src/store/postgres/accounts.js";
import { openPostgres } from "../src/store/postgres/database.js";
import { PgLedger } from "../src/store/postgres/ledger.js";
import { startPostgres } from "../test/helpers/postgres.js";

const { values } = parseArgs({
  options: {
    accounts: { type: "string", default: "1" },
    workers: { type: "string", default: "64" },
    pool: { type: "string", default: "10" },
    seconds: { type: "string", default: "5" },
  },
});
const accounts = Number(values.accounts);
const workers = Number(values.workers);
const seconds = Number(values.seconds);
const USAGE = {
  inputTokens: 10n,
  outputTokens: 10n,
  cacheWrite5mTokens: 0n,
  cacheWrite1hTokens: 0n,
  cacheReadTokens: 0n,
  images: 0,
};

const server = await startPostgres();
try {
  const pool = await openPostgres(await server.freshDatabase(), Number(values.pool));
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
  const pairMs: number[] = [];
  let next = 0;
  const end = performance.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: workers }, async (_, w) => {
      while (performance.now() < end) {
        const id = `hold_${next++}`;
        const started = performance.now();
        await ledger.placeHold({
          id,
          accountId: `acct_${w % accounts}`,
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
        pairMs.push(performance.now() - started);
      }
    }),
  );
  pairMs.sort((a, b) => a - b);
  const at = (q: number) => pairMs[Math.min(pairMs.length - 1, Math.floor(q * pairMs.length))]!;
  process.stdout.write(
    `${JSON.stringify({
      accounts,
      workers,
      pool: Number(values.pool),
      pairsPerSecond: Math.round(pairMs.length / seconds),
      pairMs: { p50: at(0.5), p99: at(0.99) },
    })}\n`,
  );
  await pool.end();
} finally {
  await server.stop();
}
