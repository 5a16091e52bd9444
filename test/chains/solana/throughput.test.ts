/**
 * 400 deposits and 2,000 settlement transfers through the adapter on the dev chain, checked
 * for exactness (every transfer confirmed, the treasury holds exactly the sum, the scan finds
 * every deposit once). Wall times and the process's CPU time are printed, never asserted:
 *   npx vitest run test/chains/solana/throughput.test.ts
 */
import { performance } from "node:perf_hooks";
import { afterAll, describe, expect, it } from "vitest";
import type { PreparedTransfer } from "../../../src/core/ports/chains.js";
import { type SolanaFixture, startSolanaFixture } from "./fixtures.js";

const ACCOUNTS = 20;
const DEPOSITS = 400;
const TRANSFERS = 2_000;
const PER_SLOT = 100;

let f: SolanaFixture | undefined;
afterAll(async () => {
  await f?.close();
});

describe("Solana dev chain throughput", () => {
  it(`scans ${DEPOSITS} deposits and settles ${TRANSFERS} transfers exactly`, async () => {
    f = await startSolanaFixture({ blockhashValidSlots: 1_000, rpcTimeoutMs: 120_000 });
    const fx = f;
    const owners = Array.from({ length: ACCOUNTS }, (_, i) => `acct_${i}`);
    const addresses = owners.map((id) => fx.adapter.depositAddress(id));

    const cpu = process.cpuUsage();
    let t0 = performance.now();
    const firstSlot = BigInt(fx.dev.slot("processed"));
    for (let i = 0; i < DEPOSITS; i++) {
      await fx.dev.mintTo(addresses[i % ACCOUNTS]!, 100_000n + BigInt(i));
      if ((i + 1) % PER_SLOT === 0) fx.dev.advanceSlots(1);
    }
    const mintMs = performance.now() - t0;
    fx.finalize();

    t0 = performance.now();
    const deposits = await fx.adapter.scanDeposits(
      firstSlot,
      await fx.adapter.finalizedPosition(),
      new Set(addresses),
    );
    const scanMs = performance.now() - t0;
    expect(deposits).toHaveLength(DEPOSITS);
    expect(new Set(deposits.map((d) => `${d.txHash}:${d.index}`)).size).toBe(DEPOSITS);
    const deposited = deposits.reduce((sum, d) => sum + d.amount, 0n);
    expect(deposited).toBe(BigInt(DEPOSITS) * 100_000n + BigInt((DEPOSITS * (DEPOSITS - 1)) / 2));

    t0 = performance.now();
    const prepared: PreparedTransfer[] = [];
    let expected = 0n;
    for (let i = 0; i < TRANSFERS; i++) {
      const amount = 1n + BigInt(i % 500);
      expected += amount;
      const p = await fx.adapter.prepareTransfer({
        id: `set_${i}`,
        accountId: owners[i % ACCOUNTS]!,
        to: fx.adapter.treasuryAddress(),
        amount,
      });
      await fx.adapter.broadcast(p);
      prepared.push(p);
      if ((i + 1) % PER_SLOT === 0) fx.dev.advanceSlots(1);
    }
    const transferMs = performance.now() - t0;
    fx.finalize();

    t0 = performance.now();
    const states = [];
    for (const p of prepared) states.push(await fx.adapter.transferState(p));
    const stateMs = performance.now() - t0;
    expect(states.every((s) => s === "confirmed")).toBe(true);
    expect(await fx.adapter.balanceOf(fx.adapter.treasuryAddress())).toBe(expected);
    const left = await Promise.all(addresses.map((a) => fx.adapter.balanceOf(a)));
    expect(left.reduce((a, b) => a + b, 0n)).toBe(deposited - expected);

    const { user, system } = process.cpuUsage(cpu);
    const rate = (ms: number, n = TRANSFERS) => `${Math.round((n / ms) * 1000)}/s`;
    console.log(
      [
        `solana dev chain, ${DEPOSITS} deposits and ${TRANSFERS} transfers:`,
        `faucet mints ${mintMs.toFixed(0)} ms (${rate(mintMs, DEPOSITS)})`,
        `scan ${scanMs.toFixed(0)} ms`,
        `prepare+broadcast ${transferMs.toFixed(0)} ms (${rate(transferMs)})`,
        `transferState ${stateMs.toFixed(0)} ms (${rate(stateMs)})`,
        `CPU (client and chain share this process) ${((user + system) / 1000).toFixed(0)} ms`,
      ].join("; "),
    );
  }, 300_000);
});
