import { parseArgs } from "node:util";
import type { Config } from "../config/config.js";
import { maskedUrl } from "../config/read.js";
import { openPostgres } from "../store/postgres/database.js";
import { type MigrationReport, migrateStore, openSourceDatabase } from "../store/postgres/migrate-store.js";
import { table, UsageError } from "./command.js";

const HELP = `Usage: tollgate migrate-store [--to POSTGRES_URL] [--json]

Copies the SQLite database of TOLLGATE_DATA_DIR into an empty PostgreSQL database (--to, else
TOLLGATE_DATABASE_URL), in one transaction, then checks the copy: every table's row count, every
balance, and the ledger audit on both sides. Exits non-zero, saying why, when it refuses (the target
holds data, the SQLite schema is not this build's latest, a table it does not know) or when the
check finds a difference.

Stop the gateway and the worker first (tollgate serve, tollgate worker, tollgate dev): what they
write during the copy would not be copied. The SQLite file is opened read-only and never changed.
See docs/store.md, "Moving a SQLite ledger to PostgreSQL".
`;

/**
 * Runs `tollgate migrate-store`: on the database files themselves, not through the core (the
 * gateway is stopped). Resolves to the exit code; a refusal or a failed check throws.
 */
export async function runMigrateStore(args: readonly string[], config: Config): Promise<number> {
  let values: { to?: string | undefined; json?: boolean | undefined; help?: boolean | undefined };
  try {
    ({ values } = parseArgs({
      args: [...args],
      options: { to: { type: "string" }, json: { type: "boolean" }, help: { type: "boolean", short: "h" } },
      strict: true,
    }));
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  if (values.help === true) {
    process.stdout.write(HELP);
    return 0;
  }
  const url = values.to || config.databaseUrl;
  if (url === undefined)
    throw new UsageError("migrate-store needs --to POSTGRES_URL (or TOLLGATE_DATABASE_URL)");
  if (!/^postgres(ql)?:\/\//.test(url))
    throw new UsageError("--to must be a postgres:// or postgresql:// URL");

  const db = openSourceDatabase(config.dataDir);
  try {
    // The migration lock needs a real session: TOLLGATE_DATABASE_DIRECT_URL when the store's URL
    // is the one used and goes through a pooler (docs/deployment.md, "Behind PgBouncer").
    const direct = values.to ? url : (config.databaseDirectUrl ?? url);
    const pool = await openPostgres(url, 2, direct);
    try {
      const report = await migrateStore(db, pool);
      process.stdout.write(
        values.json === true ? `${JSON.stringify(toJson(report, db.name, url))}\n` : humanReport(report),
      );
      if (!report.verification.ok) {
        throw new Error(
          `the copy does not match its source (${report.verification.mismatches.length} differences, listed above): do not start the hosts on ${maskedUrl(url)}`,
        );
      }
      return 0;
    } finally {
      await pool.end();
    }
  } finally {
    db.close();
  }
}

/** The report as JSON: camelCase keys, bigints as decimal strings. */
function toJson(report: MigrationReport, source: string, url: string): unknown {
  return JSON.parse(
    JSON.stringify({ source, target: maskedUrl(url), ...report }, (_key, value) =>
      typeof value === "bigint" ? value.toString() : value,
    ),
  );
}

function humanReport(report: MigrationReport): string {
  const v = report.verification;
  const counts = new Map(v.rowCounts.map((c) => [c.table, c]));
  const rows = report.tables.map((t) => {
    const count = counts.get(t.table);
    return [
      t.table,
      String(t.rows),
      String(count?.sqlite ?? ""),
      String(count?.postgres ?? ""),
      count !== undefined && count.sqlite === count.postgres ? "" : "DIFFERS",
    ];
  });
  const audit = (problems: readonly string[]) =>
    problems.length === 0 ? "no problems" : `${problems.length} problems:\n    ${problems.join("\n    ")}`;
  const lines = [
    `Copied ${report.rowsCopied} rows of ${report.tables.length} tables (SQLite schema version ${report.schemaVersion}), in one transaction.`,
    "",
    table(["table", "copied", "sqlite rows", "postgres rows", ""], rows),
    "",
    `Calls' revenue moved onto the paying accounts' own balance rows, where PostgreSQL's ledger keeps it: ${report.revenueRows} rows.`,
    `x402 payments' system side moved onto the paying accounts' own balance rows, where PostgreSQL's ledger keeps it: ${report.x402Rows} rows.`,
    `Sequences moved past the copied rows: ${report.sequences.map((s) => `${s.table}.${s.column} → ${s.next}`).join(", ")}.`,
    `Balances compared (SQLite row against PostgreSQL's, all four totals): ${v.balancesCompared}, ${v.balancesMismatched} differ.`,
    `Ledger audit on SQLite: ${audit(v.audit.sqlite)}`,
    `Ledger audit on PostgreSQL: ${audit(v.audit.postgres)}`,
    "",
  ];
  if (v.ok) {
    lines.push(
      'Verified: the PostgreSQL database holds the same ledger. Next: docs/store.md, "Moving a SQLite ledger to PostgreSQL".',
    );
  } else {
    lines.push(`MISMATCH (${v.mismatches.length}):`, ...v.mismatches.map((m) => `  ${m}`));
  }
  return `${lines.join("\n")}\n`;
}
