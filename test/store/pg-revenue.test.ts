import pg from "pg";
import { describe, expect, it } from "vitest";
import { SYSTEM_REVENUE } from "../../src/core/ports/ledger.js";
import { auditPostgres } from "../../src/store/postgres/audit.js";
import { migratePostgres, openPostgres } from "../../src/store/postgres/database.js";
import { PgLedger } from "../../src/store/postgres/ledger.js";
import { PG_MIGRATIONS } from "../../src/store/postgres/migrations.js";
import { CHAIN, fundAccounts, suitePostgres, testHold, USAGE } from "../helpers/pg-ledger.js";

// Migration 18: system:revenue's part of each call sits on the paying account's own balance row,
// so that nothing on the calls' path waits on another account's call
// (docs/store.md, "Where a billed call's time goes"), and a database written before it audits
// clean after it.

const server = suitePostgres();

/** Two accounts with 10,000 each, on a fresh, fully migrated database. */
async function twoAccounts(url: string): Promise<{ pool: pg.Pool; ledger: PgLedger }> {
  const pool = await openPostgres(url, 8);
  const ledger = new PgLedger(pool);
  await fundAccounts(pool, ledger, ["acct_a", "acct_b"]);
  return { pool, ledger };
}

describe("the revenue side of a call on PostgreSQL", () => {
  it("a hold of account A held uncommitted (a slow commit) makes no hold, raise, settle or sweep of account B wait", async () => {
    const url = await server().freshDatabase();
    const { pool, ledger } = await twoAccounts(url);
    // Every statement of B's pool gives up after 3 s: waiting on A's transaction fails the test
    // instead of hanging it.
    await pool.query(
      "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET statement_timeout = 3000', current_database()); END $$",
    );
    const slow = new pg.Client({ connectionString: url });
    await slow.connect();
    const timed = await openPostgres(url, 4);
    try {
      expect((await timed.query("SHOW statement_timeout")).rows[0].statement_timeout).toBe("3s");
      const b = new PgLedger(timed);
      // A's hold, placed and not committed: every row it wrote stays locked until its commit.
      await slow.query("BEGIN");
      const placedA = await slow.query(
        `SELECT seq FROM tollgate_place_hold('a_1', 'acct_a', 'req_a_1', 'key_1', $1, 100, 'text', 'claude-test',
                                             12, 1024, '', 0, 10)`,
        [CHAIN],
      );
      expect(placedA.rows).toHaveLength(1);
      // 16 holds of B: consecutive seqs, so (with revenue on 16 shared rows, seq % 16) one of
      // them falls on the row A's hold locked. Each is placed, one raised, one left to expire,
      // the rest settled, while A's transaction stays open.
      for (let i = 0; i < 16; i++) {
        expect(
          (await b.placeHold(testHold(`b_${i}`, 100n, { accountId: "acct_b", createdAt: 20 + i }))).kind,
        ).toBe("placed");
      }
      expect((await b.raiseHold({ holdId: "b_0", pass: 2, amount: 50n, createdAt: 40 })).kind).toBe("raised");
      for (let i = 0; i < 15; i++) {
        expect((await b.settle(`b_${i}`, BigInt(10 + i), USAGE, 50, "")).kind).toBe("resolved");
      }
      expect(await b.expireHolds(36, 60, 100)).toBe(1);
      await slow.query("COMMIT");
      expect((await ledger.settle("a_1", 30n, USAGE, 70, "")).kind).toBe("resolved");
      // Every charge is revenue, on its payer's row; nothing is pending.
      const charged = 30n + Array.from({ length: 15 }, (_, i) => BigInt(10 + i)).reduce((x, y) => x + y);
      expect(await ledger.balance(SYSTEM_REVENUE, CHAIN)).toMatchObject({
        creditsPending: 0n,
        creditsPosted: charged,
      });
      expect(await ledger.balance("acct_b", CHAIN)).toMatchObject({
        debitsPending: 0n,
        debitsPosted: charged - 30n,
      });
      expect(await auditPostgres(pool)).toEqual([]);
    } finally {
      await slow.end().catch(() => {});
      await timed.end();
      await pool.end();
    }
  });

  it("migration 18 moves the revenue of holds open and settled before it onto their accounts: the audit is clean after it", async () => {
    const url = await server().freshDatabase();
    // The schema as version 17 left it.
    const pool = new pg.Pool({ connectionString: url, max: 4 });
    try {
      await pool.query(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
      );
      for (const migration of PG_MIGRATIONS.filter((m) => m.version <= 17)) {
        await pool.query(`BEGIN; ${migration.sql}; COMMIT`);
        await pool.query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", [
          migration.version,
          migration.name,
        ]);
      }
      // Two funded accounts, and holds written by version 17's functions (revenue on the shard
      // seq % 16): open, raised, settled, released; and an operator's credit of system:revenue
      // itself, which stays on its row.
      await pool.query(
        `INSERT INTO accounts (id, status, created_at) VALUES ('acct_a', 'active', 1), ('acct_b', 'active', 1);
         INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, memo, created_at)
         VALUES ('fa', 'base', 'system:manual-credit', 'acct_a', 10000, false, 'credit', '', 1),
                ('fb', 'base', 'system:manual-credit', 'acct_b', 10000, false, 'credit', '', 1),
                ('fr', 'base', 'system:manual-credit', 'system:revenue', 7, false, 'credit', '', 1);
         INSERT INTO ledger_balances (account, chain, shard, may_overdraw, credits_posted, debits_posted)
         VALUES ('acct_a', 'base', 0, false, 10000, 0), ('acct_b', 'base', 0, false, 10000, 0),
                ('system:manual-credit', 'base', 3, true, 0, 20007), ('system:revenue', 'base', 5, true, 7, 0)`,
      );
      const place = (id: string, account: string, amount: number, at: number) =>
        pool.query(
          `SELECT seq FROM tollgate_place_hold($1, $2, $1, 'key_1', 'base', $3, 'text', 'm', 1, 1, '', 0, $4)`,
          [id, account, amount, at],
        );
      const resolve = (id: string, status: string, amount: number) =>
        pool.query("SELECT resolved_now FROM tollgate_resolve($1, $2, $3, 1, 1, 0, 0, 0, 0, '', 100, '')", [
          id,
          status,
          amount,
        ]);
      for (let i = 0; i < 20; i++)
        await place(`old_${i}`, i % 2 === 0 ? "acct_a" : "acct_b", 100 + i, 10 + i);
      // A raise as version 17's RAISE_HOLD wrote it: the account's row, the entry, the shard.
      await pool.query(
        `WITH opened AS (SELECT h.* FROM open_holds o JOIN holds h ON h.id = o.hold_id WHERE o.hold_id = 'old_3'),
         funds AS (UPDATE ledger_balances b SET debits_pending = b.debits_pending + 40 FROM opened
                    WHERE b.account = opened.account_id AND b.chain = opened.chain AND b.shard = 0 RETURNING 1),
         raise AS (INSERT INTO hold_raises (hold_id, pass, amount, created_at) SELECT 'old_3', 2, 40, 50 FROM funds RETURNING 1),
         total AS (UPDATE open_holds o SET raised = o.raised + 40 FROM raise WHERE o.hold_id = 'old_3'),
         entry AS (INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id, memo, created_at)
                   SELECT 'old_3/raise/2', opened.chain, opened.account_id, 'system:revenue', 40, true, 'hold', 'old_3', '', 50
                     FROM opened, raise),
         revenue AS (UPDATE ledger_balances b SET credits_pending = b.credits_pending + 40 FROM opened, raise
                      WHERE b.account = 'system:revenue' AND b.chain = opened.chain AND b.shard = opened.seq % 16),
         spent AS (UPDATE spend_days d SET spent = d.spent + 40 FROM opened, raise
                    WHERE d.account_id = opened.account_id AND d.chain = opened.chain AND d.key_id = opened.key_id
                      AND d.day = opened.created_at - opened.created_at % 86400000)
         SELECT 1`,
      );
      for (let i = 0; i < 10; i++)
        expect((await resolve(`old_${i}`, "settled", 10 * i)).rows[0].resolved_now).toBe(true);
      expect((await resolve("old_10", "released", 0)).rows[0].resolved_now).toBe(true);
      const shards = await pool.query(
        "SELECT COUNT(*)::int AS n FROM ledger_balances WHERE account = 'system:revenue' AND credits_pending > 0",
      );
      expect(shards.rows[0].n).toBeGreaterThan(1);
    } finally {
      await pool.end();
    }

    // Version 18, as a host applies it at start.
    const migrated = await openPostgres(url, 4);
    try {
      const ledger = new PgLedger(migrated);
      expect(await auditPostgres(migrated)).toEqual([]);
      // Open: old_11 .. old_19, 9 holds (each 100 + i). Charged: old_0 .. old_9, 10 × i each, old_3 raised.
      const openHeld = Array.from({ length: 9 }, (_, k) => 111n + BigInt(k)).reduce((x, y) => x + y);
      const charged = 450n;
      expect(await ledger.balance(SYSTEM_REVENUE, CHAIN)).toEqual({
        account: SYSTEM_REVENUE,
        chain: CHAIN,
        debitsPending: 0n,
        debitsPosted: 0n,
        creditsPending: openHeld,
        creditsPosted: charged + 7n,
      });
      const rows = await migrated.query(
        `SELECT account, shard, revenue_pending::text AS rp, revenue_posted::text AS rpo, credits_pending::text AS cp,
                credits_posted::text AS cpo
           FROM ledger_balances WHERE account IN ('acct_a', 'acct_b', 'system:revenue') ORDER BY account`,
      );
      // acct_a: old_12, 14, 16, 18 open; charged 0+20+40+60+80. acct_b: old_11, 13, 15, 17, 19;
      // charged 10+30+50+70+90. system:revenue keeps one row: the operator's credit.
      expect(rows.rows).toEqual([
        { account: "acct_a", shard: 0, rp: `${112 + 114 + 116 + 118}`, rpo: "200", cp: "0", cpo: "10000" },
        {
          account: "acct_b",
          shard: 0,
          rp: `${111 + 113 + 115 + 117 + 119}`,
          rpo: "250",
          cp: "0",
          cpo: "10000",
        },
        { account: SYSTEM_REVENUE, shard: 0, rp: "0", rpo: "0", cp: "0", cpo: "7" },
      ]);
      // Run again, it changes nothing.
      expect((await migrated.query("SELECT tollgate_revenue_onto_accounts() AS n")).rows[0].n).toBe(2);
      expect(await ledger.balance(SYSTEM_REVENUE, CHAIN)).toMatchObject({ creditsPending: openHeld });

      // The ledger carries on with the holds from before: settled, raised, released, expired.
      expect((await ledger.raiseHold({ holdId: "old_11", pass: 2, amount: 5n, createdAt: 200 })).kind).toBe(
        "raised",
      );
      expect((await ledger.settle("old_11", 116n, USAGE, 200, "")).kind).toBe("resolved");
      expect((await ledger.void("old_12", "released", 200)).kind).toBe("resolved");
      expect(
        (await ledger.placeHold(testHold("new_1", 300n, { accountId: "acct_a", createdAt: 1_000_000 }))).kind,
      ).toBe("placed");
      expect(await ledger.expireHolds(1_000, 300, 100)).toBe(7);
      expect((await ledger.settle("new_1", 99n, USAGE, 1_000_001, "")).kind).toBe("resolved");
      expect(await auditPostgres(migrated)).toEqual([]);
      expect(await ledger.balance(SYSTEM_REVENUE, CHAIN)).toMatchObject({
        creditsPending: 0n,
        creditsPosted: charged + 7n + 116n + 99n,
      });
      // The rows' pending revenue, with the settlements' releases beside them (migration 22).
      const left = await migrated.query(
        `SELECT (SUM(revenue_pending) - (SELECT COALESCE(SUM(released), 0) FROM balance_releases))::text AS p,
                SUM(credits_pending)::text AS c FROM ledger_balances`,
      );
      expect(left.rows[0]).toEqual({ p: "0", c: "0" });
      await migratePostgres(migrated);
    } finally {
      await migrated.end();
    }
  });

  it("the audit names an account whose row carries revenue its entries do not give it", async () => {
    const { pool } = await twoAccounts(await server().freshDatabase());
    try {
      const ledger = new PgLedger(pool);
      expect(
        (await ledger.placeHold(testHold("h1", 100n, { accountId: "acct_a", createdAt: 10 }))).kind,
      ).toBe("placed");
      expect(
        (await ledger.placeHold(testHold("h2", 100n, { accountId: "acct_b", createdAt: 10 }))).kind,
      ).toBe("placed");
      expect(await auditPostgres(pool)).toEqual([]);
      // The same total, on the wrong rows: system:revenue's sum still balances.
      await pool.query(
        `UPDATE ledger_balances SET revenue_pending = CASE account WHEN 'acct_a' THEN 150 ELSE 50 END
          WHERE account IN ('acct_a', 'acct_b')`,
      );
      const problems = await auditPostgres(pool);
      expect(problems).toEqual([
        "acct_a on base: its row holds revenue pending 150, posted 0; its entries give 100, 0",
        "acct_b on base: its row holds revenue pending 50, posted 0; its entries give 100, 0",
      ]);
    } finally {
      await pool.end();
    }
  });
});
