import type Database from "better-sqlite3";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { NO_USAGE } from "../../src/core/billing/pricing.js";
import { heldOf, SYSTEM_MANUAL_CREDIT } from "../../src/core/ports/ledger.js";
import type { NewX402Payment, X402Closing } from "../../src/core/ports/x402.js";
import { AuthRepository } from "../../src/store/sqlite/accounts.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { migrate, openDatabase } from "../../src/store/sqlite/database.js";
import { LedgerRepository } from "../../src/store/sqlite/ledger.js";
import { migrations } from "../../src/store/sqlite/migrations.js";
import { X402Repository } from "../../src/store/sqlite/x402.js";
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

/** Raises a hold in the store itself (the audit's concern is what the store wrote). */
const raise = (holdId: string, pass: number, amount: bigint) =>
  new LedgerRepository(f.db).raiseHold({ holdId, pass, amount, createdAt: 2 });

/**
 * A LedgerRepository on a database an old migration left: its statements name the provider
 * endpoint of a resolution (migration 16), so that column is there while it writes, and gone
 * again ({@link dropEndpoint}) before the migrations under test run.
 */
function oldLedger(db: Database.Database): LedgerRepository {
  db.exec("ALTER TABLE hold_resolutions ADD COLUMN endpoint TEXT NOT NULL DEFAULT ''");
  return new LedgerRepository(db);
}

