import { describe, expect, it } from "vitest";
import { SYSTEM_REVENUE } from "../../src/core/ports/ledger.js";
import { auditPostgres } from "../../src/store/postgres/audit.js";
import { openPostgres } from "../../src/store/postgres/database.js";
import { PgLedger } from "../../src/store/postgres/ledger.js";
import { CHAIN, fundAccounts, suitePostgres, testHold, USAGE } from "../helpers/pg-ledger.js";

// Migrations 22 and 23: a settlement writes what it releases and charges beside its account's
// balance row (balance_releases) and what it gives back of its key's day beside spend_days
// (spend_returns), rows no hold locks; a hold reads them without a lock and folds them onto the
// row when the row alone falls short (docs/store.md, "Settlements beside the balance row").

const server = suitePostgres();

/** The account's balance row as stored, and the releases beside it. */
async function rows(pool: import("pg").Pool, account = "acct_a") {
  const { rows } = await pool.query<{
    available: string;
    pending: string;
    released: string;
    charged: string;
  }>(
    `SELECT (b.credits_posted - b.debits_posted - b.debits_pending)::text AS available,
            b.debits_pending::text AS pending,
            COALESCE(r.released, 0)::text AS released, COALESCE(r.charged, 0)::text AS charged
       FROM ledger_balances b LEFT JOIN balance_releases r ON r.account = b.account AND r.chain = b.chain
      WHERE b.account = $1 AND b.shard = 0`,
    [account],
  );
  return rows[0];
}

/**
 * Runs `body` on a fresh database whose acct_a has `funds` on {@link CHAIN}, over a pool of
 * `poolSize`, and ends with the audit: the ledger must replay clean.
 */
async function withFunded(
  funds: bigint,
  body: (pool: import("pg").Pool, ledger: PgLedger) => Promise<void>,
  poolSize = 4,
): Promise<void> {
  const pool = await openPostgres(await server().freshDatabase(), poolSize);
  try {
    const ledger = new PgLedger(pool);
    await fundAccounts(pool, ledger, ["acct_a"], funds);
    await body(pool, ledger);
    expect(await auditPostgres(pool)).toEqual([]);
  } finally {
    await pool.end();
  }
}

