import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { NO_USAGE } from "../../src/core/billing/pricing.js";
import { migrate } from "../../src/store/database.js";
import { auditLedger } from "../../src/store/ledger-audit.js";
import { migrations } from "../../src/store/migrations.js";
import { type LedgerFixture, ledgerFixture, SMALL_TEXT_CALL } from "./fixtures.js";

// The checker that runs after every ledger test must itself catch what it claims to.
let f: LedgerFixture;
let account: string;

beforeEach(async () => {
  f = ledgerFixture();
  account = f.account();
  await f.billing.credit({ accountId: account, chain: "base", amount: 100_000n, reason: "r", creditId: "" });
  const { hold } = await f.billing.hold({
    accountId: account,
    requestId: "r",
    keyId: "",
    chain: "base",
    call: SMALL_TEXT_CALL,
  });
  await f.billing.settle(hold.id, { ...NO_USAGE, outputTokens: 10n });
  await f.billing.hold({
    accountId: account,
    requestId: "p",
    keyId: "",
    chain: "base",
    call: SMALL_TEXT_CALL,
  });
});

afterEach(() => f.db.close());

describe("the ledger audit", () => {
  it("passes a sound ledger", () => {
    expect(auditLedger(f.db)).toEqual([]);
  });

  it("catches a running balance that disagrees with its entries", () => {
    f.db
      .prepare("UPDATE ledger_balances SET credits_posted = credits_posted + 1 WHERE account = ?")
      .run(account);
    const problems = auditLedger(f.db);
    expect(problems).toContainEqual(expect.stringMatching(/creditsPosted is 100001, replay gives 100000/));
    expect(problems).toContainEqual(expect.stringMatching(/base: posted debits .* ≠ posted credits/));
  });

  it("catches an entry written without its running balance (conservation per chain)", () => {
    f.db
      .prepare(
        `INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, created_at)
         VALUES ('x', 'base', 'system:manual-credit', ?, 5, 0, 'credit', 0)`,
      )
      .run(account);
    expect(auditLedger(f.db)).toContainEqual(expect.stringMatching(/replay gives/));
  });

  it("catches a pending hold missing from the sweeper's open list", () => {
    f.db.exec("DELETE FROM open_holds");
    expect(auditLedger(f.db)).toContainEqual(expect.stringMatching(/open list disagrees/));
  });

  it("catches a key's spend of a day that disagrees with its holds (what spend caps read)", () => {
    f.db.prepare("UPDATE spend_days SET spent = spent - 1 WHERE account_id = ?").run(account);
    expect(auditLedger(f.db)).toContainEqual(
      expect.stringMatching(
        new RegExp(
          `^${account} key '' on base, day \\d{4}-\\d\\d-\\d\\d: spend_days says \\d+, its holds \\d+$`,
        ),
      ),
    );
    f.db.prepare("DELETE FROM spend_days WHERE account_id = ?").run(account);
    expect(auditLedger(f.db)).toContainEqual(
      expect.stringMatching(/spend_days says nothing, its holds \d+$/),
    );
  });

  it("migration 10 fills spend_days from the holds a version-9 ledger has", () => {
    const [settled, open] = f.db
      .prepare("SELECT amount FROM holds WHERE account_id = ? ORDER BY seq")
      .all(account) as { amount: number }[];
    // The ledger as version 9 left it: no spend per day yet, caps scanning holds by time.
    f.db.exec(`DROP TABLE spend_days;
               CREATE INDEX holds_by_chain_time ON holds (account_id, chain, created_at);
               PRAGMA user_version = 9;`);
    // Up to migration 10 only: the later ones are already applied to the rest of this schema.
    migrate(
      f.db,
      migrations.filter((m) => m.version <= 10),
    );
    expect(f.db.pragma("user_version", { simple: true })).toBe(10);
    const [row] = f.db.prepare("SELECT spent FROM spend_days WHERE account_id = ?").all(account) as {
      spent: number;
    }[];
    const charged = f.db
      .prepare(
        "SELECT r.amount FROM hold_resolutions r JOIN holds h ON h.id = r.hold_id WHERE h.account_id = ?",
      )
      .get(account) as { amount: number };
    expect(charged.amount).toBeLessThan(settled!.amount);
    expect(row!.spent).toBe(charged.amount + open!.amount);
    expect(auditLedger(f.db)).toEqual([]);
  });
});
