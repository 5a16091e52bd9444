/**
 * Moving a SQLite ledger to PostgreSQL (`tollgate migrate-store`): every table copied in one
 * PostgreSQL transaction, ids and seq values kept, and then checked from both sides — row counts,
 * every balance, and the ledger audit.
 */
import { join } from "node:path";
import Database from "better-sqlite3";
import type pg from "pg";
import { auditLedger } from "../sqlite/audit.js";
import { DATABASE_FILE, type Db } from "../sqlite/database.js";
import { migrations } from "../sqlite/migrations.js";
import { auditPostgres } from "./audit.js";
import { inTransaction } from "./database.js";

/**
 * How one SQLite table becomes rows of its PostgreSQL twin. Columns are matched by name (both
 * schemas name them alike); `derived` fills PostgreSQL columns SQLite has no column for.
 */
interface TableCopy {
  readonly table: string;
  /** PostgreSQL column → the SQLite expression that fills it. */
  readonly derived?: Readonly<Record<string, string>>;
  /** How a row meets one the PostgreSQL migrations already wrote. */
  readonly onConflict?: string;
  /** What PostgreSQL counts as the table's rows, when not its rows (FROM clause). */
  readonly counted?: string;
}

/**
 * Every table either store has, in foreign-key order (a row's references are copied before it).
 * A SQLite table missing here stops the copy before anything is written: a future migration's
 * table is never silently left behind.
 */
const TABLES: readonly TableCopy[] = [
  // SQLite's rowid is the order accounts and keys were created in; PostgreSQL keeps it as seq.
  { table: "accounts", derived: { seq: "rowid" } },
  { table: "api_keys", derived: { seq: "rowid" } },
  // PostgreSQL's migration 1 wrote the counter's one row (n = 0): it takes SQLite's count.
  { table: "auth_version", onConflict: "ON CONFLICT (id) DO UPDATE SET n = EXCLUDED.n" },
  { table: "sign_in_nonces" },
  { table: "wallet_identities" },
  { table: "sessions" },
  { table: "billing_accounts" },
  { table: "ledger_entries" },
  { table: "holds" },
  { table: "hold_resolutions" },
  { table: "open_holds" },
  // Raises of holds (and open_holds.raised, their running total while open, copied with its row).
  { table: "hold_raises" },
  // A SQLite balance is one row; in PostgreSQL it is shard 0 (a user account's only row, one of a
  // system account's up to 16, all read as their sum), system:revenue's less what
  // tollgate_revenue_onto_accounts moves onto the paying accounts' rows, system:x402's less what
  // tollgate_x402_onto_accounts moves.
  {
    table: "ledger_balances",
    derived: { shard: "0", revenue_pending: "0", revenue_posted: "0", x402_in: "0", x402_out: "0" },
    counted: "(SELECT DISTINCT account, chain FROM ledger_balances) b",
  },
  { table: "deposit_addresses" },
  { table: "chain_cursors" },
  { table: "deposits" },
  { table: "pending_deposits" },
  { table: "onchain_backing" },
  { table: "chain_transfers" },
  { table: "settlement_intents" },
  // Kept answers of idempotent calls: a retry after the move still gets its first answer.
  { table: "idempotency_keys" },
  // Caps on what accounts and keys may spend, and what each key spent per day: they hold after the move.
  { table: "spend_caps" },
  { table: "spend_days" },
  // Keyless payers' x402 payments (collections and clearings included): an open one, authorised
  // or collected, is closed with its return after the move.
  { table: "x402_payments" },
];

/** Tables whose rows PostgreSQL's migrations write themselves: not data an operator put there. */
const SEEDED = new Set(["auth_version"]);

/** The PostgreSQL types a SQLite value is converted to; any other type stops the copy. */
type PgType = "bigint" | "integer" | "smallint" | "boolean" | "bytea" | "text";
const PG_TYPES = new Set<string>(["bigint", "integer", "smallint", "boolean", "bytea", "text"]);

