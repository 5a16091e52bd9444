/**
 * The PostgreSQL store's connection pool and its numbered migrations (`pg`, pooled). Chosen by
 * TOLLGATE_DATABASE_URL once every port has a PostgreSQL implementation; today: accounts, keys
 * and sign-in (see docs/store.md).
 */
import pg from "pg";
import { PG_MIGRATIONS } from "./migrations.js";
import { keepPreparedStatements } from "./queries.js";
import { assertSameDatabase, assertSessionLevel } from "./session-check.js";

/** int8 (BIGINT) columns come back as JS numbers: every one here is a millisecond time or a count. */
const INT8_OID = 20;

/** The advisory lock key under which a host migrates: hosts that start together take turns. */
const MIGRATION_LOCK = 7_450_001;

/**
 * Opens a pool on `url` and brings its schema up to date. `directUrl`: where the migration's
 * session lock is taken, PostgreSQL itself when `url` goes through a transaction pooler
 * (docs/deployment.md, "Behind PgBouncer"); it is checked to give real sessions, and to reach the
 * same database as `url`, before anything is migrated.
 */
export async function openPostgres(url: string, poolSize = 10, directUrl = url): Promise<pg.Pool> {
  const pool = new pg.Pool({
    connectionString: url,
    max: poolSize,
    // A connection once opened stays open (pg's default closes one idle for 10 s): the call that
    // waits for a new one pays a TCP and SCRAM handshake and a server process started, whose
    // caches, functions and prepared statements are then warmed again. The pool grows to
    // `poolSize` under load and stays there: a fixed-size pool (docs/store.md, "The p99 at 300/s").
    idleTimeoutMillis: 0,
    types: {
      getTypeParser: (oid: number, format?: "text" | "binary") =>
        oid === INT8_OID ? (value: string) => Number(value) : pg.types.getTypeParser(oid, format),
    },
  });
  // An idle connection's failure (the server restarting) drops that connection; the next query
  // opens another. Without a listener it would crash the process.
  pool.on("error", () => {});
  try {
    await assertSessionLevel(directUrl);
    if (directUrl !== url) await assertSameDatabase(pool, directUrl);
    await migratePostgres(pool, directUrl === url ? undefined : directUrl);
    // No pooler named between (its sessions were checked above): the hot statements are prepared.
    if (directUrl === url) keepPreparedStatements(pool);
  } catch (error) {
    await pool.end();
    throw error;
  }
  return pool;
}

/**
 * Applies the migrations not applied yet, each in its own transaction with its version recorded,
 * holding a session advisory lock throughout: hosts that start at once migrate one at a time
 * (even `CREATE TABLE IF NOT EXISTS` races without it). The lock needs one server session from
 * lock to unlock: on a connection of its own to `directUrl` when given (the pool may be behind a
 * transaction pooler), else on one of the pool's.
 */
export async function migratePostgres(pool: pg.Pool, directUrl?: string): Promise<void> {
  if (directUrl === undefined) return withClient(pool, migrateOn);
  const own = new pg.Client({ connectionString: directUrl, application_name: "tollgate migrations" });
  own.on("error", () => {});
  try {
    await own.connect();
    await migrateOn(own);
  } finally {
    await own.end().catch(() => {});
  }
}

/** The migrations not yet applied, in order, each in its transaction, under the migration lock. */
async function migrateOn(client: pg.ClientBase): Promise<void> {
  await client.query("SELECT pg_advisory_lock($1)", [MIGRATION_LOCK]);
  try {
    await client.query(
      "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    );
    const applied = new Set(
      (await client.query<{ version: number }>("SELECT version FROM schema_migrations")).rows.map(
        (r) => r.version,
      ),
    );
    for (const migration of PG_MIGRATIONS) {
      if (applied.has(migration.version)) continue;
      await client.query("BEGIN");
      try {
        await client.query(migration.sql);
        await client.query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", [
          migration.version,
          migration.name,
        ]);
        await client.query("COMMIT");
      } catch (error) {
        await client.query("ROLLBACK");
        throw error;
      }
    }
  } finally {
    await client.query("SELECT pg_advisory_unlock($1)", [MIGRATION_LOCK]);
  }
}

/**
 * Runs `work` on one pooled connection held across its statements. pg tells of a connection lost
 * while no statement is in flight (PostgreSQL restarted, a failover) with an 'error' event on the
 * client, and the pool listens for it only while the client is idle: unheard, it would end the
 * process. Here it is heard: the next statement fails instead, and the connection is destroyed,
 * not returned to the pool (docs/store.md, "When the store refuses a settlement").
 */
export async function withClient<T>(pool: pg.Pool, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let lost: Error | undefined;
  const onError = (error: Error) => {
    lost = error;
  };
  client.on("error", onError);
  try {
    return await work(client);
  } finally {
    client.off("error", onError);
    client.release(lost);
  }
}

/** Runs `work` in one transaction on one pooled connection; rolls back if it throws. */
export async function inTransaction<T>(
  pool: pg.Pool,
  work: (client: pg.PoolClient) => Promise<T>,
  isolation: "READ COMMITTED" | "SERIALIZABLE" | "REPEATABLE READ READ ONLY" = "READ COMMITTED",
): Promise<T> {
  return withClient(pool, async (client) => {
    try {
      await client.query(`BEGIN ISOLATION LEVEL ${isolation}`);
      const result = await work(client);
      await client.query("COMMIT");
      return result;
    } catch (error) {
      await client.query("ROLLBACK").catch(() => {});
      throw error;
    }
  });
}
