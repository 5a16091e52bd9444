import pg from "pg";
import { isSystem } from "../shared/ledger-rows.js";

/*
 * What every PostgreSQL port's queries share: exact integers, retries of deadlock victims, the
 * system accounts' shards, an account's totals.
 */

/** A row as it comes back from a query that reads money: every int8 and numeric a bigint. */
export type Raw = Record<string, unknown>;

const INT8_OID = 20;
const NUMERIC_OID = 1700;

/** The pool parses int8 as a JS number (times, counts); money needs every integer exact. */
const EXACT_INTEGERS = {
  getTypeParser: (oid: number, format?: "text" | "binary") =>
    oid === INT8_OID || oid === NUMERIC_OID
      ? (value: string) => BigInt(value)
      : (pg.types.getTypeParser(oid, format) as (value: string) => unknown),
};

/** Where a query runs: the pool (one statement, its own transaction) or a transaction's client. */
export type Queryable = pg.Pool | pg.PoolClient;

/**
 * Pools whose connections are PostgreSQL's own sessions (no transaction pooler between, checked
 * at open: database.ts): the calls' hot statements are prepared on them, by name, once per
 * connection. Behind a transaction pooler a statement prepared on one server session is
 * unknown to the next one the pooler picks, so they are sent unnamed (parsed and planned each time).
 */
const sessionPools = new WeakSet<pg.Pool>();

/** Lets `pool`'s named statements be prepared once per connection (see sessionPools). */
export function keepPreparedStatements(pool: pg.Pool): void {
  sessionPools.add(pool);
}

/**
 * Runs a query whose integers (int8, numeric: money, and SUMs of it) come back as bigints. `name`:
 * a statement on every call's path (a hold, a resolution), prepared on each connection the first
 * time and then only bound and executed, where the pool allows it (keepPreparedStatements): the
 * server parses and plans it once per connection instead of once per call (docs/store.md).
 */
export async function exactRows(
  db: Queryable,
  text: string,
  values: readonly unknown[],
  name?: string,
): Promise<Raw[]> {
  const named = name !== undefined && sessionPools.has(db as pg.Pool);
  return (
    await db.query<Raw>({ ...(named ? { name } : {}), text, values: [...values], types: EXACT_INTEGERS })
  ).rows;
}

/** The SQLSTATE of a PostgreSQL error, if `error` is one. */
export function sqlState(error: unknown): string | undefined {
  return error instanceof Error && "code" in error && typeof error.code === "string" ? error.code : undefined;
}

/**
 * Runs `work` again when PostgreSQL chose it as a deadlock victim or refused it as a
 * serialization failure, or failed it with one of the SQLSTATEs in `also` (see RESOLVE); `work`
 * must be a whole transaction (or one statement), so nothing of the failed attempt remains. Rare
 * by design: every writer locks the account's balance row before any shard or backing row, and
 * the sweeper locks only users' rows, in key order.
 */
export async function retrying<T>(work: () => Promise<T>, also: readonly string[] = []): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await work();
    } catch (error) {
      const state = sqlState(error);
      if (attempt >= 5 || (state !== "40001" && state !== "40P01" && !also.includes(state ?? "")))
        throw error;
    }
  }
}

/**
 * check_violation. PostgreSQL checks a row's CHECK constraints on the version an UPDATE computed
 * from its statement's snapshot, before it finds that version updated by a transaction that
 * committed since and recomputes it from the newest one (EvalPlanQual): a statement that takes
 * an amount off a row another transaction added to after the snapshot can be refused although
 * the newest version allows it. Nothing of the statement remains; run again, it sees the newest.
 */
export const CHECK_VIOLATION = "23514";

/** How many rows a system account's totals are spread over (migration 4). */
export const SYSTEM_SHARDS = 16;

/**
 * The balance row a transaction adds to for `account`: a user's single row, or a random shard
 * of a system account (only ever added to, never taken from, so any shard will do). A call's
 * revenue (a hold's pending amount, its charge) is not on system:revenue's rows at all but on
 * the paying account's own row (migration 18), so that releasing it takes it from that row;
 * an x402 payment's system:x402 side is on that row too (migration 19). What still takes a
 * shard (system:deposits, system:withdrawals, an operator's credit) is off the calls' path.
 */
export function shardFor(account: string): { shard: number; mayOverdraw: boolean } {
  return isSystem(account)
    ? { shard: Math.floor(Math.random() * SYSTEM_SHARDS), mayOverdraw: true }
    : { shard: 0, mayOverdraw: false };
}

/**
 * An account's totals on a chain: the sum of its rows (a system account's shards; for
 * system:revenue, with every account's revenue columns: the view ledger_totals, migration 18).
 */
export const BALANCE = `
  SELECT COALESCE(SUM(debits_pending), 0) AS debits_pending, COALESCE(SUM(debits_posted), 0) AS debits_posted,
         COALESCE(SUM(credits_pending), 0) AS credits_pending, COALESCE(SUM(credits_posted), 0) AS credits_posted
    FROM ledger_totals WHERE account = $1::text AND chain = $2::text`;

/**
 * Takes an account's settlements' releases on a chain onto its balance row (migration 22's
 * tollgate_fold_releases), for a write that debits the row alone (a raise, an x402 return, a
 * withdrawal) where the account's totals cover it. In `client`'s transaction, or on its own.
 */
export async function foldReleases(db: Queryable, account: string, chain: string): Promise<void> {
  await db.query("SELECT tollgate_fold_releases($1::text, $2::text)", [account, chain]);
}

/** How often a refused hold or withdrawal is tried again when the funds it lacked appeared meanwhile. */
export const REFUSAL_RETRIES = 3;