/** Above PostgreSQL's 65,535 bind parameters per statement no batch may go. */
const MAX_PARAMETERS = 60_000;

/** Rows of one table copied. */
export interface TableCount {
  readonly table: string;
  readonly rows: number;
}

/** A sequence moved past the copied rows: the next row inserted gets `next`. */
export interface SequenceMove {
  readonly table: string;
  readonly column: string;
  readonly next: bigint;
}

/** One (account, chain)'s four running totals. */
export interface BalanceTotals {
  readonly debitsPending: bigint;
  readonly debitsPosted: bigint;
  readonly creditsPending: bigint;
  readonly creditsPosted: bigint;
}

/** A balance that differs between the stores (`undefined`: no row on that side). */
export interface BalanceMismatch {
  readonly account: string;
  readonly chain: string;
  readonly sqlite: BalanceTotals | undefined;
  readonly postgres: BalanceTotals | undefined;
}

/** What the stores were compared on after the copy, and whether they agree. */
export interface Verification {
  /** Counts equal, every balance identical, and the audit the same on both. */
  readonly ok: boolean;
  /** Rows per table; for ledger_balances, PostgreSQL's (account, chain) pairs, not its shard rows. */
  readonly rowCounts: readonly {
    readonly table: string;
    readonly sqlite: number;
    readonly postgres: number;
  }[];
  /** (account, chain) pairs compared: the union of both sides. */
  readonly balancesCompared: number;
  /** How many differ; `balanceMismatches` lists the first {@link MISMATCHES_LISTED}. */
  readonly balancesMismatched: number;
  readonly balanceMismatches: readonly BalanceMismatch[];
  /** The ledger audit's findings on each side (empty when sound), sorted. */
  readonly audit: { readonly sqlite: readonly string[]; readonly postgres: readonly string[] };
  /** Every disagreement, as sentences (empty when `ok`). */
  readonly mismatches: readonly string[];
}

/** What {@link migrateStore} copied and what it found when it compared. */
export interface MigrationReport {
  /** The SQLite schema version copied (this build's latest). */
  readonly schemaVersion: number;
  readonly tables: readonly TableCount[];
  readonly rowsCopied: number;
  /**
   * Accounts' balance rows given their part of system:revenue (what their open holds hold, what
   * their charges charged), where PostgreSQL's ledger keeps it (migration 18).
   */
  readonly revenueRows: number;
  /**
   * Accounts' balance rows given their part of system:x402 (what their x402 payments credited
   * them, what they returned), where PostgreSQL's ledger keeps it (migration 19).
   */
  readonly x402Rows: number;
  readonly sequences: readonly SequenceMove[];
  readonly verification: Verification;
}

/** Options of {@link migrateStore}. */
export interface MigrateOptions {
  /** Most rows read from SQLite and inserted into PostgreSQL at once (default 1000). */
  readonly batchSize?: number;
  /** How long the copy waits for a table lock before giving up (default 10 s). */
  readonly lockTimeoutMs?: number;
}

/** Balance mismatches listed one by one; beyond this they are only counted. */
export const MISMATCHES_LISTED = 100;

/**
 * Opens the SQLite database of `dataDir` read-only, without migrating it (`openDatabase` would):
 * the source of a move is never written.
 */
export function openSourceDatabase(dataDir: string): Db {
  const path = join(dataDir, DATABASE_FILE);
  let db: Db;
  try {
    db = new Database(path, { readonly: true, fileMustExist: true });
  } catch (error) {
    throw new Error(`cannot open the SQLite database ${path}: ${(error as Error).message}`, { cause: error });
  }
  db.pragma("busy_timeout = 5000");
  return db;
}

/**
 * Copies every table of the SQLite database `db` into the PostgreSQL database behind `pool`
 * (already migrated, e.g. by `openPostgres`) in one transaction, in foreign-key order and in
 * batches, keeping ids and seq values and moving each sequence past the copied rows; then, once
 * committed, compares the two ({@link verifyMigration}). Throws, writing nothing, when the SQLite
 * schema is not this build's latest, when either side has a table or column the other lacks, or
 * when the target already holds data.
 */
