import { ConnectError } from "@connectrpc/connect";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { errorInfo } from "../../src/core/errors.js";
import { openPostgres } from "../../src/store/postgres/database.js";
import { isUnreachable, unreachableAsUnavailable } from "../../src/store/postgres/unreachable.js";
import { freePort } from "../helpers/ports.js";
import { type PostgresServer, startPostgres } from "../helpers/postgres.js";

// A PostgreSQL server that cannot be reached is told apart from a statement's own error
// (src/store/postgres/unreachable.ts): the first becomes STORE_UNAVAILABLE (a 503), the second
// passes as it is; and the pool works again on its own once the server is back.

async function failure(work: Promise<unknown>): Promise<unknown> {
  return work.then(
    () => undefined,
    (error: unknown) => error,
  );
}

function expectUnavailable(error: unknown): void {
  expect(error).toBeInstanceOf(ConnectError);
  expect(errorInfo(error as ConnectError)?.reason).toBe("STORE_UNAVAILABLE");
  expect(isUnreachable((error as ConnectError).cause)).toBe(true);
}

describe("an unreachable PostgreSQL", () => {
  let server: PostgresServer;
  beforeAll(async () => {
    server = await startPostgres();
  }, 60_000);
  afterAll(async () => {
    await server?.stop();
  });

  it("nothing listening: the query is refused as STORE_UNAVAILABLE", async () => {
    const pool = new pg.Pool({ connectionString: `postgres://x:y@127.0.0.1:${await freePort()}/z` });
    unreachableAsUnavailable(pool);
    try {
      expectUnavailable(await failure(pool.query("SELECT 1")));
    } finally {
      await pool.end();
    }
  });

  it("a statement's own error passes as it is; a crash and restart is unavailable, then the pool serves again", async () => {
    const pool = await openPostgres(await server.freshDatabase(), 2);
    unreachableAsUnavailable(pool);
    try {
      const syntax = await failure(pool.query("SELEC 1"));
      expect(syntax).not.toBeInstanceOf(ConnectError);
      expect((syntax as { code?: string }).code).toBe("42601");
      expect(isUnreachable(syntax)).toBe(false);

      // A connection open in the pool when the server crashes (pg_ctl stop -m immediate).
      await pool.query("SELECT 1");
      server.halt("immediate");
      expectUnavailable(await failure(pool.query("SELECT 1")));
      expectUnavailable(await failure(pool.query("SELECT 1")));
      server.start();
      expect((await pool.query("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
    } finally {
      await pool.end();
    }
  });
});
