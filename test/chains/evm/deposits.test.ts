import { afterEach, describe, expect, it } from "vitest";
import { deployOtherToken } from "../../helpers/evm.js";
import { type OnchainFixture, onchainFixture } from "./onchain-fixture.js";

async function available(f: OnchainFixture, accountId: string): Promise<bigint> {
  const { balances } = await f.billing.getBalances({ accountId });
  return balances.find((b) => b.chain?.id === "base")?.available ?? 0n;
}

function depositRows(f: OnchainFixture): number {
  return (f.db.prepare("SELECT count(*) AS n FROM deposits").get() as { n: number }).n;
}

describe("deposit watcher on real anvil", () => {
  let f: OnchainFixture;
  afterEach(async () => {
    await f?.close();
  });

  it("credits a deposit once, only after the confirmation depth", async () => {
    f = await onchainFixture({ confirmations: 3, manualMining: true });
    const account = f.account();
    const { addresses } = await f.billing.getDepositAddresses({ accountId: account });
    expect(addresses).toHaveLength(1);
    const address = addresses[0]!.address;
    expect(address).toBe(f.runtime.adapter("base")!.depositAddress(account));

    await f.dev.mintTo(address, 2_500_000n);
    await f.dev.mine(1); // the deposit's block: 0 confirmations on top
    await f.runtime.scanOnce();
    expect(await available(f, account)).toBe(0n);
    // Seen, not spendable: listed as pending.
    let { deposits } = await f.billing.listDeposits({ accountId: account });
    expect(deposits).toHaveLength(1);
    expect(deposits[0]).toMatchObject({
      credited: false,
      amount: 0n,
      onchainAmount: "2500000",
      toAddress: address,
    });

    await f.dev.mine(2); // 2 on top: still short of 3
    await f.runtime.scanOnce();
    expect(await available(f, account)).toBe(0n);

    await f.dev.mine(1); // 3 on top: final
    await f.runtime.scanOnce();
    expect(await available(f, account)).toBe(2_500_000n);
    ({ deposits } = await f.billing.listDeposits({ accountId: account }));
    expect(deposits).toHaveLength(1);
    expect(deposits[0]).toMatchObject({ credited: true, amount: 2_500_000n });

    // Scanning again, from the same cursor or after it, changes nothing.
    await f.dev.mine(5);
    await f.runtime.scanOnce();
    expect(await available(f, account)).toBe(2_500_000n);
    f.expectSoundLedger();
  });

  it("never credits the same log twice: overlapping rescans and a restart", async () => {
    f = await onchainFixture({ confirmations: 1 });
    const account = f.account();
    const address = await f.runtime.depositAddress("base", account);
    await f.dev.mintTo(address, 1_000_000n);
    await f.dev.mintTo(address, 234n);
    await f.dev.mine(1);
    await f.runtime.scanOnce();
    expect(await available(f, account)).toBe(1_000_234n);
    expect(depositRows(f)).toBe(2);

    // An overlapping scan: the cursor goes back to genesis, as after a lost cursor update.
    f.db.prepare("UPDATE chain_cursors SET next_position = 0").run();
    await f.runtime.scanOnce();
    expect(await available(f, account)).toBe(1_000_234n);

    // A restart: a new runtime over the same database rescans from its cursor.
    const again = await f.restart();
    f.db.prepare("UPDATE chain_cursors SET next_position = 1").run();
    await again.scanOnce();
    expect(await available(f, account)).toBe(1_000_234n);
    expect(depositRows(f)).toBe(2);
    f.expectSoundLedger();
  });

  it("a reorg removes a deposit that was not yet final, and it is never credited", async () => {
    f = await onchainFixture({ confirmations: 3, manualMining: true });
    const account = f.account();
    const address = await f.runtime.depositAddress("base", account);
    const snapshot = await f.dev.snapshot();
    await f.dev.mintTo(address, 7_000_000n);
    await f.dev.mine(2);
    await f.runtime.scanOnce();
    expect((await f.billing.listDeposits({ accountId: account })).deposits).toHaveLength(1); // pending

    await f.dev.revert(snapshot); // the blocks holding the deposit are gone
    await f.dev.mine(10); // the chain moves on without it
    await f.runtime.scanOnce();
    expect(await available(f, account)).toBe(0n);
    expect((await f.billing.listDeposits({ accountId: account })).deposits).toEqual([]);
    expect(depositRows(f)).toBe(0);
    f.expectSoundLedger();
  });

  it("credits nothing for another token's transfer, or for an address that is not a deposit address", async () => {
    f = await onchainFixture({ confirmations: 0 });
    const account = f.account();
    const address = await f.runtime.depositAddress("base", account);
    const other = await deployOtherToken(f.dev);
    await other.mintTo(address, 50_000_000n);
    await f.dev.mintTo("0x000000000000000000000000000000000000dEaD", 1_000_000n);
    await f.runtime.scanOnce();
    expect(await available(f, account)).toBe(0n);
    expect(depositRows(f)).toBe(0);
    f.expectSoundLedger();
  });

  it("watches an address from the moment it is handed out (stored as an address, never a key)", async () => {
    f = await onchainFixture({ confirmations: 0 });
    await f.runtime.scanOnce();
    const late = f.account();
    const { addresses } = await f.billing.getDepositAddresses({ accountId: late });
    const address = addresses[0]!.address;
    expect(address).toBe(f.runtime.adapter("base")!.depositAddress(late));
    await f.dev.mintTo(address, 42n);
    await f.runtime.scanOnce();
    expect(await available(f, late)).toBe(42n);
    const stored = f.db.prepare("SELECT * FROM deposit_addresses WHERE account_id = ?").get(late) as Record<
      string,
      unknown
    >;
    expect(stored).toMatchObject({ family: "evm", address });
    expect(Object.keys(stored).sort()).toEqual(["account_id", "address", "created_at", "family", "seq"]);
  });
});