export async function migrateStore(
  db: Db,
  pool: pg.Pool,
  options: MigrateOptions = {},
): Promise<MigrationReport> {
  const batchSize = options.batchSize ?? 1000;
  const schemaVersion = checkSourceVersion(db);
  const plans = await planCopies(db, pool);

  const tables: TableCount[] = [];
  const sequences: SequenceMove[] = [];
  let revenueRows = 0;
  let x402Rows = 0;
  // One read transaction on SQLite: every table is copied from the same snapshot.
  db.exec("BEGIN");
  try {
    await inTransaction(pool, async (client) => {
      await client.query(
        `SET LOCAL lock_timeout = ${Math.max(1, Math.trunc(options.lockTimeoutMs ?? 10_000))}`,
      );
      // Nobody else writes the target while it is filled (and a host left running is noticed: the
      // lock times out instead of the copy racing it).
      await client.query(`LOCK TABLE ${plans.map((p) => quote(p.table)).join(", ")} IN EXCLUSIVE MODE`);
      await refuseNonEmpty(client, plans);
      for (const plan of plans)
        tables.push({ table: plan.table, rows: await copyTable(db, client, plan, batchSize) });
      revenueRows = await revenueOntoAccounts(client);
      x402Rows = await x402OntoAccounts(client);
      for (const plan of plans) {
        for (const column of plan.serials) sequences.push(await moveSequence(client, plan.table, column));
      }
    });
  } finally {
    db.exec("ROLLBACK");
  }

  return {
    schemaVersion,
    tables,
    rowsCopied: tables.reduce((sum, t) => sum + t.rows, 0),
    revenueRows,
    x402Rows,
    sequences,
    verification: await verifyMigration(db, pool),
  };
}

/**
 * Compares a SQLite database with the PostgreSQL one it was copied to: the row count of every
 * table, every (account, chain) balance (the SQLite row against the sum of PostgreSQL's shard
 * rows, all four totals), and the ledger audit run on each. Reads in pages, so a large ledger is
 * never held in memory at once.
 */
export async function verifyMigration(db: Db, pool: pg.Pool, pageSize = 1000): Promise<Verification> {
  const mismatches: string[] = [];

  const rowCounts: { table: string; sqlite: number; postgres: number }[] = [];
  for (const { table, counted } of TABLES) {
    const sqlite = Number(
      db
        .prepare(`SELECT COUNT(*) FROM ${quote(table)}`)
        .pluck()
        .get(),
    );
    const postgres = Number(
      (await pool.query(`SELECT COUNT(*)::text AS n FROM ${counted ?? quote(table)}`)).rows[0].n,
    );
    rowCounts.push({ table, sqlite, postgres });
    if (sqlite !== postgres) mismatches.push(`${table}: ${sqlite} rows in SQLite, ${postgres} in PostgreSQL`);
  }

  const balances = await compareBalances(db, pool, pageSize);
  for (const m of balances.listed) mismatches.push(describeBalanceMismatch(m));
  if (balances.mismatched > balances.listed.length)
    mismatches.push(`… and ${balances.mismatched - balances.listed.length} more balances differ`);

  const sqliteAudit = auditLedger(db).sort();
  const postgresAudit = (await auditPostgres(pool)).sort();
  const onlySqlite = sqliteAudit.filter((p) => !postgresAudit.includes(p));
  const onlyPostgres = postgresAudit.filter((p) => !sqliteAudit.includes(p));
  for (const p of onlySqlite) mismatches.push(`audit finds only in SQLite: ${p}`);
  for (const p of onlyPostgres) mismatches.push(`audit finds only in PostgreSQL: ${p}`);
  if (onlySqlite.length + onlyPostgres.length === 0 && sqliteAudit.length !== postgresAudit.length)
    mismatches.push(
      `the audit finds ${sqliteAudit.length} problems in SQLite, ${postgresAudit.length} in PostgreSQL`,
    );

  return {
    ok: mismatches.length === 0,
    rowCounts,
    balancesCompared: balances.compared,
    balancesMismatched: balances.mismatched,
    balanceMismatches: balances.listed,
    audit: { sqlite: sqliteAudit, postgres: postgresAudit },
    mismatches,
  };
}

