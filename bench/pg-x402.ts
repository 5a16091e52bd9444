/**
 * The PostgreSQL ledger alone under concurrent x402 payments: `workers` loops, each authorising
 * a payment and closing it unused (its whole amount returned to system:x402), over `accounts`
 * accounts, on one pool, against a real PostgreSQL the script starts (Debian's, fsync on) and
 * stops. Prints one JSON line. The two statements of x402.ts a paid call adds to a keyed call's
 * hold and settlement (docs/store.md, "No row shared by every call").
 *
 *   npx tsc -p tsconfig.bench.json && node dist/bench/pg-x402.js --accounts 64 --workers 64
 *
 * Options: --accounts N (default 1), --workers N (64), --pool N (10), --seconds N (5).
 */
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
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

const server = await startPostgres();
try {
  const pool = await openPostgres(await server.freshDatabase(), Number(values.pool));
  const store = new PgAccountStore(pool);
  const ledger = new PgLedger(pool);
  for (let a = 0; a < accounts; a++) await store.insertAccount(`acct_${a}`, "bench", 1);
  const pairMs: number[] = [];
  let next = 0;
  const end = performance.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: workers }, async (_, w) => {
      while (performance.now() < end) {
        const id = `pay_${next++}`;
        const started = performance.now();
        await ledger.authoriseX402({
          id,
          holdId: `hold_${id}`,
          accountId: `acct_${w % accounts}`,
          chain: "base",
          scheme: "upto",
          payer: `0xpayer_${w % accounts}`,
          authorised: 7_000n,
          payload: "{}",
          createdAt: Date.now(),
        });
        await ledger.closeX402({
          id,
          status: "unused",
          settled: 0n,
          txHash: "",
          error: "",
          returned: 7_000n,
          now: Date.now(),
        });
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
