import pg from "pg";
import { describe, expect, it } from "vitest";
import { type NewX402Payment, SYSTEM_X402, type X402Closing } from "../../src/core/ports/x402.js";
import { PgAccountStore } from "../../src/store/postgres/accounts.js";
import { auditPostgres } from "../../src/store/postgres/audit.js";
import { migratePostgres, openPostgres } from "../../src/store/postgres/database.js";
import { PgLedger } from "../../src/store/postgres/ledger.js";
import { PG_MIGRATIONS } from "../../src/store/postgres/migrations.js";
import { CHAIN, suitePostgres } from "../helpers/pg-ledger.js";

// Migration 19: system:x402's side of each x402 payment sits on the paying account's own balance
// row, so that no x402 call waits on another account's x402 call (docs/store.md, "PostgreSQL",
// the part "No row shared by every call"), and a database written before it audits clean after it.

/** The advisory lock A's authorisation waits on, inside its statement, holding its row locks. */
const GATE = 4_021;

const server = suitePostgres();

function payment(id: string, accountId: string, authorised: bigint, createdAt: number): NewX402Payment {
  return {
    id,
    holdId: `hold_${id}`,
    accountId,
    chain: CHAIN,
    scheme: "upto",
    payer: `0xpayer_${accountId}`,
    authorised,
    payload: `{"payment":"${id}"}`,
    createdAt,
  };
}

/** A payment closed unused: everything it authorised goes back to system:x402. */
function unused(id: string, returned: bigint, now: number): X402Closing {
  return { id, status: "unused", settled: 0n, txHash: "", error: "", returned, now };
}

/** Spins until `sql` answers a row whose `n` is `n`, or fails after 10 s. */
async function until(pool: pg.Pool, sql: string, n: number): Promise<void> {
  for (let tries = 0; tries < 200; tries++) {
    if ((await pool.query(sql)).rows[0].n === n) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`never ${n}: ${sql}`);
}