/** This build's latest SQLite schema version, or an error saying how the source differs. */
function checkSourceVersion(db: Db): number {
  const version = db.pragma("user_version", { simple: true }) as number;
  const latest = migrations.at(-1)!.version;
  if (version < latest) {
    throw new Error(
      `the SQLite database is at schema version ${version}, this build's latest is ${latest}: ` +
        "bring it up to date first (any tollgate command on its data dir without TOLLGATE_DATABASE_URL, e.g. `tollgate account list`, applies the migrations), then run migrate-store again",
    );
  }
  if (version > latest) {
    throw new Error(
      `the SQLite database is at schema version ${version}, newer than this build knows (${latest}): run migrate-store from the build that wrote it`,
    );
  }
  return version;
}

/** A table's copy as planned from both schemas. */
interface CopyPlan {
  readonly table: string;
  /** PostgreSQL columns in insert order, with their types. */
  readonly columns: readonly { readonly name: string; readonly type: PgType }[];
  /** The SQLite expression read for each column, in the same order. */
  readonly selects: readonly string[];
  readonly onConflict: string;
  /** Columns filled by a sequence (BIGSERIAL), to move past the copied rows. */
  readonly serials: readonly string[];
}

/**
 * Matches the two schemas table by table and column by column, before anything is written:
 * every SQLite table must be one this code copies, and every column must have its twin.
 */
