import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { inTransaction, openPostgres } from "../../src/store/postgres/database.js";
import { type PostgresServer, startPostgres } from "../helpers/postgres.js";

// The money invariants the PostgreSQL ledger relies on the database itself for, checked with
// plain SQL from several connections at once (what several gateway hosts are).

let server: PostgresServer;
let pool: pg.Pool;
beforeAll(async () => {
  server = await startPostgres();
  pool = await openPostgres(await server.freshDatabase(), 16);
  await pool.query("INSERT INTO accounts (id, status, created_at) VALUES ('acct_a', 'active', 1)");
  await pool.query(
    `INSERT INTO ledger_balances (account, chain, may_overdraw, credits_posted) VALUES
       ('acct_a', 'base', false, 1000), ('system:revenue', 'base', true, 0)`,
  );
});
afterAll(async () => {
  await pool?.end();
  await server?.stop();
});

/** One hold of `amount` as the PostgreSQL ledger will place it: a pending move, in one transaction. */
function placeHold(id: string, amount: number) {
  return inTransaction(pool, async (client) => {
    await client.query(
      `INSERT INTO holds (id, account_id, request_id, chain, amount, call_kind, model, input_tokens, max_tokens, created_at)
       VALUES ($1, 'acct_a', $1, 'base', $2, 'text', 'm', 1, 1, 1)`,
      [id, amount],
    );
    await client.query(
      `INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id, created_at)
       VALUES ($1 || '/hold', 'base', 'acct_a', 'system:revenue', $2, true, 'hold', $1, 1)`,
      [id, amount],
    );
    await client.query(
      "UPDATE ledger_balances SET debits_pending = debits_pending + $1 WHERE account = 'acct_a' AND chain = 'base'",
      [amount],
    );
    await client.query(
      "UPDATE ledger_balances SET credits_pending = credits_pending + $1 WHERE account = 'system:revenue' AND chain = 'base'",
      [amount],
    );
  });
}

describe("the PostgreSQL ledger schema", () => {
  it("available never goes below zero: 64 concurrent holds against a balance covering 10 → exactly 10 land", async () => {
    const outcomes = await Promise.allSettled(
      Array.from({ length: 64 }, (_, i) => placeHold(`hold_${i}`, 100)),
    );
    const landed = outcomes.filter((o) => o.status === "fulfilled");
    expect(landed).toHaveLength(10);
    for (const o of outcomes) {
      if (o.status === "rejected")
        expect(String((o.reason as Error).message)).toMatch(/available_never_negative/);
    }
    const { rows } = await pool.query<{ available: string; pending: string; held: string }>(
      `SELECT (credits_posted - debits_posted - debits_pending)::text AS available, debits_pending::text AS pending,
              (SELECT count(*) FROM holds)::text AS held
         FROM ledger_balances WHERE account = 'acct_a'`,
    );
    // Nothing of a refused hold stayed: its hold row and entry rolled back with it.
    expect(rows[0]).toEqual({ available: "0", pending: "1000", held: "10" });
    // Conservation: every entry's amount is debited once and credited once.
    const sums = await pool.query<{ debits: string; credits: string }>(
      "SELECT sum(debits_pending)::text AS debits, sum(credits_pending)::text AS credits FROM ledger_balances",
    );
    expect(sums.rows[0]!.debits).toBe(sums.rows[0]!.credits);
  });

  it("a hold resolves at most once, whichever connection tries", async () => {
    const resolve = (status: string) =>
      pool.query(
        "INSERT INTO hold_resolutions (hold_id, status, amount, resolved_at) VALUES ('hold_0', $1, 0, 2)",
        [status],
      );
    const outcomes = await Promise.allSettled([resolve("settled"), resolve("released"), resolve("expired")]);
    expect(outcomes.filter((o) => o.status === "fulfilled")).toHaveLength(1);
    expect(
      outcomes.filter((o) => o.status === "rejected").map((o) => (o as PromiseRejectedResult).reason.code),
    ).toEqual(["23505", "23505"]);
  });

  it("entries, holds and resolutions are append-only: no update, delete or truncate", async () => {
    for (const statement of [
      "UPDATE ledger_entries SET amount = 1",
      "DELETE FROM ledger_entries",
      "TRUNCATE ledger_entries",
      "UPDATE holds SET amount = 0",
      "DELETE FROM holds",
      "UPDATE hold_resolutions SET amount = 1",
      "DELETE FROM hold_resolutions",
    ]) {
      await expect(pool.query(statement), statement).rejects.toThrow(/is append-only/);
    }
    expect((await pool.query("SELECT 1 FROM ledger_entries")).rowCount).toBe(10);
  });
});
