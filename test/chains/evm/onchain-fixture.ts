import { type Client, createClient, createRouterTransport } from "@connectrpc/connect";
import { expect } from "vitest";
import { ChainsRuntime } from "../../../src/chains/chains-runtime.js";
import { chainRegistry } from "../../../src/core/billing/chain-registry.js";
import { operatorCallerResolver } from "../../../src/core/caller.js";
import type { Core } from "../../../src/core/core.js";
import { type EvmDevChain, startEvmDevChain } from "../../../src/dev/chains/evm/dev-chain.js";
import { BillingService } from "../../../src/gen/tollgate/billing/v1/billing_pb.js";
import { AuthRepository } from "../../../src/store/sqlite/accounts.js";
import { auditLedger } from "../../../src/store/sqlite/audit.js";
import { SqliteChainWork } from "../../../src/store/sqlite/chain-work.js";
import { type Db, openDatabase } from "../../../src/store/sqlite/database.js";
import { coreOver } from "../../helpers/core.js";
import { devChainConfig, TEST_MASTER_SECRET } from "../../helpers/evm.js";
import { tempDir } from "../../helpers/process.js";

/** A billing core over a real database, a chains runtime, and one real anvil chain. */
export interface OnchainFixture {
  readonly dev: EvmDevChain;
  readonly db: Db;
  readonly core: Core;
  readonly runtime: ChainsRuntime;
  readonly billing: Client<typeof BillingService>;
  readonly dataDir: string;
  account(): string;
  /** A text call charging exactly `charge` ledger units (hold and settle in the core). */
  call(accountId: string, requestId: string): Promise<bigint>;
  /** Builds a second runtime over the same database (a restart). */
  restart(): Promise<ChainsRuntime>;
  expectSoundLedger(): void;
  close(): Promise<void>;
}

/** Options of {@link onchainFixture}. */
export interface OnchainFixtureOptions {
  readonly confirmations?: number;
  readonly manualMining?: boolean;
  readonly mode?: "per-call" | "batch";
  readonly batchWindowMs?: number;
  readonly now?: () => number;
  /** Point the adapters at this RPC URL instead of the chain's own (a proxy). */
  readonly rpcUrl?: (dev: EvmDevChain) => string;
}

/** Starts anvil (chain id 8453 as `base`), opens a fresh database and builds core + runtime. */
export async function onchainFixture(options: OnchainFixtureOptions = {}): Promise<OnchainFixture> {
  const dev = await startEvmDevChain({ id: "base", chainId: 8453, manualMining: options.manualMining });
  const dir = tempDir("tollgate-onchain-");
  const db = openDatabase(dir.path);
  const chain = {
    ...devChainConfig(dev, options.confirmations ?? 2),
    rpcUrl: options.rpcUrl?.(dev) ?? dev.rpcUrl,
  };
  const registry = chainRegistry([chain], "base");
  const now = options.now ?? Date.now;
  const build = () =>
    ChainsRuntime.create({
      store: new SqliteChainWork(db),
      registry,
      masterSecret: TEST_MASTER_SECRET,
      settlement: { mode: options.mode ?? "per-call", batchWindowMs: options.batchWindowMs ?? 0 },
      pollMs: 50,
      scanRange: 1000,
      startAt: "genesis",
      now,
    });
  const runtime = await build();
  const treasury = runtime.adapter("base")!.treasuryAddress();
  await dev.fundGas(treasury);
  if (options.manualMining) await dev.mine(1);
  const core = coreOver(db, { chains: registry, chainDirectory: runtime, now });
  const billing = createClient(
    BillingService,
    createRouterTransport(core.routes, { router: core.routerOptionsFor(operatorCallerResolver) }),
  );
  const accounts = new AuthRepository(db);
  const runtimes = [runtime];
  let n = 0;
  return {
    dev,
    db,
    core,
    runtime,
    billing,
    dataDir: dir.path,
    account() {
      const id = `acct_chain${++n}`;
      accounts.createAccount(id, "chain test", now());
      return id;
    },
    async call(accountId, requestId) {
      const hold = await core.billing.hold({
        accountId,
        requestId,
        keyId: "",
        chain: "base",
        call: { kind: "text", model: "model-haiku-4-5", inputTokens: 1000n, maxTokens: 1000n },
      });
      const settled = await core.billing.settle(hold.hold.id, {
        inputTokens: 1000n,
        outputTokens: 200n + BigInt(n % 7) * 10n,
        cacheWrite5mTokens: 0n,
        cacheWrite1hTokens: 0n,
        cacheReadTokens: 0n,
        images: 0,
      });
      return settled.resolution!.amount;
    },
    async restart() {
      const again = await build();
      runtimes.push(again);
      return again;
    },
    expectSoundLedger() {
      expect(auditLedger(db)).toEqual([]);
    },
    async close() {
      for (const r of runtimes) await r.stop();
      db.close();
      await dev.close();
      dir.cleanup();
    },
  };
}

/** Σ of confirmed settlement transfers on a chain, in ledger units (what the treasury should have received). */
export function settledOnchain(db: Db, chain: string): bigint {
  const row = db
    .prepare(
      "SELECT COALESCE(SUM(amount), 0) AS s FROM chain_transfers WHERE chain = ? AND kind = 'settlement' AND status = 'confirmed'",
    )
    .safeIntegers(true)
    .get(chain) as { s: bigint };
  return row.s;
}

/** Σ of every call's charge on a chain, split into its onchain and off-chain parts. */
export function ledgerSettled(db: Db, chain: string): { total: bigint; onchain: bigint; offchain: bigint } {
  const row = db
    .prepare(
      `SELECT COALESCE(SUM(e.amount), 0) AS total,
              (SELECT COALESCE(SUM(onchain_amount), 0) FROM settlement_intents WHERE chain = ?) AS onchain,
              (SELECT COALESCE(SUM(offchain_amount), 0) FROM settlement_intents WHERE chain = ?) AS offchain
         FROM ledger_entries e WHERE e.chain = ? AND e.kind = 'charge'`,
    )
    .safeIntegers(true)
    .get(chain, chain, chain) as { total: bigint; onchain: bigint; offchain: bigint };
  return row;
}