async function planCopies(db: Db, pool: pg.Pool): Promise<CopyPlan[]> {
  const known = new Set(TABLES.map((t) => t.table));
  const sqliteTables = db
    .prepare<[], string>("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
    .pluck()
    .all();
  const unknown = sqliteTables.filter((t) => !known.has(t));
  if (unknown.length > 0) {
    throw new Error(
      `the SQLite database has tables migrate-store does not know how to copy: ${unknown.join(", ")} ` +
        "(a migration newer than this copy code: add them to TABLES in src/store/postgres/migrate-store.ts)",
    );
  }

  const { rows } = await pool.query<{
    table_name: string;
    column_name: string;
    data_type: string;
    column_default: string | null;
  }>(
    `SELECT table_name, column_name, data_type, column_default FROM information_schema.columns
      WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position`,
  );
  const plans: CopyPlan[] = [];
  const problems: string[] = [];
  for (const spec of TABLES) {
    const pgColumns = rows.filter((r) => r.table_name === spec.table);
    const sqliteColumns = db
      .prepare<[], { name: string }>(`SELECT name FROM pragma_table_info('${spec.table}')`)
      .all()
      .map((c) => c.name);
    if (sqliteColumns.length === 0) problems.push(`${spec.table} is missing in SQLite`);
    if (pgColumns.length === 0) problems.push(`${spec.table} is missing in PostgreSQL`);
    if (sqliteColumns.length === 0 || pgColumns.length === 0) continue;

    const derived = spec.derived ?? {};
    const pgNames = new Set(pgColumns.map((c) => c.column_name));
    const sqliteOnly = sqliteColumns.filter((c) => !pgNames.has(c));
    const pgOnly = [...pgNames].filter((c) => !sqliteColumns.includes(c) && derived[c] === undefined);
    if (sqliteOnly.length > 0)
      problems.push(`${spec.table}: SQLite column(s) ${sqliteOnly.join(", ")} have no PostgreSQL twin`);
    if (pgOnly.length > 0)
      problems.push(`${spec.table}: PostgreSQL column(s) ${pgOnly.join(", ")} have no SQLite source`);
    const untyped = pgColumns.filter((c) => !PG_TYPES.has(c.data_type));
    for (const c of untyped)
      problems.push(`${spec.table}.${c.column_name}: no conversion to PostgreSQL type ${c.data_type}`);
    plans.push({
      table: spec.table,
      columns: pgColumns.map((c) => ({ name: c.column_name, type: c.data_type as PgType })),
      selects: pgColumns.map((c) => derived[c.column_name] ?? quote(c.column_name)),
      onConflict: spec.onConflict ?? "",
      serials: pgColumns.filter((c) => c.column_default?.startsWith("nextval(")).map((c) => c.column_name),
    });
  }
  if (problems.length > 0)
    throw new Error(`the SQLite and PostgreSQL schemas do not match: ${problems.join("; ")}`);
  return plans;
}

/** Refuses a target that already holds data: a copy goes into an empty database only. */
async function refuseNonEmpty(client: pg.PoolClient, plans: readonly CopyPlan[]): Promise<void> {
  const holding: string[] = [];
  for (const { table } of plans) {
    if (SEEDED.has(table)) continue;
    const { rows } = await client.query(`SELECT EXISTS (SELECT 1 FROM ${quote(table)}) AS any`);
    if (rows[0].any === true) holding.push(table);
  }
  if (holding.length > 0) {
    throw new Error(
      `the PostgreSQL database already holds data (in ${holding.join(", ")}): migrate-store copies into an empty database only, nothing was written`,
    );
  }
}

/** Copies one table in batches, keyed by SQLite's rowid; returns the rows copied. */
async function copyTable(db: Db, client: pg.PoolClient, plan: CopyPlan, batchSize: number): Promise<number> {
  const perBatch = Math.max(1, Math.min(batchSize, Math.floor(MAX_PARAMETERS / plan.columns.length)));
  const read = db
    .prepare(
      `SELECT rowid AS migrate_rowid, ${plan.selects.join(", ")} FROM ${quote(plan.table)}
        WHERE rowid > ? ORDER BY rowid LIMIT ?`,
    )
    .raw(true)
    .safeIntegers(true);
  const columnList = plan.columns.map((c) => quote(c.name)).join(", ");
  let after = -(2n ** 63n);
  let copied = 0;
  for (;;) {
    const rows = read.all(after, perBatch) as unknown[][];
    if (rows.length === 0) return copied;
    const values: unknown[] = [];
    const tuples: string[] = [];
    for (const row of rows) {
      const rowid = row[0] as bigint;
      const placeholders: string[] = [];
      plan.columns.forEach((column, i) => {
        values.push(toPostgres(row[i + 1], column.type, plan.table, column.name, rowid));
        placeholders.push(`$${values.length}`);
      });
      tuples.push(`(${placeholders.join(", ")})`);
      after = rowid;
    }
    await client.query(
      `INSERT INTO ${quote(plan.table)} (${columnList}) VALUES ${tuples.join(", ")} ${plan.onConflict}`,
      values,
    );
    copied += rows.length;
  }
}

/** One SQLite value (integers read as bigints) as a parameter for a PostgreSQL column. */
function toPostgres(value: unknown, type: PgType, table: string, column: string, rowid: bigint): unknown {
  if (value === null) return null;
  const wrong = () =>
    new Error(`${table}.${column} (rowid ${rowid}): cannot copy ${typeof value} ${String(value)} as ${type}`);
  switch (type) {
    case "bigint":
    case "integer":
    case "smallint":
      if (typeof value !== "bigint") throw wrong();
      return value.toString();
    case "boolean":
      if (value !== 0n && value !== 1n) throw wrong();
      return value === 1n;
    case "bytea":
      if (!Buffer.isBuffer(value)) throw wrong();
      return value;
    case "text":
      if (typeof value !== "string") throw wrong();
      return value;
  }
}

/**
 * PostgreSQL's ledger (postgres/ledger.ts) keeps system:revenue's part of each call on the paying
 * account's own balance row (revenue_pending: what its open holds hold; revenue_posted: what its
 * charges charged) and takes a release from there. Copied as SQLite has it, that revenue is on
 * system:revenue's row: tollgate_revenue_onto_accounts (migration 18) moves it, in the copy's
 * transaction, leaving system:revenue's totals (ledger_totals) as SQLite's.
 */
async function revenueOntoAccounts(client: pg.PoolClient): Promise<number> {
  try {
    return (await client.query<{ moved: number }>("SELECT tollgate_revenue_onto_accounts() AS moved"))
      .rows[0]!.moved;
  } catch (error) {
    throw new Error(
      `the calls' revenue does not fit the accounts and system balances it moves between (is the SQLite ledger sound? its audit says): ${(error as Error).message}`,
      { cause: error },
    );
  }
}

/**
 * PostgreSQL's ledger (postgres/x402.ts) keeps system:x402's part of each x402 payment on the
 * paying account's own balance row (x402_in: what its payments credited it; x402_out: what it
 * returned). Copied as SQLite has it, that part is on system:x402's row:
 * tollgate_x402_onto_accounts (migration 19) moves it, in the copy's transaction, leaving
 * system:x402's totals (ledger_totals) as SQLite's.
 */
async function x402OntoAccounts(client: pg.PoolClient): Promise<number> {
  try {
    return (await client.query<{ moved: number }>("SELECT tollgate_x402_onto_accounts() AS moved")).rows[0]!
      .moved;
  } catch (error) {
    throw new Error(
      `the x402 payments do not fit the accounts and system balances they move between (is the SQLite ledger sound? its audit says): ${(error as Error).message}`,
      { cause: error },
    );
  }
}

/** Sets a column's sequence so that its next value is one past the column's largest. */
async function moveSequence(client: pg.PoolClient, table: string, column: string): Promise<SequenceMove> {
  const { rows } = await client.query(
    `SELECT setval(pg_get_serial_sequence($1, $2), COALESCE(MAX(${quote(column)}), 0) + 1, false)::text AS next
       FROM ${quote(table)}`,
    [table, column],
  );
  return { table, column, next: BigInt(rows[0].next) };
}

type BalanceKey = readonly [account: string, chain: string];

/**
 * Walks SQLite's balances in (account, chain) order a page at a time and reads PostgreSQL's sums
 * for the same key range (byte order on both sides: SQLite's BINARY collation, PostgreSQL's "C"),
 * then whatever PostgreSQL has past SQLite's last key.
 */
async function compareBalances(
  db: Db,
  pool: pg.Pool,
  pageSize: number,
): Promise<{ compared: number; mismatched: number; listed: BalanceMismatch[] }> {
  const columns = "account, chain, debits_pending, debits_posted, credits_pending, credits_posted";
  const first = db
    .prepare(`SELECT ${columns} FROM ledger_balances ORDER BY account, chain LIMIT ?`)
    .safeIntegers(true);
  const next = db
    .prepare(
      `SELECT ${columns} FROM ledger_balances WHERE (account, chain) > (?, ?) ORDER BY account, chain LIMIT ?`,
    )
    .safeIntegers(true);
  const listed: BalanceMismatch[] = [];
  let compared = 0;
  let mismatched = 0;
  const differ = (m: BalanceMismatch) => {
    mismatched++;
    if (listed.length < MISMATCHES_LISTED) listed.push(m);
  };

  let after: BalanceKey | undefined;
  for (;;) {
    const page = (after === undefined ? first.all(pageSize) : next.all(after[0], after[1], pageSize)) as {
      account: string;
      chain: string;
      debits_pending: bigint;
      debits_posted: bigint;
      credits_pending: bigint;
      credits_posted: bigint;
    }[];
    if (page.length === 0) break;
    const last = page.at(-1)!;
    const upTo: BalanceKey = [last.account, last.chain];
    const postgres = await postgresBalances(pool, after, upTo);
    for (const row of page) {
      compared++;
      const key = balanceKey(row.account, row.chain);
      const sqlite: BalanceTotals = {
        debitsPending: row.debits_pending,
        debitsPosted: row.debits_posted,
        creditsPending: row.credits_pending,
        creditsPosted: row.credits_posted,
      };
      const theirs = postgres.get(key);
      postgres.delete(key);
      if (theirs === undefined || !sameTotals(sqlite, theirs))
        differ({ account: row.account, chain: row.chain, sqlite, postgres: theirs });
    }
    for (const [key, theirs] of postgres) {
      compared++;
      const [account, chain] = key.split("\u0000") as [string, string];
      differ({ account, chain, sqlite: undefined, postgres: theirs });
    }
    after = upTo;
  }
  // Balances PostgreSQL has beyond SQLite's last one (all of them when SQLite has none).
  for (const [key, theirs] of await postgresBalances(pool, after, undefined)) {
    compared++;
    const [account, chain] = key.split("\u0000") as [string, string];
    differ({ account, chain, sqlite: undefined, postgres: theirs });
  }
  return { compared, mismatched, listed };
}

/**
 * PostgreSQL's balances (the sum of each pair's shard rows, system:revenue's and system:x402's
 * with the accounts' revenue and x402 columns: ledger_totals) with keys in (`after`, `upTo`].
 */
async function postgresBalances(
  pool: pg.Pool,
  after: BalanceKey | undefined,
  upTo: BalanceKey | undefined,
): Promise<Map<string, BalanceTotals>> {
  const key = `ROW(account COLLATE "C", chain COLLATE "C")`;
  const { rows } = await pool.query<{
    account: string;
    chain: string;
    debits_pending: string;
    debits_posted: string;
    credits_pending: string;
    credits_posted: string;
  }>(
    `SELECT account, chain, SUM(debits_pending)::text AS debits_pending, SUM(debits_posted)::text AS debits_posted,
            SUM(credits_pending)::text AS credits_pending, SUM(credits_posted)::text AS credits_posted
       FROM ledger_totals
      WHERE ($1::text IS NULL OR ${key} > ROW($1::text, $2::text))
        AND ($3::text IS NULL OR ${key} <= ROW($3::text, $4::text))
      GROUP BY account, chain`,
    [after?.[0] ?? null, after?.[1] ?? null, upTo?.[0] ?? null, upTo?.[1] ?? null],
  );
  return new Map(
    rows.map((r) => [
      balanceKey(r.account, r.chain),
      {
        debitsPending: BigInt(r.debits_pending),
        debitsPosted: BigInt(r.debits_posted),
        creditsPending: BigInt(r.credits_pending),
        creditsPosted: BigInt(r.credits_posted),
      },
    ]),
  );
}

function balanceKey(account: string, chain: string): string {
  return `${account}\u0000${chain}`;
}

function sameTotals(a: BalanceTotals, b: BalanceTotals): boolean {
  return (
    a.debitsPending === b.debitsPending &&
    a.debitsPosted === b.debitsPosted &&
    a.creditsPending === b.creditsPending &&
    a.creditsPosted === b.creditsPosted
  );
}

function describeBalanceMismatch(m: BalanceMismatch): string {
  const where = `balance of ${m.account} on ${m.chain}`;
  if (m.sqlite === undefined) return `${where}: only in PostgreSQL`;
  if (m.postgres === undefined) return `${where}: missing in PostgreSQL`;
  const fields = (Object.keys(m.sqlite) as (keyof BalanceTotals)[])
    .filter((f) => m.sqlite![f] !== m.postgres![f])
    .map((f) => `${f} ${m.sqlite![f]} in SQLite, ${m.postgres![f]} in PostgreSQL`);
  return `${where}: ${fields.join("; ")}`;
}

/** A quoted SQL identifier (every name here is one of this file's or a schema's own). */
function quote(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}
