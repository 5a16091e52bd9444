import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ChainsRuntime } from "../../../src/chains/chains-runtime.js";
import { chainRegistry } from "../../../src/core/billing/chain-registry.js";
import { ledgerToOnchain } from "../../../src/core/billing/money.js";
import { type EvmDevChain, startEvmDevChains } from "../../../src/dev/chains/evm/dev-chain.js";
import { AuthRepository } from "../../../src/store/sqlite/accounts.js";
import { auditLedger } from "../../../src/store/sqlite/audit.js";
import { SqliteChainWork } from "../../../src/store/sqlite/chain-work.js";
import { type Db, openDatabase } from "../../../src/store/sqlite/database.js";
import { rng } from "../../billing/prng.js";
import { coreOver } from "../../helpers/core.js";
import { devChainConfig, TEST_MASTER_SECRET } from "../../helpers/evm.js";
import { tempDir } from "../../helpers/process.js";

// After a run of calls by several accounts on two chains — paid from deposits, from operator
// credit, and from both — the treasury's onchain receipts on each chain equal the ledger's
// onchain-settled total for that chain, to the smallest unit, and the off-chain part is exactly
// what operator credit paid.

describe("reconciliation on two anvil chains", () => {
  let chains: EvmDevChain[];
  let db: Db;
  let runtime: ChainsRuntime;
  let cleanup: () => void;
  let clock = 10_000_000;

  beforeAll(async () => {
    chains = await startEvmDevChains([
      { id: "base", chainId: 8453 },
      { id: "arbitrum", chainId: 42161 },
    ]);
    const dir = tempDir("tollgate-reconcile-");
    cleanup = dir.cleanup;
    db = openDatabase(dir.path);
    const registry = chainRegistry(
      chains.map((c) => devChainConfig(c, 1)),
      "base",
    );
    runtime = await ChainsRuntime.create({
      store: new SqliteChainWork(db),
      registry,
      masterSecret: TEST_MASTER_SECRET,
      settlement: { mode: "batch", batchWindowMs: 30_000 },
      pollMs: 10,
      scanRange: 500,
      startAt: "genesis",
      now: () => clock,
    });
    for (const c of chains) await c.fundGas(runtime.adapter(c.id)!.treasuryAddress());
  });
  afterAll(async () => {
    await runtime?.stop();
    db?.close();
    for (const c of chains ?? []) await c.close();
    cleanup?.();
  });

  it("treasury receipts per chain equal the ledger's settled total", async () => {
    const registry = chainRegistry(
      chains.map((c) => devChainConfig(c, 1)),
      "base",
    );
    const core = coreOver(db, { chains: registry, chainDirectory: runtime, now: () => clock });
    const accounts = new AuthRepository(db);
    const random = rng(6);
    const ids = ["acct_r1", "acct_r2", "acct_r3", "acct_r4"];
    for (const id of ids) accounts.createAccount(id, id, clock);
    // r1: deposits only; r2: operator credit only; r3 and r4: both, on both chains.
    for (const c of chains) {
      for (const id of ["acct_r1", "acct_r3", "acct_r4"]) {
        await c.mintTo(await runtime.depositAddress(c.id, id), 200_000n + random.big(50_000n));
      }
      for (const id of ["acct_r2", "acct_r3"]) {
        await core.billing.credit({
          accountId: id,
          chain: c.id,
          amount: 150_000n,
          reason: "promo",
          creditId: "",
        });
      }
      await c.mine(2);
    }
    await runtime.scanOnce();
    let n = 0;
    for (let round = 0; round < 6; round++) {
      for (const id of ids) {
        for (const c of chains) {
          const hold = await core.billing.hold({
            accountId: id,
            requestId: `req-${n++}`,
            keyId: "",
            chain: c.id,
            call: { kind: "text", model: "model-haiku-4-5", inputTokens: 4000n, maxTokens: 4000n },
          });
          await core.billing.settle(hold.hold.id, {
            inputTokens: BigInt(500 + random.int(3000)),
            outputTokens: BigInt(random.int(4000)),
            cacheWrite5mTokens: 0n,
            cacheWrite1hTokens: 0n,
            cacheReadTokens: BigInt(random.int(500)),
            images: 0,
          });
        }
      }
      clock += 20_000; // batches close every other round
      await runtime.settleOnce();
      for (const c of chains) await c.mine(2);
    }
    clock += 60_000;
    for (let i = 0; i < 6; i++) {
      await runtime.settleOnce();
      for (const c of chains) await c.mine(2);
      clock += 1_000;
    }
    for (const c of chains) {
      const adapter = runtime.adapter(c.id)!;
      const totals = db
        .prepare(
          `SELECT (SELECT SUM(amount) FROM ledger_entries WHERE chain = ? AND kind = 'charge') AS charged,
                  (SELECT SUM(onchain_amount) FROM settlement_intents WHERE chain = ?) AS onchain,
                  (SELECT SUM(offchain_amount) FROM settlement_intents WHERE chain = ?) AS offchain,
                  (SELECT COUNT(*) FROM chain_transfers WHERE chain = ? AND status <> 'confirmed') AS open`,
        )
        .safeIntegers(true)
        .get(c.id, c.id, c.id, c.id) as { charged: bigint; onchain: bigint; offchain: bigint; open: bigint };
      expect(totals.open).toBe(0n);
      expect(totals.onchain + totals.offchain).toBe(totals.charged);
      expect(totals.onchain).toBeGreaterThan(0n);
      expect(totals.offchain).toBeGreaterThan(0n);
      expect(await adapter.balanceOf(adapter.treasuryAddress())).toBe(ledgerToOnchain(totals.onchain, 6));
      // The operator-credit-only account never moved anything onchain.
      expect(await adapter.balanceOf(await runtime.depositAddress(c.id, "acct_r2"))).toBe(0n);
    }
    expect(auditLedger(db)).toEqual([]);
  });
});
