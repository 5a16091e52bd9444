/**
 * The whole money path on the Solana dev chain (litesvm), through the same chains runtime and
 * billing core the gateway runs: a deposit credited once at `finalized`, each call's charge moved
 * to the treasury with its signature on the usage row, a kill between broadcast and recording that
 * does not pay twice, a withdrawal that arrives, and the treasury's receipts reconciling with the
 * ledger to the smallest unit.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { type Client, Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";
import { Keypair } from "@solana/web3.js";
import { afterEach, describe, expect, it } from "vitest";
import { ChainsRuntime } from "../../../src/chains/chains-runtime.js";
import { chainRegistry } from "../../../src/core/billing/chain-registry.js";
import { operatorCallerResolver } from "../../../src/core/caller.js";
import type { Core } from "../../../src/core/core.js";
import { errorInfo } from "../../../src/core/errors.js";
import { type SolanaDevChain, startSolanaDevChain } from "../../../src/dev/chains/solana/dev-chain.js";
import {
  BillingService,
  SettlementStatus,
  TransferStatus,
} from "../../../src/gen/tollgate/billing/v1/billing_pb.js";
import { AuthRepository } from "../../../src/store/sqlite/accounts.js";
import { auditLedger } from "../../../src/store/sqlite/audit.js";
import { SqliteChainWork } from "../../../src/store/sqlite/chain-work.js";
import { type Db, openDatabase } from "../../../src/store/sqlite/database.js";
import { rng } from "../../billing/prng.js";
import { coreOver } from "../../helpers/core.js";
import { TEST_MASTER_SECRET } from "../../helpers/evm.js";
import { tempDir } from "../../helpers/process.js";
import { ledgerSettled, settledOnchain } from "../evm/onchain-fixture.js";
import { solanaChainConfig } from "./fixtures.js";

const CHAIN = "solana-dev";
const FINALIZED_LAG = 4;
/** A base58 transaction signature (64 bytes). */
const SIGNATURE = /^[1-9A-HJ-NP-Za-km-z]{86,88}$/;

interface Flow {
  readonly dev: SolanaDevChain;
  readonly db: Db;
  readonly core: Core;
  runtime: ChainsRuntime;
  readonly billing: Client<typeof BillingService>;
  account(id: string): string;
  /** A text call charged to the account on the Solana chain; returns the charge. */
  call(accountId: string, requestId: string): Promise<bigint>;
  /** Mints to the account's deposit address, finalizes it and scans. */
  fund(accountId: string, amount: bigint): Promise<string>;
  /** Settlement passes, finalizing slots and waiting out the recheck delay between them. */
  settleAll(passes?: number): Promise<void>;
  /** A second runtime over the same database and chain (a restart). */
  restart(): Promise<ChainsRuntime>;
  treasuryBalance(): Promise<bigint>;
  balanceOf(address: string): Promise<bigint>;
  close(): Promise<void>;
}

