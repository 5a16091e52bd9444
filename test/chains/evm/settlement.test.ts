import { setTimeout as sleep } from "node:timers/promises";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import { ChainsRuntime } from "../../../src/chains/chains-runtime.js";
import { ledgerToOnchain } from "../../../src/core/billing/money.js";
import { errorInfo } from "../../../src/core/errors.js";
import { SettlementStatus, TransferStatus } from "../../../src/gen/tollgate/billing/v1/billing_pb.js";
import { SqliteChainWork } from "../../../src/store/sqlite/chain-work.js";
import { TEST_MASTER_SECRET } from "../../helpers/evm.js";
import { ledgerSettled, type OnchainFixture, onchainFixture, settledOnchain } from "./onchain-fixture.js";

/** Funds an account onchain and waits for the watcher to credit it. */
async function fund(f: OnchainFixture, accountId: string, amount: bigint): Promise<string> {
  const address = await f.runtime.depositAddress("base", accountId);
  await f.dev.mintTo(address, amount);
  await f.dev.mine(2);
  await f.runtime.scanOnce();
  return address;
}

/** Runs settlement passes, mining and waiting out the recheck delay (50 ms) between them. */
async function settleAll(f: OnchainFixture, advanceClock?: () => void, passes = 6): Promise<void> {
  for (let i = 0; i < passes; i++) {
    await f.runtime.settleOnce();
    await f.dev.mine(2);
    if (advanceClock === undefined) await sleep(60);
    else advanceClock();
  }
  await f.runtime.settleOnce();
}

function rowCounts(f: OnchainFixture): Record<string, number> {
  const tables = [
    "ledger_entries",
    "chain_transfers",
    "settlement_intents",
    "onchain_backing",
    "ledger_balances",
  ];
  return Object.fromEntries(
    tables.map((t) => [t, (f.db.prepare(`SELECT count(*) AS n FROM ${t}`).get() as { n: number }).n]),
  );
}

