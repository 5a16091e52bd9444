import { describe, expect, it } from "vitest";
import { openPostgres } from "../../src/store/postgres/database.js";
import { suitePostgres } from "../helpers/pg-ledger.js";

// The store's pool keeps the connections it opened (src/store/postgres/database.ts): pg's default
// closes a connection idle for 10 s, and the next burst of calls then waits for new ones (TCP,
// SCRAM, a server process, its caches and prepared statements warmed again: docs/store.md,
// "The p99 at 300/s").

const server = suitePostgres();

describe("the PostgreSQL store's pool", () => {
  it("still answers on the same server process after 11 s idle, without opening another", async () => {
    const pool = await openPostgres(await server().freshDatabase(), 4);
    try {
      const backend = async () =>
        (await pool.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;
      const before = await backend();
      const opened = pool.totalCount;
      await new Promise((resolve) => setTimeout(resolve, 11_000));
      expect(pool.totalCount).toBe(opened);
      expect(await backend()).toBe(before);
      expect(pool.totalCount).toBe(opened);
    } finally {
      await pool.end();
    }
  }, 30_000);
});