async function startFlow(
  settlement: { mode: "per-call" | "batch"; batchWindowMs: number },
  now: () => number = Date.now,
  fundTreasury = true,
): Promise<Flow> {
  const dev = await startSolanaDevChain({ slotMs: 0, confirmedLag: 1, finalizedLag: FINALIZED_LAG });
  const dir = tempDir("tollgate-solana-flow-");
  const db = openDatabase(dir.path);
  const registry = chainRegistry([{ ...solanaChainConfig(dev), id: CHAIN }], CHAIN);
  const build = () =>
    ChainsRuntime.create({
      store: new SqliteChainWork(db),
      registry,
      masterSecret: TEST_MASTER_SECRET,
      settlement,
      pollMs: 50,
      scanRange: 1000,
      startAt: "genesis",
      now,
    });
  const runtimes = [await build()];
  const adapter = () => runtimes.at(-1)!.adapter(CHAIN)!;
  if (fundTreasury) await dev.airdrop(adapter().treasuryAddress(), 10_000_000_000n);
  const core = coreOver(db, { chains: registry, chainDirectory: runtimes[0], now });
  const billing = createClient(
    BillingService,
    createRouterTransport(core.routes, { router: core.routerOptionsFor(operatorCallerResolver) }),
  );
  const accounts = new AuthRepository(db);
  let n = 0;
  const flow: Flow = {
    dev,
    db,
    core,
    runtime: runtimes[0]!,
    billing,
    account(id) {
      accounts.createAccount(id, id, now());
      return id;
    },
    async call(accountId, requestId) {
      const hold = await core.billing.hold({
        accountId,
        requestId,
        keyId: "",
        chain: CHAIN,
        call: { kind: "text", model: "model-haiku-4-5", inputTokens: 1000n, maxTokens: 1000n },
      });
      const settled = await core.billing.settle(hold.hold.id, {
        inputTokens: 1000n,
        outputTokens: 200n + BigInt(++n % 7) * 10n,
        cacheWrite5mTokens: 0n,
        cacheWrite1hTokens: 0n,
        cacheReadTokens: 0n,
        images: 0,
      });
      return settled.resolution!.amount;
    },
    async fund(accountId, amount) {
      const address = await flow.runtime.depositAddress(CHAIN, accountId);
      await dev.mintTo(address, amount);
      dev.advanceSlots(FINALIZED_LAG);
      await flow.runtime.scanOnce();
      return address;
    },
    async settleAll(passes = 6) {
      for (let i = 0; i < passes; i++) {
        await flow.runtime.settleOnce();
        dev.advanceSlots(FINALIZED_LAG);
        await sleep(60);
      }
      await flow.runtime.settleOnce();
    },
    async restart() {
      const again = await build();
      runtimes.push(again);
      flow.runtime = again;
      return again;
    },
    treasuryBalance: () => adapter().balanceOf(adapter().treasuryAddress()),
    balanceOf: (address) => adapter().balanceOf(address),
    async close() {
      for (const r of runtimes) await r.stop();
      db.close();
      await dev.close();
      dir.cleanup();
    },
  };
  return flow;
}

async function available(f: Flow, accountId: string): Promise<bigint> {
  const { balances } = await f.billing.getBalances({ accountId });
  return balances.find((b) => b.chain?.id === CHAIN)?.available ?? 0n;
}