describe("settlement on real anvil", () => {
  let f: OnchainFixture;
  afterEach(async () => {
    await f?.close();
  });

  it("moves exactly each call's charge to the treasury, per call, and links the transaction from the usage row", async () => {
    f = await onchainFixture({ confirmations: 1, mode: "per-call" });
    const adapter = f.runtime.adapter("base")!;
    const treasury = adapter.treasuryAddress();
    const account = f.account();
    const address = await fund(f, account, 5_000_000n);
    const before = await adapter.balanceOf(treasury);
    const charges = [await f.call(account, "r1"), await f.call(account, "r2"), await f.call(account, "r3")];
    expect(charges.every((c) => c > 0n)).toBe(true);
    let { rows } = await f.billing.listUsage({ accountId: account });
    expect(rows.map((r) => r.settlementStatus)).toEqual([
      SettlementStatus.QUEUED,
      SettlementStatus.QUEUED,
      SettlementStatus.QUEUED,
    ]);
    await settleAll(f);
    const total = charges.reduce((a, b) => a + b, 0n);
    expect(await adapter.balanceOf(treasury)).toBe(before + ledgerToOnchain(total, 6));
    expect(await adapter.balanceOf(address)).toBe(5_000_000n - total);
    ({ rows } = await f.billing.listUsage({ accountId: account }));
    const hashes = new Set(rows.map((r) => r.settlementTxHash));
    expect(hashes.size).toBe(3);
    for (const row of rows) {
      expect(row.settlementStatus).toBe(SettlementStatus.CONFIRMED);
      expect(row.settlementOnchainAmount).toBe(row.amount);
      expect(row.settlementOffchainAmount).toBe(0n);
      expect(row.settlementTxHash).toMatch(/^0x[0-9a-f]{64}$/);
    }
    expect(settledOnchain(f.db, "base")).toBe(total);
    f.expectSoundLedger();
  });

  it("batches an account's calls over the window into one transfer that links every call", async () => {
    let clock = 1_000_000;
    f = await onchainFixture({ confirmations: 1, mode: "batch", batchWindowMs: 60_000, now: () => clock });
    const adapter = f.runtime.adapter("base")!;
    const account = f.account();
    await fund(f, account, 5_000_000n);
    let total = 0n;
    for (let i = 0; i < 5; i++) total += await f.call(account, `b${i}`);
    await f.runtime.settleOnce(); // inside the window: nothing is sent yet
    expect((await f.billing.getSettlementBacklog({})).chains[0]).toMatchObject({
      chain: "base",
      unbatchedCalls: 5n,
      unbatchedAmount: total,
    });
    clock += 60_000;
    await settleAll(f, () => {
      clock += 1_000;
    });
    const { rows } = await f.billing.listUsage({ accountId: account });
    expect(new Set(rows.map((r) => r.settlementTxHash)).size).toBe(1);
    expect(rows.every((r) => r.settlementStatus === SettlementStatus.CONFIRMED)).toBe(true);
    const transfers = f.db.prepare("SELECT amount FROM chain_transfers").safeIntegers(true).all() as {
      amount: bigint;
    }[];
    expect(transfers).toEqual([{ amount: total }]);
    expect(await adapter.balanceOf(adapter.treasuryAddress())).toBe(ledgerToOnchain(total, 6));
    const backlog = (await f.billing.getSettlementBacklog({})).chains[0]!;
    expect(backlog).toMatchObject({
      unbatchedCalls: 0n,
      openSettlements: 0n,
      settledOnchain: total,
      treasuryAddress: adapter.treasuryAddress(),
    });
    f.expectSoundLedger();
  });

  it("settles onchain only what deposits back; charges against operator credit are off-chain", async () => {
    f = await onchainFixture({ confirmations: 1, mode: "per-call" });
    const adapter = f.runtime.adapter("base")!;
    const account = f.account();
    const address = await fund(f, account, 1_000n); // tiny deposit: less than one call
    await f.billing.credit({ accountId: account, chain: "base", amount: 1_000_000n, reason: "promo" });
    const first = await f.call(account, "c1");
    const second = await f.call(account, "c2");
    expect(first).toBeGreaterThan(1_000n);
    await settleAll(f);
    const { rows } = await f.billing.listUsage({ accountId: account });
    const byRequest = new Map(rows.map((r) => [r.requestId, r]));
    expect(byRequest.get("c1")).toMatchObject({
      settlementStatus: SettlementStatus.CONFIRMED,
      settlementOnchainAmount: 1_000n,
      settlementOffchainAmount: first - 1_000n,
    });
    expect(byRequest.get("c2")).toMatchObject({
      settlementStatus: SettlementStatus.OFFCHAIN,
      settlementOnchainAmount: 0n,
      settlementOffchainAmount: second,
      settlementTxHash: "",
    });
    expect(await adapter.balanceOf(address)).toBe(0n);
    expect(await adapter.balanceOf(adapter.treasuryAddress())).toBe(1_000n);
    const ledger = ledgerSettled(f.db, "base");
    expect(ledger.total).toBe(first + second);
    expect(settledOnchain(f.db, "base")).toBe(ledger.onchain);
    expect(ledger.offchain).toBe(first + second - 1_000n);
    f.expectSoundLedger();
  });

  it("an RPC outage delays settlement with backoff, never blocks calls, and loses or doubles nothing", async () => {
    f = await onchainFixture({ confirmations: 1, mode: "per-call" });
    const adapter = f.runtime.adapter("base")!;
    const account = f.account();
    const address = await fund(f, account, 3_000_000n);
    const treasury = adapter.treasuryAddress();
    // The RPC goes away: a runtime pointed at a dead port stands in for the outage.
    const down = await ChainsRuntime.create({
      store: new SqliteChainWork(f.db),
      registry: {
        ...f.core.billing.chains,
        chains: [{ ...f.core.billing.chains.chains[0]!, rpcUrl: "http://127.0.0.1:1" }],
        byId: new Map([["base", { ...f.core.billing.chains.chains[0]!, rpcUrl: "http://127.0.0.1:1" }]]),
      },
      masterSecret: TEST_MASTER_SECRET,
      settlement: { mode: "per-call", batchWindowMs: 0 },
      pollMs: 50,
      scanRange: 1000,
      startAt: "genesis",
    });
    const charge = await f.call(account, "o1"); // calls keep working
    await down.settleOnce();
    const [transfer] = f.db.prepare("SELECT * FROM chain_transfers").all() as Record<string, unknown>[];
    expect(transfer).toMatchObject({ status: "queued", attempts: 1 });
    expect(transfer!.last_error).not.toBe("");
    // Backed off: the next attempt is later than the failure it recorded.
    expect(transfer!.next_attempt_at as number).toBeGreaterThan(transfer!.updated_at as number);
    const backlog = (await f.billing.getSettlementBacklog({})).chains[0]!;
    expect(backlog.openSettlements).toBe(1n);
    expect(backlog.lastError).not.toBe("");
    await down.stop();
    // The RPC is back: the same transfer goes through once, after its backoff.
    f.db.prepare("UPDATE chain_transfers SET next_attempt_at = 0").run();
    await settleAll(f);
    expect(await adapter.balanceOf(treasury)).toBe(charge);
    expect(await adapter.balanceOf(address)).toBe(3_000_000n - charge);
    expect(f.db.prepare("SELECT count(*) AS n FROM chain_transfers").get()).toEqual({ n: 1 });
    f.expectSoundLedger();
  });

  it("health says when the treasury cannot pay a transfer's gas, and how much it holds when it can", async () => {
    f = await onchainFixture({ confirmations: 1, mode: "per-call" });
    const treasury = f.runtime.adapter("base")!.treasuryAddress();
    const probe = f.runtime.probes().find((p) => p.name === "chain:base")!;
    await f.dev.fundGas(treasury, 0n);
    await expect(probe.check()).rejects.toThrow(
      new RegExp(
        `treasury ${treasury} holds 0 ETH, less than one transfer's fee .*settlements and withdrawals wait`,
      ),
    );
    await f.dev.fundGas(treasury, 2n * 10n ** 18n);
    expect(await probe.check()).toMatch(new RegExp(`settlement backlog 0; treasury ${treasury} holds 2 ETH`));
  });

  it("a restart with a signed transfer on record asks the chain instead of paying again", async () => {
    f = await onchainFixture({ confirmations: 1, mode: "per-call", manualMining: true });
    const adapter = f.runtime.adapter("base")!;
    const account = f.account();
    const address = await fund(f, account, 2_000_000n);
    const charge = await f.call(account, "k1");
    await f.runtime.settleOnce(); // prepared, stored, broadcast: waiting in the mempool
    const [row] = f.db.prepare("SELECT status, tx_hash FROM chain_transfers").all() as {
      status: string;
      tx_hash: string;
    }[];
    expect(row!.status).toBe("sent");
    // As if the process died right after broadcasting, before recording it was sent.
    f.db.prepare("UPDATE chain_transfers SET status = 'prepared'").run();
    const again = await f.restart();
    await again.settleOnce(); // pending: re-broadcasts the same signed transaction (harmless)
    await f.dev.mine(3);
    await sleep(60);
    await again.settleOnce();
    expect(f.db.prepare("SELECT status, tx_hash FROM chain_transfers").all()).toEqual([
      { status: "confirmed", tx_hash: row!.tx_hash },
    ]);
    expect(await adapter.balanceOf(address)).toBe(2_000_000n - charge);
    expect(await adapter.balanceOf(adapter.treasuryAddress())).toBe(charge);
    f.expectSoundLedger();
  });

  it("withdraws backed funds to a named address; refuses bad input and overdrafts with nothing written", async () => {
    f = await onchainFixture({ confirmations: 1, mode: "per-call" });
    const adapter = f.runtime.adapter("base")!;
    const account = f.account();
    const address = await fund(f, account, 3_000_000n);
    await f.billing.credit({ accountId: account, chain: "base", amount: 9_000_000n, reason: "promo" });
    const to = "0x1111111111111111111111111111111111111111";
    const before = rowCounts(f);
    const refuse = async (req: Parameters<typeof f.billing.withdraw>[0], code: Code, reason: string) => {
      const error = await f.billing.withdraw(req).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(ConnectError);
      expect((error as ConnectError).code).toBe(code);
      expect(errorInfo(error as ConnectError)?.reason).toBe(reason);
      expect(rowCounts(f)).toEqual(before);
      return error as ConnectError;
    };
    await refuse(
      { accountId: account, chain: "base", amount: 1n, toAddress: "0x1234" },
      Code.InvalidArgument,
      "INVALID_ADDRESS",
    );
    await refuse(
      {
        accountId: account,
        chain: "base",
        amount: 1n,
        // EIP-55's own example (0x52908400098527886E0F7030069857D2E4169EE7) with one letter's case flipped.
        toAddress: "0x52908400098527886e0F7030069857D2E4169EE7",
      },
      Code.InvalidArgument,
      "INVALID_ADDRESS",
    );
    await refuse(
      { accountId: account, chain: "base", amount: 0n, toAddress: to },
      Code.InvalidArgument,
      "INVALID_FIELD",
    );
    await refuse(
      { accountId: account, chain: "ethereum", amount: 1n, toAddress: to },
      Code.InvalidArgument,
      "CHAIN_UNKNOWN",
    );
    // 12 available, but only the 3 deposited are onchain: operator credit cannot leave.
    const over = await refuse(
      { accountId: account, chain: "base", amount: 3_000_001n, toAddress: to },
      Code.FailedPrecondition,
      "INSUFFICIENT_FUNDS",
    );
    expect(errorInfo(over)?.metadata.available).toBe("3000000");

    const { withdrawal, balance } = await f.billing.withdraw({
      accountId: account,
      chain: "base",
      amount: 1_250_000n,
      toAddress: to,
      withdrawalId: "w-1",
    });
    // The chain's network fee is debited on top of what `to` receives.
    expect(withdrawal).toMatchObject({
      status: TransferStatus.QUEUED,
      amount: 1_250_000n,
      fee: 50_000n,
      toAddress: to,
    });
    expect(balance?.available).toBe(12_000_000n - 1_250_000n - 50_000n);
    // A retry with the same id withdraws once.
    const retry = await f.billing.withdraw({
      accountId: account,
      chain: "base",
      amount: 1_250_000n,
      toAddress: to,
      withdrawalId: "w-1",
    });
    expect(retry.withdrawal?.id).toBe(withdrawal?.id);
    await settleAll(f);
    expect(await adapter.balanceOf(to)).toBe(1_250_000n);
    expect(await adapter.balanceOf(address)).toBe(3_000_000n - 1_250_000n);
    const { withdrawals } = await f.billing.listWithdrawals({ accountId: account });
    expect(withdrawals).toHaveLength(1);
    expect(withdrawals[0]).toMatchObject({ status: TransferStatus.CONFIRMED });
    expect(withdrawals[0]!.txHash).toMatch(/^0x[0-9a-f]{64}$/);
    f.expectSoundLedger();
  });
});
