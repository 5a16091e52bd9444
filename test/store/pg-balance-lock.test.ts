import type pg from "pg";
import { describe, expect, it } from "vitest";
import { SYSTEM_REVENUE } from "../../src/core/ports/ledger.js";
import { auditPostgres } from "../../src/store/postgres/audit.js";
import { openPostgres } from "../../src/store/postgres/database.js";
import { PgLedger } from "../../src/store/postgres/ledger.js";
import { CHAIN, fundAccounts, suitePostgres, testHold, USAGE } from "../helpers/pg-ledger.js";

// Migration 20: a hold and a resolution write the rows only they have first and lock their
// account's balance row last, so one account's calls take turns on that row for the commit
// only, not for every row a call writes (docs/store.md, "Where a billed call's time goes").

const server = suitePostgres();

/** Resolves once a statement of the database sleeps in the trigger below. */
async function untilSleeping(pool: pg.Pool): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const { rowCount } = await pool.query("SELECT 1 FROM pg_stat_activity WHERE wait_event = 'PgSleep'");
    if (rowCount !== null && rowCount > 0) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error("the slow statement never reached its trigger");
}

describe("one account's calls and its balance row on PostgreSQL", () => {
  it("a hold or a settlement slow to write its own entry makes no other call of the same account wait", async () => {
    const url = await server().freshDatabase();
    const pool = await openPostgres(url, 4);
    const ledger = new PgLedger(pool);
    await fundAccounts(pool, ledger, ["acct_a"]);
    // The entries of holds named slow_* take 2 s to insert: a statement that has locked the
    // account's balance row before writing its entry keeps it locked that long.
    await pool.query(`
      CREATE FUNCTION slow_entry() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.hold_id LIKE 'slow%' THEN PERFORM pg_sleep(2); END IF;
          RETURN NEW;
        END $$;
      CREATE TRIGGER slow_entry BEFORE INSERT ON ledger_entries FOR EACH ROW EXECUTE FUNCTION slow_entry();
    `);
    // The other calls give up after 1 s: waiting for the slow one fails the test instead of
    // passing late.
    await pool.query(
      "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET statement_timeout = 1000', current_database()); END $$",
    );
    const timed = await openPostgres(url, 4);
    try {
      expect((await timed.query("SHOW statement_timeout")).rows[0].statement_timeout).toBe("1s");
      const other = new PgLedger(timed);

      // A hold slow to write its pending entry.
      const slowHold = ledger.placeHold(testHold("slow_1", 1_000n));
      await untilSleeping(timed);
      expect((await other.placeHold(testHold("fast_1", 500n))).kind).toBe("placed");
      expect((await other.settle("fast_1", 100n, USAGE, 20, "")).kind).toBe("resolved");
      expect((await slowHold).kind).toBe("placed");

      // A settlement slow to write its charge.
      const slowSettle = ledger.settle("slow_1", 300n, USAGE, 30, "");
      await untilSleeping(timed);
      expect((await other.placeHold(testHold("fast_2", 500n))).kind).toBe("placed");
      expect((await other.settle("fast_2", 200n, USAGE, 40, "")).kind).toBe("resolved");
      expect((await slowSettle).kind).toBe("resolved");

      // Every charge taken once, nothing pending, the ledger sound.
      expect(await ledger.balance("acct_a", CHAIN)).toMatchObject({ debitsPending: 0n, debitsPosted: 600n });
      expect(await ledger.balance(SYSTEM_REVENUE, CHAIN)).toMatchObject({
        creditsPending: 0n,
        creditsPosted: 600n,
      });
      expect(await auditPostgres(pool)).toEqual([]);
    } finally {
      await timed.end();
      await pool.end();
    }
  });

  it("holds racing for the last funds of one account: exactly what the balance covers is placed, nothing of the others written", async () => {
    const url = await server().freshDatabase();
    const pool = await openPostgres(url, 16);
    const ledger = new PgLedger(pool);
    await fundAccounts(pool, ledger, ["acct_a"], 7_000n);
    try {
      // Every hold reads 7,000 available before any has locked the row: all but seven find the
      // funds gone when they lock it, and are undone whole (TG402), then read why.
      const results = await Promise.all(
        Array.from({ length: 48 }, (_, i) => ledger.placeHold(testHold(`race_${i}`, 1_000n))),
      );
      expect(results.filter((r) => r.kind === "placed")).toHaveLength(7);
      expect(results.filter((r) => r.kind === "insufficient")).toHaveLength(41);
      const { rows } = await pool.query<{ holds: string; entries: string }>(
        "SELECT (SELECT COUNT(*) FROM holds) AS holds, (SELECT COUNT(*) FROM ledger_entries WHERE kind = 'hold') AS entries",
      );
      expect(rows[0]).toEqual({ holds: 7, entries: 7 });
      expect(await ledger.balance("acct_a", CHAIN)).toMatchObject({ debitsPending: 7_000n });
      expect(await auditPostgres(pool)).toEqual([]);
    } finally {
      await pool.end();
    }
  });
});