function dropEndpoint(db: Database.Database): void {
  db.exec("ALTER TABLE hold_resolutions DROP COLUMN endpoint");
}

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

  it("passes raised holds, open and resolved, and catches a raise without its entry, an entry that differs, an open total that disagrees, a charge above the raised hold", async () => {
    const open = (await f.billing.call(account, "p"))!.hold;
    expect(raise(open.id, 2, 1000n).kind).toBe("raised");
    expect(raise(open.id, 3, 500n).kind).toBe("raised");
    const { hold } = await f.billing.hold({
      accountId: account,
      requestId: "q",
      keyId: "",
      chain: "base",
      call: SMALL_TEXT_CALL,
    });
    expect(raise(hold.id, 2, 700n).kind).toBe("raised");
    await f.billing.settle(hold.id, { ...NO_USAGE, outputTokens: 10n });
    expect(auditLedger(f.db)).toEqual([]);

    // The open list's total drifts from the raises.
    f.db.prepare("UPDATE open_holds SET raised = raised + 1 WHERE hold_id = ?").run(open.id);
    expect(auditLedger(f.db)).toContainEqual(`hold ${open.id}: open list says raised 1501, its raises 1500`);
    f.db.prepare("UPDATE open_holds SET raised = raised - 1 WHERE hold_id = ?").run(open.id);
    // A raise recorded without its pending entry (written by hand, triggers aside).
    f.db
      .prepare("INSERT INTO hold_raises (hold_id, pass, amount, created_at) VALUES (?, 4, 9, 0)")
      .run(open.id);
    f.db.prepare("UPDATE open_holds SET raised = raised + 9 WHERE hold_id = ?").run(open.id);
    expect(auditLedger(f.db)).toEqual(
      expect.arrayContaining([
        `hold ${open.id} raise 4: no pending entry`,
        expect.stringMatching(
          new RegExp(`^hold ${open.id}: pending entries \\d+ ≠ its hold \\d+ \\+ raises 1509$`),
        ),
      ]),
    );
    // Its entry, to the wrong account: the raise's check says so, the balances' replay too.
    f.db
      .prepare(
        `INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id, created_at)
         VALUES (?, 'base', ?, 'system:manual-credit', 9, 1, 'hold', ?, 0)`,
      )
      .run(`${open.id}/raise/4`, account, open.id);
    expect(auditLedger(f.db)).toContainEqual(
      expect.stringMatching(
        new RegExp(`^hold ${open.id} raise 4: its entry moves 9 from ${account} to system:manual-credit`),
      ),
    );
  });

  it("catches a charge above a hold's amount and its raises", async () => {
    const open = (await f.billing.call(account, "p"))!.hold;
    raise(open.id, 2, 100n);
    f.db.exec("DROP TRIGGER hold_resolutions_no_update");
    const settled = (await f.billing.call(account, "r"))!;
    f.db
      .prepare("UPDATE hold_resolutions SET amount = ? WHERE hold_id = ?")
      .run(heldOf(settled.hold) + 1n, settled.hold.id);
    expect(auditLedger(f.db)).toContainEqual(
      `hold ${settled.hold.id}: charged ${heldOf(settled.hold) + 1n} above its hold ${heldOf(settled.hold)}`,
    );
  });

  it("migration 15 adds hold_raises and the open holds' raised total, keeping every open hold; a hold open before it is raised after", async () => {
    const openHolds = () => f.db.prepare("SELECT hold_id, created_at FROM open_holds ORDER BY hold_id").all();
    const before = openHolds();
    expect(before).toHaveLength(1);
    // The ledger as version 14 left it.
    f.db.exec(`DROP TABLE hold_raises;
               ALTER TABLE open_holds DROP COLUMN raised;
               ALTER TABLE hold_resolutions DROP COLUMN endpoint;
               PRAGMA user_version = 14;`);
    migrate(f.db, migrations);
    expect(f.db.pragma("user_version", { simple: true })).toBe(migrations.at(-1)!.version);
    expect(openHolds()).toEqual(before);
    expect(f.db.prepare("SELECT raised FROM open_holds").all()).toEqual([{ raised: 0 }]);
    expect(auditLedger(f.db)).toEqual([]);
    const open = (await f.billing.call(account, "p"))!.hold;
    expect(raise(open.id, 2, 300n)).toMatchObject({
      kind: "raised",
      state: { hold: { raised: 300n } },
    });
    expect(() => f.db.exec("UPDATE hold_raises SET amount = 1")).toThrow(/append-only/);
    expect(() => f.db.exec("DELETE FROM hold_raises")).toThrow(/append-only/);
    expect(auditLedger(f.db)).toEqual([]);
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
      const ledger = oldLedger(db);
      ledger.credit({
        entryId: "c1",
        accountId: "acct_m",
        chain: "base",
        amount: 1000n,
        from: SYSTEM_MANUAL_CREDIT,
        memo: "m",
        createdAt: 1,
      });
      // Holds as version 10 wrote them, by hand (LedgerRepository reads holds with their raises,
      // which migration 15 adds): h1 held 300 and settled for 120 (off-chain: operator credit
      // backs it), h2 held 200 and open.
      db.exec(`INSERT INTO holds (id, account_id, request_id, key_id, chain, amount, call_kind, model, input_tokens,
                                  max_tokens, created_at)
                 VALUES ('h1', 'acct_m', 'h1', '', 'base', 300, 'text', 'm', 1, 1, 2),
                        ('h2', 'acct_m', 'h2', '', 'base', 200, 'text', 'm', 1, 1, 2);
               INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id,
                                           created_at)
                 VALUES ('h1/hold', 'base', 'acct_m', 'system:revenue', 300, 1, 'hold', 'h1', 2),
                        ('h1/charge', 'base', 'acct_m', 'system:revenue', 120, 0, 'charge', 'h1', 3),
                        ('h2/hold', 'base', 'acct_m', 'system:revenue', 200, 1, 'hold', 'h2', 2);
               INSERT INTO hold_resolutions (hold_id, status, amount, resolved_at) VALUES ('h1', 'settled', 120, 3);
               INSERT INTO settlement_intents (hold_id, account_id, chain, amount, onchain_amount, offchain_amount,
                                               created_at)
                 VALUES ('h1', 'acct_m', 'base', 120, 0, 120, 3);
               INSERT INTO open_holds (hold_id, created_at) VALUES ('h2', 2);
               UPDATE ledger_balances SET debits_pending = 200, debits_posted = 120 WHERE account = 'acct_m';
               INSERT INTO ledger_balances (account, chain, may_overdraw, credits_pending, credits_posted)
                 VALUES ('system:revenue', 'base', 1, 200, 120);
               INSERT INTO spend_days (account_id, key_id, chain, day, spent) VALUES ('acct_m', '', 'base', 0, 320);`);
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

      dropEndpoint(db);
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

  it("passes collected and cleared payments, and catches a collection without amount, transaction or time, a return before closing, a collection time or clearing outside their statuses", () => {
    const r = x402();
    expect(r.authorise(payment("pay_c", "h_c", 50n))).toBe("authorised");
    expect(r.collect({ id: "pay_c", collected: 20n, txHash: "0xc", now: 2 })).toBe("recorded");
    expect(r.authorise(payment("pay_r", "h_r", 60n))).toBe("authorised");
    expect(r.collect({ id: "pay_r", collected: 10n, txHash: "0xr", now: 2 })).toBe("recorded");
    expect(r.authorise(payment("pay_u", "h_u", 70n))).toBe("authorised");
    expect(r.close(closing("pay_u", 70n))).toBe("closed");
    expect(r.authorise(payment("pay_f", "h_f", 80n))).toBe("authorised");
    expect(r.close({ ...closing("pay_f", 80n), status: "failed", error: "reverted" })).toBe("closed");
    expect(r.clearFailed("0xpayer", 3)).toBe(1);
    expect(auditLedger(f.db)).toEqual([]);

    f.db.exec("UPDATE x402_payments SET settled = 0, tx_hash = '', collected_at = NULL WHERE id = 'pay_c'");
    entry("x402ret_pay_r", account, "system:x402", 5n);
    f.db.exec("UPDATE x402_payments SET collected_at = 3, cleared_at = 4 WHERE id = 'pay_u'");
    expect(auditLedger(f.db).sort()).toEqual(
      [
        "x402 payment pay_c: collected, but nothing collected onchain",
        "x402 payment pay_c: collected, without its transaction",
        "x402 payment pay_c: collected, without a collection time",
        "x402 payment pay_r: open, but its return is posted",
        "x402 payment pay_u: unused, yet has a collection time",
        "x402 payment pay_u: unused, yet cleared as a failed one",
      ].sort(),
    );
  });

  it("migration 13 rebuilds x402_payments to admit 'collected', keeping every payment; its indexes cover collected payments and uncleared failures", () => {
    const db = openDatabase(
      ":memory:",
      migrations.filter((m) => m.version <= 12),
    );
    try {
      new AuthRepository(db).createAccount("acct_m", "", 1);
      const ledger = oldLedger(db);
      // Payments as version 12 wrote them, by hand (X402Repository speaks version 13): each with
      // its credit, a closed one with its return; the settled one's call charged 10 of 50.
      const pay = (id: string, holdId: string, authorised: bigint, status: string, closed: string) => {
        db.exec(`INSERT INTO x402_payments (id, hold_id, account_id, chain, scheme, payer, authorised, payload,
                                            status, settled, tx_hash, error, created_at, closed_at)
                 VALUES ('${id}', '${holdId}', 'acct_m', 'base', 'upto', '0x${id}', ${authorised}, '{}',
                         '${status}', ${closed})`);
        ledger.post({
          id: `x402_${id}`,
          chain: "base",
          debit: "system:x402",
          credit: "acct_m",
          amount: authorised,
          kind: "x402",
          memo: "",
          createdAt: 2,
        });
      };
      const returned = (id: string, amount: bigint) =>
        ledger.post({
          id: `x402ret_${id}`,
          chain: "base",
          debit: "acct_m",
          credit: "system:x402",
          amount,
          kind: "x402",
          memo: "",
          createdAt: 4,
        });
      pay("pay_open", "h_open", 40n, "authorised", "0, '', '', 2, NULL");
      pay("pay_unused", "h_unused", 30n, "unused", "0, '', '', 2, 3");
      returned("pay_unused", 30n);
      pay("pay_failed", "h_failed", 20n, "failed", "0, '', 'reverted', 2, 4");
      returned("pay_failed", 20n);
      pay("pay_settled", "h_settled", 50n, "settled", "10, '0xs', '', 2, 5");
      // The settled payment's call as version 12 wrote it, by hand (LedgerRepository reads holds
      // with their raises, which migration 15 adds): held 50, charged 10, off-chain.
      db.exec(`INSERT INTO holds (id, account_id, request_id, key_id, chain, amount, call_kind, model, input_tokens,
                                  max_tokens, created_at)
                 VALUES ('h_settled', 'acct_m', 'h_settled', '', 'base', 50, 'text', 'm', 1, 1, 3);
               INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id,
                                           created_at)
                 VALUES ('h_settled/hold', 'base', 'acct_m', 'system:revenue', 50, 1, 'hold', 'h_settled', 3),
                        ('h_settled/charge', 'base', 'acct_m', 'system:revenue', 10, 0, 'charge', 'h_settled', 4);
               INSERT INTO hold_resolutions (hold_id, status, amount, resolved_at) VALUES ('h_settled', 'settled', 10, 4);
               INSERT INTO settlement_intents (hold_id, account_id, chain, amount, onchain_amount, offchain_amount,
                                               created_at)
                 VALUES ('h_settled', 'acct_m', 'base', 10, 0, 10, 4);
               UPDATE ledger_balances SET debits_posted = debits_posted + 10 WHERE account = 'acct_m';
               INSERT INTO ledger_balances (account, chain, may_overdraw, credits_posted)
                 VALUES ('system:revenue', 'base', 1, 10);
               INSERT INTO spend_days (account_id, key_id, chain, day, spent) VALUES ('acct_m', '', 'base', 0, 10);`);
      returned("pay_settled", 40n);
      const payments = () =>
        db.prepare("SELECT * FROM x402_payments ORDER BY id").safeIntegers(true).all() as Record<
          string,
          unknown
        >[];
      const indexes = () =>
        db
          .prepare(
            "SELECT name, sql FROM sqlite_schema WHERE tbl_name = 'x402_payments' AND type = 'index' ORDER BY name",
          )
          .all() as { name: string; sql: string | null }[];
      const before = payments();
      expect(before).toHaveLength(4);
      expect(indexes().map((i) => i.name)).toEqual([
        "sqlite_autoindex_x402_payments_1",
        "sqlite_autoindex_x402_payments_2",
        "x402_payments_open",
      ]);
      expect(() => db.exec("UPDATE x402_payments SET status = 'collected' WHERE id = 'pay_open'")).toThrow(
        /CHECK constraint failed/,
      );

      dropEndpoint(db);
      migrate(db, migrations);
      expect(db.pragma("user_version", { simple: true })).toBe(migrations.at(-1)?.version);
      const after = payments();
      expect(after.map(({ collected_at, cleared_at, collecting_at, ...kept }) => kept)).toEqual(before);
      // Migration 14's collecting_at too: no collection of a payment written before was begun since.
      expect(after.map((p) => [p.collected_at, p.cleared_at, p.collecting_at])).toEqual(
        Array(4).fill([null, null, null]),
      );
      expect(indexes()).toEqual([
        { name: "sqlite_autoindex_x402_payments_1", sql: null },
        { name: "sqlite_autoindex_x402_payments_2", sql: null },
        {
          name: "x402_payments_failed",
          sql: expect.stringMatching(/WHERE status = 'failed' AND cleared_at IS NULL$/),
        },
        {
          name: "x402_payments_open",
          sql: expect.stringMatching(/WHERE status IN \('authorised', 'collected'\)$/),
        },
      ]);
      expect(db.pragma("foreign_key_check")).toEqual([]);
      expect(db.pragma("integrity_check", { simple: true })).toBe("ok");
      expect(auditLedger(db)).toEqual([]);
      // The ledger carries on: the open payment is collected and still open, the failure listed.
      const x402 = new X402Repository(db, ledger);
      expect(x402.collect({ id: "pay_open", collected: 15n, txHash: "0xo", now: 6 })).toBe("recorded");
      expect(x402.open(10, 10).map((p) => [p.id, p.status])).toEqual([["pay_open", "collected"]]);
      expect(x402.failed("0xpay_failed", 10).map((p) => p.id)).toEqual(["pay_failed"]);
      expect(x402.clearFailed("0xpay_failed", 7)).toBe(1);
      expect(auditLedger(db)).toEqual([]);
    } finally {
      db.close();
    }
  });

  it("the x402 reads and the sweep use their indexes: open and failed payments their partial ones, a hold's payment x402_payments' unique hold_id", () => {
    const plan = (sql: string) =>
      (f.db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(1, 2) as { detail: string }[])
        .map((r) => r.detail)
        .join("; ");
    expect(
      plan(`SELECT * FROM x402_payments WHERE status IN ('authorised', 'collected') AND created_at < ?
             ORDER BY created_at, id LIMIT ?`),
    ).toMatch(/USING INDEX x402_payments_open/);
    expect(
      plan(`SELECT * FROM x402_payments WHERE payer = ? AND status = 'failed' AND cleared_at IS NULL
             ORDER BY created_at, id LIMIT ?`),
    ).toMatch(/USING INDEX x402_payments_failed \(payer=\?\)/);
    expect(
      plan(`SELECT o.hold_id FROM open_holds o
             WHERE o.created_at < ?
               AND NOT EXISTS (SELECT 1 FROM x402_payments p WHERE p.hold_id = o.hold_id AND p.status = 'collected')
             ORDER BY o.created_at LIMIT ?`),
    ).toMatch(/SEARCH p USING INDEX sqlite_autoindex_x402_payments_2 \(hold_id=\?\)/);
  });
});
