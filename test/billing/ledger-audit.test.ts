import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { NO_USAGE } from "../../src/core/billing/pricing.js";
import { auditLedger } from "../../src/store/ledger-audit.js";
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
});
