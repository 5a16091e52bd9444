/**
 * The PostgreSQL ledger alone under concurrent holds and settlements: `workers` loops, each
 * placing a hold and settling it, over `accounts` accounts, on one pool, against a real
 * PostgreSQL the script starts (Debian's, fsync on) and stops. Prints one JSON line.
 *
 *   npx tsc -p tsconfig.bench.json && node dist/bench/pg-hold-settle.js --accounts 1 --workers 64
 *
 * Options: --accounts N (default 1), --workers N (64), --pool N (10), --seconds N (5).
 */
import { parseArgs } from "node:util";
import { openPostgres } from "../src/store/postgres/database.js";
import { PgLedger } from "../src/store/postgres/ledger.js";
import { startPostgres } from "../test/helpers/postgres.js";
import { fundAccounts, ledgerPair, runPairs } from "./pg-load.js";

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
  await fundAccounts(pool, accounts);
  const figures = await runPairs({ accounts, workers, seconds }, "hold", ledgerPair(new PgLedger(pool)));
  process.stdout.write(`${JSON.stringify({ accounts, workers, pool: Number(values.pool), ...figures })}\n`);
  await pool.end();
} finally {
  await server.stop();
}
