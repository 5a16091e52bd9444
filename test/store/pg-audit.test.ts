import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { auditPostgres } from "../../src/store/postgres/audit.js";
import { openPostgres } from "../../src/store/postgres/database.js";
import { type PostgresServer, startPostgres } from "../helpers/postgres.js";

// The ledger audit over PostgreSQL reads what SQLite's does (ledger-audit.ts); here, that it
// reads PostgreSQL's types exactly (bigints beyond 2^53, booleans, shard rows) and still finds
// a tampered balance.

let server: PostgresServer;
let pool: pg.Pool;
beforeAll(async () => {
  server = await startPostgres();
  pool = await openPostgres(await server.freshDatabase());
  await pool.query("INSERT INTO accounts (id, status, created_at) VALUES ('acct_a', 'active', 1)");
});
afterAll(async () => {
  await pool?.end();
  await server?.stop();
});

/** A credit of `amount` to acct_a from the manual-credit account, its side in shard `shard`. */
async function credit(id: string, amount: bigint, shard: number) {
  await pool.query(
    `INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, created_at)
     VALUES ($1, 'base', 'system:manual-credit', 'acct_a', $2, false, 'credit', 1)`,
    [id, amount.toString()],
  );
  await pool.query(
    `INSERT INTO ledger_balances (account, chain, may_overdraw, credits_posted) VALUES ('acct_a', 'base', false, $1)
     ON CONFLICT (account, chain, shard) DO UPDATE SET credits_posted = ledger_balances.credits_posted + $1`,
    [amount.toString()],
  );
  await pool.query(
    `INSERT INTO ledger_balances (account, chain, shard, may_overdraw, debits_posted) VALUES ('system:manual-credit', 'base', $2, true, $1)
     ON CONFLICT (account, chain, shard) DO UPDATE SET debits_posted = ledger_balances.debits_posted + $1`,
    [amount.toString(), shard],
  );
}

describe("the ledger audit over PostgreSQL", () => {
  it("passes a sound ledger whose system side is spread over shards, with amounts beyond 2^53", async () => {
    await credit("c1", 2n ** 60n + 1n, 3);
    await credit("c2", 7n, 11);
    expect(await auditPostgres(pool)).toEqual([]);
  });

  it("finds a running balance that no longer replays from its entries (off by one unit at 2^60)", async () => {
    await pool.query(
      "UPDATE ledger_balances SET credits_posted = credits_posted + 1 WHERE account = 'acct_a' AND chain = 'base'",
    );
    const problems = await auditPostgres(pool);
    expect(problems).toContain(
      `acct_a on base: creditsPosted is ${2n ** 60n + 9n}, replay gives ${2n ** 60n + 8n}`,
    );
    expect(problems).toContainEqual(expect.stringMatching(/^base: posted debits .* ≠ posted credits/));
  });
});