describe("system:x402's side of a payment on PostgreSQL", () => {
  it("an x402 authorisation of account A held uncommitted makes no x402 authorisation or closing of account B wait", async () => {
    const url = await server().freshDatabase();
    const pool = await openPostgres(url, 8);
    // B's statements give up after 3 s: waiting on A's transaction fails the test instead of
    // hanging it. A's pool has no limit.
    const timed = await openPostgres(
      `${url}${url.includes("?") ? "&" : "?"}options=-c%20statement_timeout%3D3000`,
      4,
    );
    const gate = new pg.Client({ connectionString: url });
    await gate.connect();
    try {
      expect((await timed.query("SHOW statement_timeout")).rows[0].statement_timeout).toBe("3s");
      expect((await pool.query("SHOW statement_timeout")).rows[0].statement_timeout).toBe("0");
      for (const account of ["acct_a", "acct_b"])
        await new PgAccountStore(pool).insertAccount(account, "", 1);
      // A's authorisation stops at the end of its statement, every row it wrote locked, until
      // the gate opens: an AFTER trigger fires once the whole statement (its CTEs too) has run.
      await pool.query(
        `CREATE FUNCTION test_x402_gate() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN PERFORM pg_advisory_xact_lock(${GATE}); RETURN NULL; END $$;
         CREATE TRIGGER test_x402_gate AFTER INSERT ON x402_payments
           FOR EACH ROW WHEN (NEW.account_id = 'acct_a') EXECUTE FUNCTION test_x402_gate()`,
      );
      await gate.query("SELECT pg_advisory_lock($1)", [GATE]);
      const a = new PgLedger(pool);
      const authorisedA = a.authoriseX402(payment("a_1", "acct_a", 1_000n, 10));
      await until(
        pool,
        `SELECT COUNT(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = ${GATE} AND NOT granted`,
        1,
      );
      // 48 payments of B authorised, then closed with a return: 96 writes of system:x402's side,
      // each of which (on 16 shared rows picked at random) would have met A's row about 6 times.
      const b = new PgLedger(timed);
      for (let i = 0; i < 48; i++) {
        expect(await b.authoriseX402(payment(`b_${i}`, "acct_b", 100n, 20 + i))).toBe("authorised");
      }
      for (let i = 0; i < 48; i++) expect(await b.closeX402(unused(`b_${i}`, 100n, 80 + i))).toBe("closed");
      // A is still waiting at the gate: B did not wait for it.
      expect(
        (await pool.query("SELECT COUNT(*)::int AS n FROM x402_payments WHERE id = 'a_1'")).rows[0].n,
      ).toBe(0);
      await gate.query("SELECT pg_advisory_unlock($1)", [GATE]);
      expect(await authorisedA).toBe("authorised");
      expect(await a.closeX402(unused("a_1", 1_000n, 200))).toBe("closed");

      expect(await a.balance(SYSTEM_X402, CHAIN)).toEqual({
        account: SYSTEM_X402,
        chain: CHAIN,
        debitsPending: 0n,
        debitsPosted: 1_000n + 4_800n,
        creditsPending: 0n,
        creditsPosted: 1_000n + 4_800n,
      });
      // system:x402's side is on the payers' rows; it has no row of its own.
      const rows = await pool.query(
        `SELECT account, x402_in::text AS "in", x402_out::text AS out, credits_posted::text AS cpo,
                debits_posted::text AS dpo
           FROM ledger_balances ORDER BY account`,
      );
      expect(rows.rows).toEqual([
        { account: "acct_a", in: "1000", out: "1000", cpo: "1000", dpo: "1000" },
        { account: "acct_b", in: "4800", out: "4800", cpo: "4800", dpo: "4800" },
      ]);
      expect(await auditPostgres(pool)).toEqual([]);
    } finally {
      await gate.end().catch(() => {});
      await timed.end();
      await pool.end();
    }
  });

  it("migration 19 moves the x402 payments authorised, collected and closed before it onto their accounts: the audit is clean after it", async () => {
    const url = await server().freshDatabase();
    // The schema as version 18 left it.
    const pool = new pg.Pool({ connectionString: url, max: 4 });
    try {
      await pool.query(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
      );
      for (const migration of PG_MIGRATIONS.filter((m) => m.version <= 18)) {
        await pool.query(`BEGIN; ${migration.sql}; COMMIT`);
        await pool.query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", [
          migration.version,
          migration.name,
        ]);
      }
      // Two accounts paying by x402, and an operator's credit of system:x402 itself, which stays
      // on its row.
      await pool.query(
        `INSERT INTO accounts (id, status, created_at) VALUES ('acct_a', 'active', 1), ('acct_b', 'active', 1);
         INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, memo, created_at)
         VALUES ('fx', 'base', 'system:manual-credit', 'system:x402', 7, false, 'credit', '', 1);
         INSERT INTO ledger_balances (account, chain, shard, may_overdraw, credits_posted, debits_posted)
         VALUES ('system:manual-credit', 'base', 2, true, 0, 7), ('system:x402', 'base', 9, true, 7, 0)`,
      );
      // Version 18's statements (x402.ts then): the account's row, and system:x402's side on the
      // shard given.
      const authorise = (id: string, account: string, amount: number, shard: number) =>
        pool.query(
          `WITH payment AS (
             INSERT INTO x402_payments (id, hold_id, account_id, chain, scheme, payer, authorised, payload, status,
                                        created_at)
             VALUES ($1, 'hold_' || $1, $2, 'base', 'upto', '0xpayer', $3, '{}', 'authorised', 10)
             ON CONFLICT (id) DO NOTHING RETURNING id
           ), entry AS (
             INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id,
                                         memo, created_at)
             SELECT 'x402_' || $1, 'base', 'system:x402', $2, $3, false, 'x402', NULL, '', 10 FROM payment
           ), credited AS (
             INSERT INTO ledger_balances AS b (account, chain, shard, may_overdraw, credits_posted)
             SELECT $2, 'base', 0, false, $3 FROM payment
             ON CONFLICT (account, chain, shard) DO UPDATE SET credits_posted = b.credits_posted + EXCLUDED.credits_posted
             RETURNING 1
           ), debited AS (
             INSERT INTO ledger_balances AS b (account, chain, shard, may_overdraw, debits_posted)
             SELECT 'system:x402', 'base', $4, true, $3 FROM credited
             ON CONFLICT (account, chain, shard) DO UPDATE SET debits_posted = b.debits_posted + EXCLUDED.debits_posted
           )
           SELECT id FROM payment`,
          [id, account, amount, shard],
        );
      const close = (
        id: string,
        status: string,
        settled: number,
        tx: string,
        returned: number,
        shard: number,
      ) =>
        pool.query(
          `WITH payment AS (
             SELECT id, account_id, chain FROM x402_payments WHERE id = $1 FOR UPDATE
           ), closed AS (
             UPDATE x402_payments p SET status = $2, settled = $3, tx_hash = $4, closed_at = 90
               FROM payment WHERE p.id = payment.id RETURNING p.id
           ), debited AS (
             UPDATE ledger_balances b SET debits_posted = b.debits_posted + $5
               FROM payment, closed
              WHERE $5 > 0 AND b.account = payment.account_id AND b.chain = payment.chain AND b.shard = 0
             RETURNING 1
           ), entry AS (
             INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id,
                                         memo, created_at)
             SELECT 'x402ret_' || $1, payment.chain, payment.account_id, 'system:x402', $5, false, 'x402', NULL, '', 90
               FROM payment, debited
           ), returned AS (
             INSERT INTO ledger_balances AS b (account, chain, shard, may_overdraw, credits_posted)
             SELECT 'system:x402', payment.chain, $6, true, $5 FROM payment, debited
             ON CONFLICT (account, chain, shard) DO UPDATE SET credits_posted = b.credits_posted + EXCLUDED.credits_posted
           )
           SELECT (SELECT COUNT(*) FROM closed)::int AS n`,
          [id, status, settled, tx, returned, shard],
        );
      // pay_open: authorised, still open. pay_coll: collected, open. pay_ret: its call charged
      // 370 of 1,000, collected and closed returning 630. pay_unused: closed unused, all returned.
      await authorise("pay_open", "acct_a", 500, 1);
      await authorise("pay_coll", "acct_b", 700, 2);
      await authorise("pay_ret", "acct_a", 1_000, 3);
      await authorise("pay_unused", "acct_b", 300, 4);
      await pool.query(
        `UPDATE x402_payments SET status = 'collected', settled = 700, tx_hash = '0xcoll', collected_at = 20
          WHERE id = 'pay_coll'`,
      );
      await pool.query(
        `SELECT seq FROM tollgate_place_hold('hold_pay_ret', 'acct_a', 'req_ret', 'key_1', 'base', 1000, 'text', 'm',
                                             1, 1, '', 0, 30)`,
      );
      expect(
        (
          await pool.query(
            "SELECT resolved_now FROM tollgate_resolve('hold_pay_ret', 'settled', 370, 1, 1, 0, 0, 0, 0, '', 40, '')",
          )
        ).rows[0].resolved_now,
      ).toBe(true);
      await pool.query("UPDATE x402_payments SET collected_at = 50 WHERE id = 'pay_ret'");
      expect((await close("pay_ret", "settled", 370, "0xret", 630, 5)).rows[0].n).toBe(1);
      expect((await close("pay_unused", "unused", 0, "", 300, 6)).rows[0].n).toBe(1);
      const shards = await pool.query(
        "SELECT COUNT(*)::int AS n FROM ledger_balances WHERE account = 'system:x402'",
      );
      expect(shards.rows[0].n).toBe(7);
    } finally {
      await pool.end();
    }

    // Version 19, as a host applies it at start.
    const migrated = await openPostgres(url, 4);
    try {
      const ledger = new PgLedger(migrated);
      expect(await auditPostgres(migrated)).toEqual([]);
      expect(await ledger.balance(SYSTEM_X402, CHAIN)).toEqual({
        account: SYSTEM_X402,
        chain: CHAIN,
        debitsPending: 0n,
        debitsPosted: 2_500n,
        creditsPending: 0n,
        creditsPosted: 630n + 300n + 7n,
      });
      const rows = async () =>
        (
          await migrated.query(
            `SELECT account, shard, x402_in::text AS "in", x402_out::text AS out, credits_posted::text AS cpo,
                    debits_posted::text AS dpo
               FROM ledger_balances WHERE account IN ('acct_a', 'acct_b', 'system:x402') ORDER BY account`,
          )
        ).rows;
      // acct_a: pay_open and pay_ret in, 630 back (and 370 charged); acct_b: pay_coll and
      // pay_unused in, 300 back. system:x402 keeps one row: the operator's credit.
      expect(await rows()).toEqual([
        { account: "acct_a", shard: 0, in: "1500", out: "630", cpo: "1500", dpo: "1000" },
        { account: "acct_b", shard: 0, in: "1000", out: "300", cpo: "1000", dpo: "300" },
        { account: SYSTEM_X402, shard: 0, in: "0", out: "0", cpo: "7", dpo: "0" },
      ]);
      // Run again, it changes nothing.
      expect((await migrated.query("SELECT tollgate_x402_onto_accounts() AS n")).rows[0].n).toBe(2);
      expect(await ledger.balance(SYSTEM_X402, CHAIN)).toMatchObject({
        debitsPosted: 2_500n,
        creditsPosted: 937n,
      });

      // The payments from before close with the new statements; new ones come and go.
      expect(await ledger.closeX402(unused("pay_open", 500n, 100))).toBe("closed");
      expect(
        await ledger.closeX402({
          id: "pay_coll",
          status: "settled",
          settled: 700n,
          txHash: "0xcoll",
          error: "",
          returned: 700n,
          now: 100,
        }),
      ).toBe("closed");
      expect(await ledger.authoriseX402(payment("pay_new", "acct_b", 50n, 110))).toBe("authorised");
      expect(await ledger.closeX402(unused("pay_new", 50n, 120))).toBe("closed");
      expect(await auditPostgres(migrated)).toEqual([]);
      expect(await ledger.balance(SYSTEM_X402, CHAIN)).toMatchObject({
        debitsPosted: 2_550n,
        creditsPosted: 937n + 500n + 700n + 50n,
      });
      expect(await rows()).toEqual([
        { account: "acct_a", shard: 0, in: "1500", out: "1130", cpo: "1500", dpo: "1500" },
        { account: "acct_b", shard: 0, in: "1050", out: "1050", cpo: "1050", dpo: "1050" },
        { account: SYSTEM_X402, shard: 0, in: "0", out: "0", cpo: "7", dpo: "0" },
      ]);
      await migratePostgres(migrated);
    } finally {
      await migrated.end();
    }
  });

  it("the audit names an account whose row carries x402 funds its entries do not give it", async () => {
    const pool = await openPostgres(await server().freshDatabase(), 4);
    try {
      for (const account of ["acct_a", "acct_b"])
        await new PgAccountStore(pool).insertAccount(account, "", 1);
      const ledger = new PgLedger(pool);
      expect(await ledger.authoriseX402(payment("p_a", "acct_a", 100n, 10))).toBe("authorised");
      expect(await ledger.authoriseX402(payment("p_b", "acct_b", 100n, 10))).toBe("authorised");
      expect(await auditPostgres(pool)).toEqual([]);
      // The same total, on the wrong rows: system:x402's sum still balances.
      await pool.query(
        "UPDATE ledger_balances SET x402_in = CASE account WHEN 'acct_a' THEN 150 ELSE 50 END, x402_out = 0",
      );
      expect(await auditPostgres(pool)).toEqual([
        "acct_a on base: its row holds x402 in 150, out 0; its entries give 100, 0",
        "acct_b on base: its row holds x402 in 50, out 0; its entries give 100, 0",
      ]);
    } finally {
      await pool.end();
    }
  });
});
