import { describe, expect, it } from "vitest";
import { SYSTEM_WITHDRAWAL_FEES } from "../../src/core/ports/ledger.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { LedgerRepository } from "../../src/store/sqlite/ledger.js";
import { OnchainRepository } from "../../src/store/sqlite/onchain.js";
import { ledgerFixture, SMALL_TEXT_CALL } from "../billing/fixtures.js";

// The onchain tables' bookkeeping without a chain: deposits credited once per (chain, tx, index)
// with the cursor, the operator-credit rule of the outbox, withdrawals, and an audit that
// notices when any of it disagrees with the ledger.

const USAGE = {
  inputTokens: 1000n,
  outputTokens: 500n,
  cacheWrite5mTokens: 0n,
  cacheWrite1hTokens: 0n,
  cacheReadTokens: 0n,
  images: 0,
};

function setup() {
  const f = ledgerFixture();
  const ledger = new LedgerRepository(f.db);
  const repo = new OnchainRepository(f.db, ledger);
  const account = f.account();
  const deposit = (tx: string, amount: bigint, from = 0n, next = 10n) =>
    repo.recordScan(
      "base",
      from,
      next,
      [
        {
          txHash: tx,
          index: 0,
          position: from,
          from: "0xfrom",
          to: "0xto",
          accountId: account,
          onchainAmount: amount,
          amount,
        },
      ],
      1,
    );
  const call = async (requestId: string) => {
    const hold = await f.billing.hold({
      accountId: account,
      requestId,
      keyId: "",
      chain: "base",
      call: SMALL_TEXT_CALL,
    });
    return (await f.billing.settle(hold.hold.id, USAGE)).resolution!.amount;
  };
  return { f, ledger, repo, account, deposit, call };
}

describe("onchain bookkeeping", () => {
  it("credits a deposit once, moves the cursor with it, and refuses a stale cursor", async () => {
    const { f, repo, account, deposit } = setup();
    expect(deposit("0xa", 700n)).toBe(true);
    expect(repo.cursor("base")).toBe(10n);
    expect(deposit("0xa", 700n, 10n, 20n)).toBe(true); // seen again in a later range: no second credit
    expect(deposit("0xb", 5n, 0n, 10n)).toBe(false); // the cursor moved on: nothing written
    expect(await f.billing.available(account, "base")).toBe(700n);
    expect(auditLedger(f.db)).toEqual([]);
  });

  it("settles onchain what deposits back and the rest off-chain; withdraws only backed money, fee included", async () => {
    const { f, repo, account, deposit, call } = setup();
    deposit("0xa", 1_000n);
    await f.billing.credit({
      accountId: account,
      chain: "base",
      amount: 50_000n,
      reason: "promo",
      creditId: "",
    });
    const first = await call("r1");
    const second = await call("r2");
    const views = f.db
      .prepare("SELECT onchain_amount, offchain_amount FROM settlement_intents ORDER BY created_at, hold_id")
      .safeIntegers(true)
      .all();
    expect(views).toContainEqual({ onchain_amount: 1_000n, offchain_amount: first - 1_000n });
    expect(views).toContainEqual({ onchain_amount: 0n, offchain_amount: second });
    expect(repo.withdrawable(account, "base")).toBe(0n);
    expect(
      repo.withdraw({
        id: "wd_1",
        accountId: account,
        chain: "base",
        to: "0x1",
        amount: 1n,
        fee: 0n,
        now: 2,
      }),
    ).toEqual({
      kind: "insufficient",
      available: 0n,
    });
    deposit("0xb", 300n, 10n, 20n);
    const wd2 = { id: "wd_2", accountId: account, chain: "base", to: "0x1", amount: 280n, fee: 20n, now: 2 };
    // The fee counts against what may leave: 281 + 20 is one unit too many.
    expect(repo.withdraw({ ...wd2, amount: 281n })).toEqual({ kind: "insufficient", available: 300n });
    expect(repo.withdraw(wd2).kind).toBe("written");
    expect(repo.withdrawable(account, "base")).toBe(0n);
    // A retry answers the first withdrawal whatever the fee is now; another address is a conflict.
    expect(repo.withdraw({ ...wd2, fee: 7n, now: 3 }).kind).toBe("existing");
    expect(repo.withdraw({ ...wd2, to: "0x2", now: 3 }).kind).toBe("conflict");
    expect(repo.batchIntents("base", false, 10_000_000_000_000, "0xtreasury", () => "stl_1", 5)).toBe(1);
    expect(auditLedger(f.db)).toEqual([]);
  });

  it.each([
    [
      "a transfer that moves more than its calls",
      "UPDATE chain_transfers SET amount = amount + 1 WHERE kind = 'settlement'",
      /settlement stl_1: moves/,
    ],
    [
      "a withdrawal without its debit",
      "UPDATE chain_transfers SET amount = amount + 1 WHERE kind = 'withdrawal'",
      /withdrawal wd_1: moves/,
    ],
    [
      "a withdrawal fee without its entry",
      "UPDATE chain_transfers SET fee = fee + 1 WHERE kind = 'withdrawal'",
      /withdrawal wd_1: fee 4, its fee entry is 3/,
    ],
    [
      "backing beyond the deposits",
      "UPDATE onchain_backing SET deposited = deposited + 1",
      /backing deposited/,
    ],
    [
      "a lost intent",
      "DELETE FROM settlement_intents WHERE transfer_id IS NULL",
      /settlement intent is missing/,
    ],
  ])("the audit reports %s", async (_name, tamper, problem) => {
    const { f, repo, account, deposit, call } = setup();
    deposit("0xa", 100_000n);
    await call("r1");
    repo.batchIntents("base", true, 0, "0xtreasury", () => "stl_1", 5);
    await call("r2");
    repo.withdraw({ id: "wd_1", accountId: account, chain: "base", to: "0x1", amount: 10n, fee: 3n, now: 2 });
    expect(auditLedger(f.db)).toEqual([]);
    f.db.exec(tamper);
    expect(auditLedger(f.db).join("\n")).toMatch(problem);
  });

  it("the audit reports a fee entry that no withdrawal accounts for", async () => {
    const { f, ledger, repo, account, deposit } = setup();
    deposit("0xa", 100_000n);
    repo.withdraw({ id: "wd_1", accountId: account, chain: "base", to: "0x1", amount: 10n, fee: 3n, now: 2 });
    expect(auditLedger(f.db)).toEqual([]);
    // Posted like a real one (both running balances move), so only the withdrawals check sees it.
    f.db.transaction(() =>
      ledger.post({
        id: "stray/fee",
        chain: "base",
        debit: account,
        credit: SYSTEM_WITHDRAWAL_FEES,
        amount: 5n,
        kind: "withdrawal",
        memo: "",
        createdAt: 3,
      }),
    )();
    expect(auditLedger(f.db)).toEqual(["system:withdrawal-fees on base holds 8, its withdrawals give 3"]);
  });
});
