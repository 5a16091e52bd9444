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
import { parseArgs } from "node:util";
import { openPostgres } from "../src/store/postgres/database.js";
import { PgLedger } from "../src/store/postgres/ledger.js";
import { startPgBouncer } from "../test/helpers/pgbouncer.js";
import { startPostgres } from "../test/helpers/postgres.js";
import { fundAccounts, ledgerPair, runPairs } from "./pg-load.js";

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

/** Holds and settles for `seconds` on a pool to `url` (migrated on `direct`); one JSON line. */
async function run(path: string, url: string, direct: string): Promise<void> {
  const pool = await openPostgres(url, poolSize, direct);
  try {
    await fundAccounts(pool, accounts);
    const figures = await runPairs({ accounts, workers, seconds }, "hold", ledgerPair(new PgLedger(pool)));
    process.stdout.write(
      `${JSON.stringify({
        path,
        accounts,
        workers,
        pool: poolSize,
        serverPool: path === "pgbouncer" ? serverPool : undefined,
        ...figures,
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
