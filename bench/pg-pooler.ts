/**
 * The PostgreSQL ledger's holds and settlements directly and through PgBouncer in transaction
 * mode (docs/deployment.md, "Behind PgBouncer"): `workers` loops, each placing a hold and
 * settling it, over `accounts` accounts, first on a pool to PostgreSQL itself, then on a pool of
 * the same size to a PgBouncer of `--server-pool` server connections in front of it (Debian's
 * PostgreSQL and PgBouncer, started and stopped by the script). Prints one JSON line per path.
 *
 *   npx tsc -p tsconfig.bench.json && node dist/bench/pg-pooler.js --accounts 8 --workers 32
 *
 * Options: --accounts N (default 8), --workers N (32), --pool N (10), --server-pool N (4),
 * --seconds N (5).
 */
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { SYSTEM_MANUAL_CREDIT } from "../src/core/ports/ledger.js";
import { PgAccountStore } from "../src/store/postgres/accounts.js";
import { openPostgres } from "../src/store/postgres/database.js";
import { PgLedger } from "../src/store/postgres/ledger.js";
import { startPgBouncer } from "../test/helpers/pgbouncer.js";
import { startPostgres } from "../test/helpers/postgres.js";

const { values } = parseArgs({
  options: {
    accounts: { type: "string", default: "8" },
    workers: { type: "string", default: "32" },
    pool: { type: "string", default: "10" },
    "server-pool": { type: "string", default: "4" },
    seconds: { type: "string", default: "5" },
  },
});
const accounts = Number(values.accounts);
const workers = Number(values.workers);
const poolSize = Number(values.pool);
const serverPool = Number(values["server-pool"]);
const seconds = Number(values.seconds);
const USAGE = {
  inputTokens: 10n,
  outputTokens: 10n,
  cacheWrite5mTokens: 0n,
  cacheWrite1hTokens: 0n,
  cacheReadTokens: 0n,
  images: 0,
};

/** Holds and settles for `seconds` on a pool to `url` (migrated on `direct`); one JSON line. */
async function run(path: string, url: string, direct: string): Promise<void> {
  const pool = await openPostgres(url, poolSize, direct);
  try {
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
        path,
        accounts,
        workers,
        pool: poolSize,
        serverPool: path === "pgbouncer" ? serverPool : undefined,
        pairsPerSecond: Math.round(pairMs.length / seconds),
        pairMs: { p50: at(0.5), p99: at(0.99) },
      })}\n`,
    );
  } finally {
    await pool.end();
  }
}

const server = await startPostgres();
try {
  const bouncer = await startPgBouncer(server, { poolMode: "transaction", defaultPoolSize: serverPool });
  try {
    const direct = await server.freshDatabase();
    await run("direct", direct, direct);
    const other = await server.freshDatabase();
    await run("pgbouncer", bouncer.pooled(other), other);
  } finally {
    await bouncer.stop();
  }
} finally {
  await server.stop();
}
