import { type AddressInfo, createServer } from "node:net";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PgChainRoles } from "../../src/store/postgres/chain-work.js";
import { openPostgres } from "../../src/store/postgres/database.js";
import { assertSessionLevel, PooledSessionError } from "../../src/store/postgres/session-check.js";
import { openPgStores } from "../../src/store/postgres/stores.js";
import { type PgBouncerServer, startPgBouncer } from "../helpers/pgbouncer.js";
import { type PostgresServer, startPostgres } from "../helpers/postgres.js";

// The PostgreSQL store behind Debian's PgBouncer (docs/deployment.md, "Behind PgBouncer"): the
// pool's statements go through the pooler in transaction mode, the session-level connections
// (auth listener, chain roles, migration lock) to PostgreSQL itself, and a session-level URL that
// leads to a transaction pooler is refused.

let postgres: PostgresServer;
let transactionPool: PgBouncerServer;
let sessionPool: PgBouncerServer;
beforeAll(async () => {
  postgres = await startPostgres();
  [transactionPool, sessionPool] = await Promise.all([
    startPgBouncer(postgres, { poolMode: "transaction", defaultPoolSize: 2 }),
    startPgBouncer(postgres, { poolMode: "session", defaultPoolSize: 4 }),
  ]);
}, 60_000);
afterAll(async () => {
  await Promise.all([transactionPool?.stop(), sessionPool?.stop()]);
  await postgres?.stop();
});

describe("the session check", () => {
  it("accepts PostgreSQL itself and a session-mode pool", async () => {
    const direct = await postgres.freshDatabase();
    await expect(assertSessionLevel(direct)).resolves.toBeUndefined();
    await expect(assertSessionLevel(sessionPool.pooled(direct))).resolves.toBeUndefined();
  });

  it("stops, naming the URL and the wait, when a server accepts the connection and never answers", async () => {
    const silent = createServer(() => {});
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    try {
      const { port } = silent.address() as AddressInfo;
      const started = Date.now();
      const refused = await assertSessionLevel(`postgres://tollgate@127.0.0.1:${port}/tollgate`, 500).catch(
        (error: unknown) => error,
      );
      expect(refused).toBeInstanceOf(Error);
      expect((refused as Error).message).toMatch(
        /TOLLGATE_DATABASE_DIRECT_URL.*no answer from PostgreSQL within 0\.5 s/,
      );
      expect(Date.now() - started).toBeLessThan(5_000);
    } finally {
      silent.close();
    }
  });

  it("refuses a transaction-mode pool, naming TOLLGATE_DATABASE_DIRECT_URL", async () => {
    const pooled = transactionPool.pooled(await postgres.freshDatabase());
    const refused = await assertSessionLevel(pooled).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(PooledSessionError);
    expect((refused as Error).message).toMatch(/^TOLLGATE_DATABASE_DIRECT_URL: .*transaction pooler/);
    // openPostgres checks before it migrates: nothing was created.
    await expect(openPostgres(pooled, 2)).rejects.toThrow(PooledSessionError);
    const direct = new pg.Client({
      connectionString: pooled.replace(`:${transactionPool.port}/`, `:${postgres.port}/`),
    });
    await direct.connect();
    try {
      const { rows } = await direct.query("SELECT to_regclass('schema_migrations') AS t");
      expect(rows[0].t).toBeNull();
    } finally {
      await direct.end();
    }
  });
});

describe("the same-database check", () => {
  it("refuses a direct URL naming another database than the pool's, before migrating either", async () => {
    const [a, b] = [await postgres.freshDatabase(), await postgres.freshDatabase()];
    await expect(openPostgres(transactionPool.pooled(a), 2, b)).rejects.toThrow(
      /^TOLLGATE_DATABASE_DIRECT_URL: a notification sent through TOLLGATE_DATABASE_URL did not reach/,
    );
    for (const url of [a, b]) {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      try {
        expect((await client.query("SELECT to_regclass('schema_migrations') AS t")).rows[0].t).toBeNull();
      } finally {
        await client.end();
      }
    }
  });
});

describe("stores through a transaction pooler with a direct URL", () => {
  it("migrates, and one host's key revocation reaches another's listener", async () => {
    const direct = await postgres.freshDatabase();
    const url = transactionPool.pooled(direct);
    const choice = { kind: "postgres", url, directUrl: direct, poolSize: 4 } as const;
    // Two hosts at once: their migrations take turns on the direct connection's lock.
    const [listening, other] = await Promise.all([openPgStores(choice, true), openPgStores(choice, false)]);
    try {
      const account = await other.accounts.insertAccount("acct_pool", "pooled", 1);
      await other.accounts.insertKey("key_pool", account.id, "k", "tg_pool", Buffer.alloc(32, 1), 1);
      const before = await listening.accounts.changeStamp();
      await other.accounts.revokeKey("key_pool", 2);
      // The listener hears the change: the stamp moves without the listening store reading it.
      let after = before;
      for (let i = 0; i < 100 && after === before; i++) {
        await new Promise((r) => setTimeout(r, 20));
        after = await listening.accounts.changeStamp();
      }
      expect(after).toBeGreaterThan(before);
      // The listener is a session on PostgreSQL itself, not a client of the pooler.
      const check = new pg.Client({ connectionString: direct });
      await check.connect();
      try {
        const { rows } = await check.query(
          "SELECT COUNT(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'tollgate auth listener'",
        );
        expect(rows[0].n).toBe(1);
      } finally {
        await check.end();
      }
      const clients = await transactionPool.admin("SHOW CLIENTS");
      expect(clients.filter((c) => c.application_name === "tollgate auth listener")).toEqual([]);
      // Pool statements really went through the pooler.
      const servers = await transactionPool.admin("SHOW SERVERS");
      expect(servers.filter((s) => s.database === new URL(direct).pathname.slice(1)).length).toBeGreaterThan(
        0,
      );
    } finally {
      await Promise.all([listening.close(), other.close()]);
    }
  });

  it("a chain's role is held by one process at a time on the direct URL", async () => {
    const direct = await postgres.freshDatabase();
    const [a, b] = [new PgChainRoles(direct), new PgChainRoles(direct)];
    try {
      expect(await a.hold("base")).toBe(true);
      expect(await b.hold("base")).toBe(false);
      expect(await a.hold("base")).toBe(true);
      await a.close();
      expect(await b.hold("base")).toBe(true);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});