describe("the Solana money path through the chains runtime (litesvm dev chain)", () => {
  let f: Flow | undefined;
  afterEach(async () => {
    if (f !== undefined) expect(auditLedger(f.db)).toEqual([]);
    await f?.close();
    f = undefined;
  });

  it("health says when the treasury cannot pay a transfer's fee, and how much it holds when it can", async () => {
    f = await startFlow({ mode: "per-call", batchWindowMs: 0 }, Date.now, false);
    const treasury = f.runtime.adapter(CHAIN)!.treasuryAddress();
    const probe = f.runtime.probes().find((p) => p.name === `chain:${CHAIN}`)!;
    await expect(probe.check()).rejects.toThrow(
      new RegExp(`treasury ${treasury} holds 0 SOL, less than one transfer's fee \\(0\\.00204928 SOL\\)`),
    );
    await f.dev.airdrop(treasury, 1_500_000_000n);
    expect(await probe.check()).toMatch(new RegExp(`treasury ${treasury} holds 1\\.5 SOL`));
  });

  it("credits a deposit once, at finalized and not before, across overlapping scans and a restart", async () => {
    f = await startFlow({ mode: "per-call", batchWindowMs: 0 });
    const account = f.account("acct_sol_dep");
    const address = await f.runtime.depositAddress(CHAIN, account);
    const signature = await f.dev.mintTo(address, 2_500_000n);
    f.dev.advanceSlots(FINALIZED_LAG - 1); // confirmed, not yet finalized
    await f.runtime.scanOnce();
    expect(await available(f, account)).toBe(0n);
    // Seen at `confirmed`, not spendable: listed as pending.
    const pending = (await f.billing.listDeposits({ accountId: account })).deposits;
    expect(pending).toHaveLength(1);
    expect(pending[0]).toMatchObject({
      credited: false,
      amount: 0n,
      onchainAmount: "2500000",
      txHash: signature,
    });
    f.dev.advanceSlots(1);
    await f.runtime.scanOnce();
    expect(await available(f, account)).toBe(2_500_000n);
    const { deposits } = await f.billing.listDeposits({ accountId: account });
    expect(deposits).toHaveLength(1);
    expect(deposits[0]!.txHash).toBe(signature);
    // The same transfer seen again: a rescan from genesis by a restarted runtime, then more scans.
    f.db.prepare("UPDATE chain_cursors SET next_position = 0").run();
    const again = await f.restart();
    await again.scanOnce();
    f.dev.advanceSlots(FINALIZED_LAG);
    await again.scanOnce();
    expect(await available(f, account)).toBe(2_500_000n);
    expect((await f.billing.listDeposits({ accountId: account })).deposits).toHaveLength(1);
  });

  it("moves each call's charge to the treasury with the treasury paying fees, and links the signature", async () => {
    f = await startFlow({ mode: "per-call", batchWindowMs: 0 });
    const account = f.account("acct_sol_pay");
    const address = await f.fund(account, 5_000_000n);
    const charges = [await f.call(account, "s1"), await f.call(account, "s2"), await f.call(account, "s3")];
    let { rows } = await f.billing.listUsage({ accountId: account });
    expect(rows.map((r) => r.settlementStatus)).toEqual(Array(3).fill(SettlementStatus.QUEUED));
    await f.settleAll();
    const total = charges.reduce((a, b) => a + b, 0n);
    expect(await f.treasuryBalance()).toBe(total);
    expect(await f.balanceOf(address)).toBe(5_000_000n - total);
    ({ rows } = await f.billing.listUsage({ accountId: account }));
    expect(new Set(rows.map((r) => r.settlementTxHash)).size).toBe(3);
    for (const row of rows) {
      expect(row.settlementStatus).toBe(SettlementStatus.CONFIRMED);
      expect(row.settlementOnchainAmount).toBe(row.amount);
      expect(row.settlementTxHash).toMatch(SIGNATURE);
    }
    expect(settledOnchain(f.db, CHAIN)).toBe(total);
  });

  it("a restart with a signed transfer on record asks the chain instead of paying again", async () => {
    f = await startFlow({ mode: "per-call", batchWindowMs: 0 });
    const account = f.account("acct_sol_kill");
    const address = await f.fund(account, 2_000_000n);
    const charge = await f.call(account, "k1");
    await f.runtime.settleOnce(); // prepared, recorded, broadcast; not yet finalized
    const [row] = f.db.prepare("SELECT status, tx_hash FROM chain_transfers").all() as {
      status: string;
      tx_hash: string;
    }[];
    expect(row!.status).toBe("sent");
    // As if the process had died after broadcasting and before recording that it had.
    f.db.prepare("UPDATE chain_transfers SET status = 'prepared'").run();
    await f.runtime.stop();
    await f.restart();
    await f.settleAll();
    expect(f.db.prepare("SELECT status, tx_hash FROM chain_transfers").all()).toEqual([
      { status: "confirmed", tx_hash: row!.tx_hash },
    ]);
    expect(await f.treasuryBalance()).toBe(charge);
    expect(await f.balanceOf(address)).toBe(2_000_000n - charge);
  });

  it("withdraws to a fresh Solana wallet; refuses an EVM address and an overdraft with nothing written", async () => {
    f = await startFlow({ mode: "per-call", batchWindowMs: 0 });
    const account = f.account("acct_sol_out");
    const address = await f.fund(account, 3_000_000n);
    const wallet = Keypair.generate().publicKey.toBase58();
    const entries = () => f!.db.prepare("SELECT count(*) AS n FROM ledger_entries").get();
    const before = entries();
    for (const [req, reason] of [
      [{ amount: 1n, toAddress: "0x1111111111111111111111111111111111111111" }, "INVALID_ADDRESS"],
      [{ amount: 3_000_001n, toAddress: wallet }, "INSUFFICIENT_FUNDS"],
    ] as const) {
      const error = await f.billing.withdraw({ accountId: account, chain: CHAIN, ...req }).then(
        () => undefined,
        (e: unknown) => e as ConnectError,
      );
      expect(error).toBeInstanceOf(ConnectError);
      expect([Code.InvalidArgument, Code.FailedPrecondition]).toContain(error!.code);
      expect(errorInfo(error!)?.reason).toBe(reason);
      expect(entries()).toEqual(before);
    }
    const { withdrawal } = await f.billing.withdraw({
      accountId: account,
      chain: CHAIN,
      amount: 1_250_000n,
      toAddress: wallet,
      withdrawalId: "w-sol-1",
    });
    // The chain's network fee ($0.50 on Solana: it covers the rent of the wallet's new token
    // account) is debited on top; its tokens stay at the deposit address.
    expect(withdrawal).toMatchObject({ status: TransferStatus.QUEUED, amount: 1_250_000n, fee: 500_000n });
    expect(await available(f, account)).toBe(3_000_000n - 1_250_000n - 500_000n);
    await f.settleAll();
    expect(await f.balanceOf(wallet)).toBe(1_250_000n);
    expect(await f.balanceOf(address)).toBe(3_000_000n - 1_250_000n);
    const { withdrawals } = await f.billing.listWithdrawals({ accountId: account });
    expect(withdrawals).toHaveLength(1);
    expect(withdrawals[0]).toMatchObject({ status: TransferStatus.CONFIRMED });
    expect(withdrawals[0]!.txHash).toMatch(SIGNATURE);
  });

  it("after a run of batched calls by several accounts, treasury receipts equal the ledger's settled total", async () => {
    let clock = 50_000_000;
    f = await startFlow({ mode: "batch", batchWindowMs: 30_000 }, () => clock);
    const random = rng(11);
    const ids = ["acct_sr1", "acct_sr2", "acct_sr3"].map((id) => f!.account(id));
    // sr1: deposits only; sr2: operator credit only; sr3: both.
    for (const id of ["acct_sr1", "acct_sr3"]) {
      await f.dev.mintTo(await f.runtime.depositAddress(CHAIN, id), 200_000n + random.big(50_000n));
    }
    for (const id of ["acct_sr2", "acct_sr3"]) {
      await f.core.billing.credit({
        accountId: id,
        chain: CHAIN,
        amount: 150_000n,
        reason: "promo",
        creditId: "",
      });
    }
    f.dev.advanceSlots(FINALIZED_LAG);
    await f.runtime.scanOnce();
    let calls = 0;
    for (let round = 0; round < 5; round++) {
      for (const id of ids) {
        try {
          await f.call(id, `${id}-${round}`);
          calls++;
        } catch {
          // Out of funds: the hold was refused and nothing was charged.
        }
      }
      clock += 12_000;
      await f.runtime.settleOnce();
      f.dev.advanceSlots(FINALIZED_LAG);
    }
    expect(calls).toBeGreaterThan(5);
    clock += 60_000;
    for (let i = 0; i < 6; i++) {
      await f.runtime.settleOnce();
      f.dev.advanceSlots(FINALIZED_LAG);
      clock += 1_000;
    }
    const backlog = (await f.billing.getSettlementBacklog({})).chains[0]!;
    expect(backlog).toMatchObject({ unbatchedCalls: 0n, openSettlements: 0n });
    const ledger = ledgerSettled(f.db, CHAIN);
    expect(ledger.onchain).toBeGreaterThan(0n);
    expect(ledger.offchain).toBeGreaterThan(0n);
    expect(ledger.onchain + ledger.offchain).toBe(ledger.total);
    expect(settledOnchain(f.db, CHAIN)).toBe(ledger.onchain);
    expect(await f.treasuryBalance()).toBe(ledger.onchain);
  });
});
