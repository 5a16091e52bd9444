import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { auditPostgres } from "../../src/store/postgres/audit.js";
import { inTransaction, migratePostgres, openPostgres } from "../../src/store/postgres/database.js";
import { suitePostgres } from "../helpers/pg-ledger.js";

// A pooled connection held across several statements (a transaction, the audit's snapshot)
// whose server goes away between two of them: PostgreSQL restarted, a failover. pg emits the
// loss as an 'error' event on the client, and the pool listens only while the client is idle,
// so without a listener of our own that event ends the process (it did: a `tollgate dev` host
// crashed this way when its sweeper's transaction was open as the server stopped). The loss must
// fail the work instead, and the pool must hand out a live connection once the server is back.

const postgres = suitePostgres();

describe("a connection lost between two statements", () => {
  it("fails the transaction, does not end the process, and the pool serves again once the server is back", async () => {
    const server = postgres();
    const url = await server.freshDatabase();
    const pool = await openPostgres(url, 2);
    try {
      await migratePostgres(pool);
      const uncaught: unknown[] = [];
      const record = (error: unknown) => uncaught.push(error);
      process.on("uncaughtException", record);
      try {
        const failed = inTransaction(pool, async (client) => {
          await client.query("SELECT 1");
          // Between two statements, with no query in flight: the server stops.
          await server.haltAsync("immediate");
          await sleep(300);
          await client.query("SELECT 1");
        });
        await expect(failed).rejects.toThrow();
        await sleep(100);
        expect(uncaught).toEqual([]);
      } finally {
        process.off("uncaughtException", record);
      }
      server.start();
      // The lost connection was not put back: the next transaction and the audit run on live ones.
      expect(
        await inTransaction(pool, async (client) => (await client.query("SELECT 2 AS n")).rows[0]),
      ).toEqual({
        n: 2,
      });
      expect(await auditPostgres(pool)).toEqual([]);
    } finally {
      await pool.end();
    }
  }, 60_000);
});
