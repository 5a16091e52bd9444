/**
 * PostgreSQL alone running a billed call's two stored functions (tollgate_place_hold and
 * tollgate_resolve, as this build's migrations define them) under `pgbench`, with no Node client
 * on the path: what one account's balance row and the server allow. Starts a real PostgreSQL
 * (Debian's, fsync on), migrates it with this build, funds `acct_0` … `acct_{accounts-1}`, runs
 * bench/pg-pair.sql with `clients` clients (client i on `acct_{i mod accounts}`) and prints one
 * JSON line.
 *
 *   npx tsc -p tsconfig.bench.json && node dist/bench/pg-pgbench.js --accounts 1 --clients 16
 *
 * Options: --accounts N (1), --clients N (16), --seconds N (6), --mode extended|prepared
 * (pgbench's query mode: a statement parsed and planned each time, or once per connection).
 * Compare two builds by running it in each checkout, alternately.
 *
 * `--variant FILE` compares this build's schema with a change to it, on one server: two
 * databases, both migrated and funded, the second with FILE's SQL run over it (a function
 * replaced, a constraint dropped); `pgbench` then runs on each in turn, `--rounds N` (4) times,
 * the order alternating, and the line gives both databases' pairs/s per round. For measuring what
 * a schema change would save before writing its migration (docs/store.md, "The p99 at 300/s").
 */
import { execFileSync } from "node:child_process";
import { chmodSync, copyFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { openPostgres } from "../src/store/postgres/database.js";
import { startPostgres } from "../test/helpers/postgres.js";
import { fundAccounts } from "./pg-load.js";

const { values } = parseArgs({
  options: {
    accounts: { type: "string", default: "1" },
    clients: { type: "string", default: "16" },
    seconds: { type: "string", default: "6" },
    // pgbench's query mode: extended (as `pg` sends a query: parsed and planned each time) or
    // prepared (named statements, parsed and planned once per connection).
    mode: { type: "string", default: "extended" },
    variant: { type: "string" },
    rounds: { type: "string", default: "4" },
  },
});
const accounts = Number(values.accounts);
const clients = Number(values.clients);
// The script sits beside this file in the source tree (dist/bench/ → bench/).
const script = fileURLToPath(new URL("../../bench/pg-pair.sql", import.meta.url));
const pgbench = execFileSync("sh", ["-c", "ls /usr/lib/postgresql/*/bin/pgbench | tail -1"], {
  encoding: "utf8",
}).trim();

/** A database migrated by this build and funded, with `sql` run over it when given. */
async function database(sql?: string): Promise<string> {
  const url = await server.freshDatabase();
  const pool = await openPostgres(url, 2);
  try {
    await fundAccounts(pool, accounts);
    if (sql !== undefined) await pool.query(sql);
  } finally {
    await pool.end();
  }
  return url;
}

/** One pgbench run on `url`: its pairs/s and mean latency. */
function run(url: string, copy: string): { pairsPerSecond: number; latencyMsAverage: number } {
  const out = execFileSync(
    pgbench,
    [
      "-n",
      "-M",
      values.mode!,
      "-f",
      copy,
      "-D",
      `accounts=${accounts}`,
      "-c",
      `${clients}`,
      "-j",
      "2",
    ].concat(["-T", values.seconds!, url]),
    { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] },
  );
  const tps = /^tps = ([\d.]+)/m.exec(out);
  const latency = /^latency average = ([\d.]+) ms/m.exec(out);
  if (tps === null) throw new Error(`pgbench printed no tps:\n${out}`);
  return { pairsPerSecond: Math.round(Number(tps[1])), latencyMsAverage: Number(latency?.[1]) };
}

const server = await startPostgres();
// pgbench may run as the postgres user (as root, the helpers do): give it a copy it can read.
const dir = mkdtempSync(join(tmpdir(), "tollgate-pgbench-"));
chmodSync(dir, 0o755);
try {
  const copy = join(dir, "pg-pair.sql");
  copyFileSync(script, copy);
  if (values.variant === undefined) {
    process.stdout.write(`${JSON.stringify({ accounts, clients, ...run(await database(), copy) })}\n`);
  } else {
    const built = await database();
    const changed = await database(readFileSync(values.variant, "utf8"));
    const figures = { built: [] as number[], variant: [] as number[] };
    for (let round = 0; round < Number(values.rounds); round++) {
      const order = round % 2 === 0 ? (["built", "variant"] as const) : (["variant", "built"] as const);
      for (const which of order)
        figures[which].push(run(which === "built" ? built : changed, copy).pairsPerSecond);
    }
    process.stdout.write(
      `${JSON.stringify({ accounts, clients, variant: values.variant, pairsPerSecond: figures })}\n`,
    );
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
  await server.stop();
}
