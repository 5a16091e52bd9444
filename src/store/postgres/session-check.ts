/**
 * The check that a URL gives real PostgreSQL sessions, for the connections that need one: the
 * auth listener (LISTEN), the chain roles (session advisory locks) and the migration lock.
 * Through a transaction pooler (PgBouncer's `pool_mode = transaction`) each transaction may run
 * on another server session, so a LISTEN or a lock taken by one statement is not where the next
 * one runs (docs/deployment.md, "Behind PgBouncer").
 */
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
export async function assertSessionLevel(url: string): Promise<void> {
  const config = { connectionString: url, application_name: "tollgate session check" };
  const a = new pg.Client(config);
  const b = new pg.Client(config);
  // An idle client's failure must not crash the process; the next query reports it.
  a.on("error", () => {});
  b.on("error", () => {});
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
  } finally {
    await Promise.all([a.end().catch(() => {}), b.end().catch(() => {})]);
  }
}

async function backend(client: pg.Client): Promise<number> {
  return (await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;
}
