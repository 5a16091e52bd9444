/**
 * The driver question, measured: the hold+settle pair of a billed call (the two statements of
 * migration 15, `tollgate_place_hold` and `tollgate_resolve`, the latter with migration 17's
 * endpoint argument) sent by `pg` (the store's driver: one statement at a time per connection)
 * and by `postgres` (porsager's: pipelines the statements waiting on a connection), each from
 * `workers` loops over `accounts` accounts and a pool of `pool` connections, against a real
 * PostgreSQL the script starts (Debian's, fsync on). `postgres` is installed from npm into a
 * folder of the system's temp directory (reused by later runs), never as a project dependency.
 * Prints one JSON line per driver.
 *
 *   npx tsc -p tsconfig.bench.json && node dist/bench/pg-driver.js --accounts 1 --workers 64
 *
 * Options: --accounts N (default 1), --workers N (64), --pool N (10), --seconds N (5).
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { openPostgres } from "../src/store/postgres/database.js";
import { startPostgres } from "../test/helpers/postgres.js";
import { fundAccounts, type PairFigures, runPairs } from "./pg-load.js";

/** The version measured: the newest of 3.4 when measured (its engines accept Node 20). */
const PORSAGER_VERSION = "3.4.9";

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
const poolSize = Number(values.pool);
const seconds = Number(values.seconds);

/** A driver reduced to what the pair needs: one statement, its rows. */
type Send = (text: string, params: unknown[]) => Promise<unknown[]>;

const PLACE = `SELECT seq FROM tollgate_place_hold($1::text, $2::text, $3::text, $4::text, $5::text, $6::bigint,
  $7::text, $8::text, $9::bigint, $10::bigint, $11::text, $12::integer, $13::bigint)`;
const RESOLVE = `SELECT resolved_now FROM tollgate_resolve($1::text, $2::text, $3::bigint, $4::bigint, $5::bigint,
  $6::bigint, $7::bigint, $8::bigint, $9::integer, $10::text, $11::bigint, $12::text)`;

/** Installs `postgres` (once per machine) and loads it. */
async function loadPorsager(): Promise<(url: string, options: Record<string, unknown>) => unknown> {
  const dir = join(tmpdir(), `tollgate-bench-postgres-${PORSAGER_VERSION}`);
  const entry = join(dir, "node_modules", "postgres", "src", "index.js");
  if (!existsSync(entry)) {
    mkdirSync(dir, { recursive: true });
    execFileSync(
      "npm",
      ["install", "--no-audit", "--no-fund", "--no-save", "--prefix", dir, `postgres@${PORSAGER_VERSION}`],
      { stdio: ["ignore", "ignore", "inherit"] },
    );
  }
  return ((await import(pathToFileURL(entry).href)) as { default: never }).default;
}

/** Runs the pair through `send` from every worker for `seconds`. */
function measure(send: Send, run: string): Promise<PairFigures> {
  return runPairs({ accounts, workers, seconds }, run, async (id, accountId) => {
    const now = Date.now();
    const placed = await send(PLACE, [
      id,
      accountId,
      id,
      "key_bench",
      "base",
      "7000",
      "text",
      "bench",
      "10",
      "64",
      "",
      0,
      now,
    ]);
    if (placed.length !== 1) throw new Error(`hold ${id} not placed`);
    await send(RESOLVE, [id, "settled", "500", "10", "10", "0", "0", "0", 0, "", now, ""]);
  });
}

const server = await startPostgres();
try {
  const url = await server.freshDatabase();
  const pool = await openPostgres(url, poolSize);
  await fundAccounts(pool, accounts);
  const shape = { accounts, workers, pool: poolSize, seconds };

  const viaPg: Send = async (text, params) => (await pool.query(text, params)).rows;
  await measure(viaPg, "warm_pg");
  process.stdout.write(`${JSON.stringify({ driver: "pg", ...shape, ...(await measure(viaPg, "pg")) })}\n`);
  await pool.end();

  const porsager = await loadPorsager();
  const sql = porsager(url, { max: poolSize, onnotice: () => {} }) as {
    unsafe(text: string, params: unknown[], options: { prepare: boolean }): Promise<unknown[]>;
    end(): Promise<void>;
  };
  // Named prepared statements (porsager's default) and the pipeline: what the driver offers.
  const viaPorsager: Send = (text, params) => sql.unsafe(text, params, { prepare: true });
  await measure(viaPorsager, "warm_postgres");
  process.stdout.write(
    `${JSON.stringify({ driver: `postgres ${PORSAGER_VERSION}`, ...shape, ...(await measure(viaPorsager, "postgres")) })}\n`,
  );
  await sql.end();
} finally {
  await server.stop();
}
