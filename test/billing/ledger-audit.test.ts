import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { NO_USAGE } from "../../src/core/billing/pricing.js";
import { SYSTEM_MANUAL_CREDIT } from "../../src/core/ports/ledger.js";
import type { NewX402Payment, X402Closing } from "../../src/core/ports/x402.js";
import { AuthRepository } from "../../src/store/auth-repository.js";
import { migrate, openDatabase } from "../../src/store/database.js";
import { auditLedger } from "../../src/store/ledger-audit.js";
import { LedgerRepository } from "../../src/store/ledger-repository.js";
import { migrations } from "../../src/store/migrations.js";
import { X402Repository } from "../../src/store/x402-repository.js";
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

describe("the ledger audit of x402 payments", () => {
  const payment = (id: string, holdId: string, authorised: bigint): NewX402Payment => ({
    id,
    holdId,
    accountId: account,
    chain: "base",
    scheme: "upto",
    payer: "0xpayer",
    authorised,
    payload: "{}",
    createdAt: 1,
  });
  const closing = (id: string, returned: bigint): X402Closing => ({
    id,
    status: "unused",
    settled: 0n,
    txHash: "",
    error: "",
    returned,
    now: 2,
  });
  const x402 = () => new X402Repository(f.db, new LedgerRepository(f.db));
  /** An entry of kind x402 written by hand, with its running balances, so only the x402 checks see it. */
  const entry = (id: string, debit: string, credit: string, amount: bigint) => {
    new LedgerRepository(f.db).post({
      id,
      chain: "base",
      debit,
      credit,
      amount,
      kind: "x402",
      memo: "",
      createdAt: 3,
    });
  };

  it("passes open and closed payments, a return being what the call's charge left, and catches one that is not", () => {
    const r = x402();
    const settled = f.db
      .prepare(
        "SELECT r.hold_id, r.amount FROM hold_resolutions r JOIN holds h ON h.id = r.hold_id WHERE h.account_id = ?",
      )
      .safeIntegers(true)
      .get(account) as { hold_id: string; amount: bigint };
    expect(r.authorise(payment("pay_open", "h_open", 50n))).toBe("authorised");
    expect(r.authorise(payment("pay_unused", "h_unused", 70n))).toBe("authorised");
    expect(r.close(closing("pay_unused", 70n))).toBe("closed");
    expect(r.authorise(payment("pay_charged", settled.hold_id, settled.amount + 10n))).toBe("authorised");
    expect(r.close({ ...closing("pay_charged", 10n), status: "settled", settled: settled.amount })).toBe(
      "closed",
    );
    expect(auditLedger(f.db)).toEqual([]);
    // Closing takes the return it is given: one short of what the call left is the audit's to find.
    expect(r.authorise(payment("pay_short", "h_short", 90n))).toBe("authorised");
    expect(r.close(closing("pay_short", 60n))).toBe("closed");
    expect(auditLedger(f.db)).toEqual([
      "x402 payment pay_short: returned 60, but authorised 90 less its call's charge 0 is 90",
    ]);
  });

  it("catches an open payment's return, a collection outside settled, a credit that differs, a closing without a time, a stray entry", () => {
    const r = x402();
    r.authorise(payment("pay_a", "h_a", 50n));
    r.authorise(payment("pay_b", "h_b", 70n));
    r.close(closing("pay_b", 70n));
    entry("x402ret_pay_a", account, "system:x402", 5n);
    entry("x402_nobody", "system:x402", account, 5n);
    entry("x402_pay_b_again", "system:x402", account, 5n);
    f.db.exec("UPDATE x402_payments SET settled = 7, closed_at = NULL WHERE id = 'pay_b'");
    f.db.exec("UPDATE x402_payments SET authorised = 51 WHERE id = 'pay_a'");
    expect(auditLedger(f.db).sort()).toEqual(
      [
        "x402 payment pay_a: open, but its return is posted",
        "x402 payment pay_a: authorises 51, its credit entry is 50",
        "x402 payment pay_b: unused without a closing time",
        "x402 payment pay_b: unused, yet 7 collected onchain",
        "ledger entry x402_nobody: of kind x402, but no payment's credit or return",
        "ledger entry x402_pay_b_again: of kind x402, but no payment's credit or return",
      ].sort(),
    );
  });

  it("migration 11 rebuilds ledger_entries to admit 'x402', keeping every entry, its index and its append-only triggers", () => {
    const db = openDatabase(
      ":memory:",
      migrations.filter((m) => m.version <= 10),
    );
    try {
      new AuthRepository(db).createAccount("acct_m", "", 1);
      const ledger = new LedgerRepository(db);
      ledger.credit({
        entryId: "c1",
        accountId: "acct_m",
        chain: "base",
        amount: 1000n,
        from: SYSTEM_MANUAL_CREDIT,
        memo: "m",
        createdAt: 1,
      });
      const hold = (id: string, amount: bigint) => ({
        id,
        accountId: "acct_m",
        requestId: id,
        keyId: "",
        chain: "base",
        amount,
        callKind: "text" as const,
        model: "m",
        inputTokens: 1n,
        maxTokens: 1n,
        imageSize: "",
        imageCount: 0,
        createdAt: 2,
      });
      expect(ledger.placeHold(hold("h1", 300n)).kind).toBe("placed");
      expect(
        ledger.settle(
          "h1",
          120n,
          {
            inputTokens: 0n,
            outputTokens: 0n,
            cacheWrite5mTokens: 0n,
            cacheWrite1hTokens: 0n,
            cacheReadTokens: 0n,
            images: 0,
          },
          3,
        ).kind,
      ).toBe("resolved");
      expect(ledger.placeHold(hold("h2", 200n)).kind).toBe("placed");
      const entries = () => db.prepare("SELECT * FROM ledger_entries ORDER BY seq").safeIntegers(true).all();
      // The table's index and triggers, as SQLite keeps their definitions.
      const objects = () =>
        db
          .prepare(
            "SELECT type, name, sql FROM sqlite_schema WHERE tbl_name = 'ledger_entries' AND type <> 'table' ORDER BY name",
          )
          .all();
      const before = { entries: entries(), objects: objects() };
      expect(before.entries).toHaveLength(4);
      expect(before.objects.map((o) => (o as { name: string }).name)).toEqual([
        "ledger_entries_by_hold",
        "ledger_entries_no_delete",
        "ledger_entries_no_update",
        "sqlite_autoindex_ledger_entries_1",
      ]);
      expect(() =>
        db.exec(`INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, created_at)
                 VALUES ('x402_early', 'base', 'system:x402', 'acct_m', 1, 0, 'x402', 4)`),
      ).toThrow(/CHECK constraint failed/);

      migrate(db, migrations);
      expect(db.pragma("user_version", { simple: true })).toBe(migrations.at(-1)?.version);
      expect(entries()).toEqual(before.entries);
      expect(objects()).toEqual(before.objects);
      expect(db.pragma("foreign_key_check")).toEqual([]);
      expect(db.pragma("integrity_check", { simple: true })).toBe("ok");
      expect(() => db.exec("UPDATE ledger_entries SET amount = 1")).toThrow(/append-only/);
      expect(() => db.exec("DELETE FROM ledger_entries")).toThrow(/append-only/);
      // The ledger carries on: the open hold resolves, an x402 payment is credited and closed.
      expect(ledger.void("h2", "released", 5).kind).toBe("resolved");
      const x402 = new X402Repository(db, new LedgerRepository(db));
      expect(x402.authorise({ ...payment("pay_m", "h3", 40n), accountId: "acct_m" })).toBe("authorised");
      expect(x402.close(closing("pay_m", 40n))).toBe("closed");
      expect(auditLedger(db)).toEqual([]);
    } finally {
      db.close();
    }
  });
});
