import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEvmAdapter } from "../../../src/chains/evm/evm-adapter.js";
import type { ChainAdapter } from "../../../src/core/ports/chains.js";
import {
  DEV_TOKEN_ADDRESS,
  type EvmDevChain,
  startEvmDevChain,
} from "../../../src/dev/chains/evm/dev-chain.js";
import { deployOtherToken, devChainConfig, TEST_MASTER_SECRET } from "../../helpers/evm.js";

describe("EVM adapter on anvil", () => {
  let dev: EvmDevChain;
  let adapter: ChainAdapter;

  beforeAll(async () => {
    dev = await startEvmDevChain({ id: "base", chainId: 8453 });
    adapter = createEvmAdapter(devChainConfig(dev, 2), { masterSecret: TEST_MASTER_SECRET });
    await dev.fundGas(adapter.treasuryAddress());
  });
  afterAll(async () => {
    await adapter?.close();
    await dev?.close();
  });

  it("deploys the token at the fixed dev address and derives stable, distinct addresses", () => {
    expect(dev.token).toBe(DEV_TOKEN_ADDRESS);
    const a = adapter.depositAddress("acct_a");
    expect(a).toMatch(/^0x[0-9a-fA-F]{40}$/);
    expect(adapter.depositAddress("acct_a")).toBe(a);
    expect(adapter.depositAddress("acct_b")).not.toBe(a);
    const again = createEvmAdapter(devChainConfig(dev, 2), { masterSecret: TEST_MASTER_SECRET });
    expect(again.depositAddress("acct_a")).toBe(a);
    expect(
      createEvmAdapter(devChainConfig(dev, 2), { masterSecret: new Uint8Array(32) }).depositAddress("acct_a"),
    ).not.toBe(a);
  });

  it("validates addresses strictly, checksum included", () => {
    const a = adapter.depositAddress("acct_a");
    expect(adapter.isValidAddress(a)).toBe(true);
    expect(adapter.isValidAddress(a.toLowerCase())).toBe(true);
    const flipped =
      a.slice(0, -1) +
      (a.at(-1) === a.at(-1)!.toUpperCase() ? a.at(-1)!.toLowerCase() : a.at(-1)!.toUpperCase());
    if (/[a-fA-F]$/.test(a)) expect(adapter.isValidAddress(flipped)).toBe(false);
    expect(adapter.isValidAddress("0x1234")).toBe(false);
    expect(adapter.isValidAddress("0x0000000000000000000000000000000000000000")).toBe(false);
    expect(adapter.isValidAddress("EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v")).toBe(false);
  });

  it("finds only the registry token's transfers to deposit addresses, at the confirmation depth", async () => {
    const to = adapter.depositAddress("acct_scan");
    const other = await deployOtherToken(dev);
    await other.mintTo(to, 5_000_000n);
    await dev.mintTo(to, 1_250_000n);
    await dev.mintTo(adapter.depositAddress("not_watched"), 9n);
    const head = (await adapter.health()).head!;
    expect(await adapter.finalizedPosition()).toBe(head - 2n);
    const found = await adapter.scanDeposits(0n, head, new Set([to]));
    expect(found).toHaveLength(1);
    expect(found[0]).toMatchObject({ to, amount: 1_250_000n, position: head - 1n });
    expect(await adapter.balanceOf(to)).toBe(1_250_000n);
  });

  it("moves a deposit to the treasury with EIP-3009, gasless for the deposit address, once per order", async () => {
    const owner = adapter.depositAddress("acct_pay");
    await dev.mintTo(owner, 3_000_000n);
    const treasury = adapter.treasuryAddress();
    const before = await adapter.balanceOf(treasury);
    const order = { id: "order-1", accountId: "acct_pay", to: treasury, amount: 1_000_000n };
    const prepared = await adapter.prepareTransfer(order);
    expect(prepared.txHash).toMatch(/^0x[0-9a-f]{64}$/);
    expect(await adapter.transferState(prepared)).toBe("pending");
    await adapter.broadcast(prepared);
    await adapter.broadcast(prepared); // harmless
    expect(await adapter.transferState(prepared)).toBe("pending"); // mined, not yet 2 deep
    await dev.mine(2);
    expect(await adapter.transferState(prepared)).toBe("confirmed");
    expect(await adapter.balanceOf(treasury)).toBe(before + 1_000_000n);
    expect(await adapter.balanceOf(owner)).toBe(2_000_000n);
    // Preparing the same order again cannot pay twice: its authorisation nonce is spent.
    await expect(adapter.prepareTransfer(order)).rejects.toThrow(/authorization is used/);
    expect(await adapter.balanceOf(owner)).toBe(2_000_000n);
  });

  it("reports a reachable RPC's head, and an unreachable one without throwing", async () => {
    expect((await adapter.health()).reachable).toBe(true);
    const down = createEvmAdapter(
      { ...devChainConfig(dev, 2), rpcUrl: "http://127.0.0.1:1" },
      {
        masterSecret: TEST_MASTER_SECRET,
        timeoutMs: 1_000,
      },
    );
    const health = await down.health();
    expect(health.reachable).toBe(false);
    expect(health.error).toBeTruthy();
  });
});
