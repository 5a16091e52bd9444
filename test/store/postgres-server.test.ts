import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type PostgresServer, startPostgres } from "../helpers/postgres.js";

let server: PostgresServer;
beforeAll(async () => {
  server = await startPostgres();
});
afterAll(async () => {
  await server?.stop();
});

describe("the test PostgreSQL server", () => {
  it("is a real PostgreSQL 15 that checks passwords (SCRAM) and commits durably", async () => {
    const client = new pg.Client({ connectionString: server.url });
    await client.connect();
    try {
      const { rows } = await client.query<{ version: string; fsync: string; auth: string }>(
        "SELECT version() AS version, current_setting('fsync') AS fsync, current_setting('password_encryption') AS auth",
      );
      expect(rows[0]).toMatchObject({ fsync: "on", auth: "scram-sha-256" });
      expect(rows[0]!.version).toMatch(/^PostgreSQL 15\./);
    } finally {
      await client.end();
    }
    const wrong = new pg.Client({ connectionString: server.wrongPasswordUrl });
    await expect(wrong.connect()).rejects.toThrow(/password authentication failed/);
  });
});