describe("settlements beside the balance row on PostgreSQL", () => {
  it("a settlement waits on none of the rows its account's holds keep locked", async () => {
    const url = await server().freshDatabase();
    const pool = await openPostgres(url, 4);
    const ledger = new PgLedger(pool);
    await fundAccounts(pool, ledger, ["acct_a"]);
    await pool.query(
      "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET statement_timeout = 1000', current_database()); END $$",
    );
    const timed = await openPostgres(url, 4);
    const holding = await pool.connect();
    try {
      const other = new PgLedger(timed);
      expect((await other.placeHold(testHold("h1", 1_000n))).kind).toBe("placed");
      // A hold in flight: the account's balance row and its key's day locked, as a hold's
      // UPDATE and upsert leave them until its commit.
      await holding.query("BEGIN");
      await holding.query(
        "SELECT 1 FROM ledger_balances WHERE account = 'acct_a' AND chain = $1 AND shard = 0 FOR NO KEY UPDATE",
        [CHAIN],
      );
      await holding.query("UPDATE spend_days SET spent = spent WHERE account_id = 'acct_a'");
      // Under a 1 s statement_timeout: on migration 20's resolution this waited for the commit
      // above, and failed.
      expect((await other.settle("h1", 300n, USAGE, 20, "")).kind).toBe("resolved");
      await holding.query("COMMIT");
      expect(await rows(pool)).toEqual({
        available: "9000",
        pending: "1000",
        released: "1000",
        charged: "300",
      });
      expect(await ledger.balance("acct_a", CHAIN)).toMatchObject({ debitsPending: 0n, debitsPosted: 300n });
      expect(await ledger.balance(SYSTEM_REVENUE, CHAIN)).toMatchObject({
        creditsPending: 0n,
        creditsPosted: 300n,
      });
      expect(await auditPostgres(pool)).toEqual([]);
    } finally {
      holding.release();
      await timed.end();
      await pool.end();
    }
  });

  it("a hold the row alone cannot cover folds the releases onto it; one the totals cannot cover is refused", () =>
    withFunded(1_000n, async (pool, ledger) => {
      for (let i = 0; i < 10; i++)
        expect((await ledger.placeHold(testHold(`h${i}`, 100n))).kind).toBe("placed");
      for (let i = 0; i < 10; i++)
        expect((await ledger.settle(`h${i}`, 30n, USAGE, 20, "")).kind).toBe("resolved");
      // The row shows nothing available; the account has 700.
      expect(await rows(pool)).toEqual({ available: "0", pending: "1000", released: "1000", charged: "300" });
      expect(await ledger.balance("acct_a", CHAIN)).toMatchObject({ debitsPending: 0n, debitsPosted: 300n });
      expect(await ledger.placeHold(testHold("too_much", 701n))).toEqual({
        kind: "insufficient",
        available: 700n,
      });
      expect(await rows(pool)).toMatchObject({ released: "1000" });
      // What the releases cover is placed: they are on the row now.
      expect((await ledger.placeHold(testHold("big", 700n))).kind).toBe("placed");
      expect(await rows(pool)).toEqual({ available: "0", pending: "700", released: "0", charged: "0" });
      expect(await ledger.placeHold(testHold("one_more", 1n))).toEqual({
        kind: "insufficient",
        available: 0n,
      });
      expect((await ledger.settle("big", 700n, USAGE, 30, "")).kind).toBe("resolved");
      expect(await ledger.balance("acct_a", CHAIN)).toMatchObject({
        debitsPending: 0n,
        debitsPosted: 1_000n,
        creditsPosted: 1_000n,
      });
    }));

  it("a raise the row alone cannot cover is made from the releases", () =>
    withFunded(200n, async (pool, ledger) => {
      expect((await ledger.placeHold(testHold("a", 100n))).kind).toBe("placed");
      expect((await ledger.placeHold(testHold("b", 100n))).kind).toBe("placed");
      expect((await ledger.settle("a", 20n, USAGE, 20, "")).kind).toBe("resolved");
      expect(await rows(pool)).toMatchObject({ available: "0", released: "100" });
      const raised = await ledger.raiseHold({ holdId: "b", pass: 2, amount: 80n, createdAt: 30 });
      expect(raised.kind).toBe("raised");
      const refused = await ledger.raiseHold({ holdId: "b", pass: 3, amount: 1n, createdAt: 31 });
      expect(refused).toEqual({ kind: "insufficient", available: 0n });
      expect((await ledger.settle("b", 150n, USAGE, 40, "")).kind).toBe("resolved");
      expect(await ledger.balance("acct_a", CHAIN)).toMatchObject({ debitsPending: 0n, debitsPosted: 170n });
    }));

  it("a key's daily cap counts what its settlements gave back", () =>
    withFunded(10_000n, async (pool, ledger) => {
      await ledger.setSpendCap(
        { accountId: "acct_a", keyId: "key_1", chain: CHAIN, period: "day", amount: 100n },
        1,
      );
      expect((await ledger.placeHold(testHold("a", 80n))).kind).toBe("placed");
      expect((await ledger.settle("a", 20n, USAGE, 20, "")).kind).toBe("resolved");
      const { rows: days } = await pool.query(
        "SELECT d.spent::text AS spent, s.returned::text AS returned FROM spend_days d JOIN spend_returns s USING (account_id, chain, key_id, day)",
      );
      expect(days).toEqual([{ spent: "80", returned: "60" }]);
      // 20 spent: 80 more fits the cap of 100, 81 does not.
      expect((await ledger.placeHold(testHold("b", 81n))).kind).toBe("capped");
      expect((await ledger.placeHold(testHold("c", 80n))).kind).toBe("placed");
    }));

  it("one account's holds and settlements racing at the edge of its funds: every charge taken once, never overdrawn", () =>
    withFunded(
      1_000n,
      async (pool, ledger) => {
        let charged = 0n;
        let placed = 0;
        let refused = 0;
        // 16 callers at once, each holding 100 (1,600 asked of 1,000) and settling for 0-10, until
        // the charges use the funds up: the holds that find the row short fold what the
        // settlements released, and the last ones are refused.
        await Promise.all(
          Array.from({ length: 16 }, async (_, w) => {
            for (let i = 0; i < 15; i++) {
              const id = `w${w}_${i}`;
              const result = await ledger.placeHold(testHold(id, 100n));
              if (result.kind !== "placed") {
                expect(result.kind).toBe("insufficient");
                refused++;
                continue;
              }
              placed++;
              const charge = BigInt((w * 7 + i * 13) % 11);
              expect((await ledger.settle(id, charge, USAGE, 20, "")).kind).toBe("resolved");
              charged += charge;
            }
          }),
        );
        expect(placed + refused).toBe(240);
        expect(refused).toBeGreaterThan(0);
        expect(charged).toBeLessThanOrEqual(1_000n);
        const balance = await ledger.balance("acct_a", CHAIN);
        expect(balance).toMatchObject({ debitsPending: 0n, debitsPosted: charged, creditsPosted: 1_000n });
        expect(await ledger.balance(SYSTEM_REVENUE, CHAIN)).toMatchObject({
          creditsPending: 0n,
          creditsPosted: charged,
        });
        const { rows: negative } = await pool.query(
          "SELECT 1 FROM ledger_balances WHERE NOT may_overdraw AND credits_posted - debits_posted - debits_pending < 0",
        );
        expect(negative).toEqual([]);
      },
      12,
    ));
});
