/**
 * The check that a URL gives real PostgreSQL sessions, for the connections that need one: the
 * auth listener (LISTEN), the chain roles (session advisory locks) and the migration lock.
 * Through a transaction pooler (PgBouncer's `pool_mode = transaction`) each transaction may run
 * on another server session, so a LISTEN or a lock taken by one statement is not where the next
 * one runs (docs/deployment.md, "Behind PgBouncer").
 */
import { randomUUID } from "node:crypto";
import pg from "pg";

/** Thrown when the session-level URL leads to a transaction pooler; the message says what to set. */
export class PooledSessionError extends Error {
  constructor(detail: string) {
    super(
      "TOLLGATE_DATABASE_DIRECT_URL: the session-level connections (auth listener, chain roles, migration " +
        `lock) reach PostgreSQL through a transaction pooler: ${detail}. LISTEN/NOTIFY and session advisory ` +
        "locks do not work through one; set TOLLGATE_DATABASE_DIRECT_URL to PostgreSQL itself (or to a " +
        'session-mode pool) and keep TOLLGATE_DATABASE_URL on the pooler (docs/deployment.md, "Behind PgBouncer")',
    );
    this.name = "PooledSessionError";
  }
}

/**
 * How long the check waits for a connection, or for one statement's answer: a server or pooler
 * that accepts the connection and then says nothing stops the start with a message instead of
 * holding it forever.
 */
export const SESSION_CHECK_TIMEOUT_MS = 10_000;

/** The clients of the checks: named in pg_stat_activity, and bounded in time. */
function checkClient(url: string, timeoutMs: number): pg.Client {
  const client = new pg.Client({
    connectionString: url,
    application_name: "tollgate session check",
    connectionTimeoutMillis: timeoutMs,
    query_timeout: timeoutMs,
  });
  // An idle client's failure must not crash the process; the next query reports it.
  client.on("error", () => {});
  return client;
}

/** Names the URL and the wait in a check's failure to connect or to be answered in time. */
function unanswered(error: unknown, timeoutMs: number): unknown {
  const message = error instanceof Error ? error.message : String(error);
  if (!/timeout/i.test(message)) return error;
  return new Error(
    `TOLLGATE_DATABASE_DIRECT_URL (or TOLLGATE_DATABASE_URL when it is unset): no answer from PostgreSQL within ${timeoutMs / 1000} s ` +
      `while checking that it keeps a session (${message})`,
    { cause: error },
  );
}

/** Rounds of the check: a pooler busy with other clients may hide it in one, hardly in all. */
const ROUNDS = 3;

/**
 * Refuses `url` when two statements of one of its connections can run in different server
 * sessions. Connection A asks for its backend; then, each round, connection B opens a
 * transaction, which pins B's server session, and asks for its own, and A asks again. A real
 * session keeps its backend and never shares it; a transaction pooler hands A's session to B (it
 * reuses the one released last) or moves A to another. A direct connection or a session-mode
 * pool is never refused.
 */
export async function assertSessionLevel(url: string, timeoutMs = SESSION_CHECK_TIMEOUT_MS): Promise<void> {
  const a = checkClient(url, timeoutMs);
  const b = checkClient(url, timeoutMs);
  try {
    await a.connect();
    const first = await backend(a);
    await b.connect();
    for (let round = 0; round < ROUNDS; round++) {
      await b.query("BEGIN");
      const other = await backend(b);
      const again = await backend(a);
      await b.query("ROLLBACK");
      if (other === first) {
        throw new PooledSessionError(
          `a second connection was handed the first one's server session (backend ${first})`,
        );
      }
      if (again !== first) {
        throw new PooledSessionError(
          `one connection's statements ran on two server sessions (backends ${first} and ${again})`,
        );
      }
    }
  } catch (error) {
    throw unanswered(error, timeoutMs);
  } finally {
    await Promise.all([a.end().catch(() => {}), b.end().catch(() => {})]);
  }
}

async function backend(client: pg.Client): Promise<number> {
  return (await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;
}

/** How long a notification sent through the pool may take to reach the direct connection. */
const SAME_DATABASE_WAIT_MS = 5_000;

/**
 * Refuses a direct URL that names another database than the pool's: a notification sent
 * through the pool (NOTIFY reaches only the listeners of its own database) must reach a
 * connection listening on `directUrl`. Otherwise the auth listener would never hear a change and
 * the migrations would land elsewhere.
 */
export async function assertSameDatabase(pool: pg.Pool, directUrl: string): Promise<void> {
  const channel = "tollgate_same_database";
  const nonce = randomUUID();
  const client = checkClient(directUrl, SESSION_CHECK_TIMEOUT_MS);
  try {
    await client.connect();
    await client.query(`LISTEN ${channel}`);
    const heard = new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), SAME_DATABASE_WAIT_MS);
      client.on("notification", (message) => {
        if (message.channel !== channel || message.payload !== nonce) return;
        clearTimeout(timer);
        resolve(true);
      });
    });
    await pool.query("SELECT pg_notify($1, $2)", [channel, nonce]);
    if (!(await heard)) {
      throw new Error(
        `TOLLGATE_DATABASE_DIRECT_URL: a notification sent through TOLLGATE_DATABASE_URL did not reach a ` +
          `connection to TOLLGATE_DATABASE_DIRECT_URL within ${SAME_DATABASE_WAIT_MS / 1000} s: both must ` +
          'name the same database, one through the pooler and one directly (docs/deployment.md, "Behind PgBouncer")',
      );
    }
  } catch (error) {
    throw unanswered(error, SESSION_CHECK_TIMEOUT_MS);
  } finally {
    await client.end().catch(() => {});
  }
}
