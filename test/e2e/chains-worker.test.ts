import { join } from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import { createClient } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import { createEvmAdapter } from "../../src/chains/evm/evm-adapter.js";
import { type EvmDevChain, startEvmDevChain } from "../../src/dev/chains/evm/dev-chain.js";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { BillingService, SettlementStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { remoteCoreTransport } from "../../src/runtime/remote-core.js";
import { devChainConfig, writeChainsFile } from "../helpers/evm.js";
import { cliJson, runCli, startGateway, startWorkerProcess, tempDir, until } from "../helpers/process.js";

// Production's shape: `tollgate serve` answers calls and holds the ledger; `tollgate worker`, a
// process of its own on the same database, watches deposits and settles. A configured chain
// (a local anvil behind TOLLGATE_CHAINS) and a provider URL, as an operator would set them.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const ADMIN_TOKEN = "chains-worker-test-operator-token-0123456789";

describe("tollgate worker beside tollgate serve", () => {
  it("credits deposits and settles calls from its own process; calls go on without it", async () => {
    const dev: EvmDevChain = await startEvmDevChain({ id: "base", chainId: 8453 });
    cleanups.push(() => dev.close());
    const provider: DevUpstream = await startDevUpstream({ host: "127.0.0.1", port: 0 });
    cleanups.push(() => provider.close());
    const dir = tempDir();
    cleanups.push(dir.cleanup);
    const secretHex = "6b".repeat(32);
    const chain = devChainConfig(dev, 1);
    const chainsFile = join(dir.path, "chains.json");
    writeChainsFile(chainsFile, dev);
    const env = {
      TOLLGATE_DATA_DIR: join(dir.path, "data"),
      TOLLGATE_ANTHROPIC_URL: provider.url,
      TOLLGATE_CHAINS: chainsFile,
      TOLLGATE_DEV_CHAINS: "auto",
      TOLLGATE_MASTER_SECRET: secretHex,
      TOLLGATE_SETTLEMENT_MODE: "per-call",
      TOLLGATE_CHAIN_POLL_MS: "100",
      TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN,
    };
    const adapter = createEvmAdapter(chain, { masterSecret: new Uint8Array(Buffer.from(secretHex, "hex")) });
    const treasury = adapter.treasuryAddress();
    await dev.fundGas(treasury);

    const gateway = await startGateway(env, 20_000, "serve");
    cleanups.push(() => gateway.stop("SIGKILL"));
    expect(gateway.stdout()).toContain("deposit watchers and settlement run by `tollgate worker`");
    const worker = await startWorkerProcess(env);
    cleanups.push(() => worker.stop("SIGKILL"));
    expect(worker.stdout()).toContain("deposit watchers and settlement on base");

    const account = await cliJson<{ id: string }>(["account", "create"], env);
    const key = await cliJson<{ secret: string }>(["key", "create", "--account", account.id], env);
    const billing = createClient(BillingService, remoteCoreTransport(gateway.coreUrl, ADMIN_TOKEN));
    // The address comes from serve (derivation only); the worker picks it up from the database.
    const { addresses } = await billing.getDepositAddresses({ accountId: account.id });
    const deposit = adapter.depositAddress(account.id);
    expect(addresses.map((a) => a.address)).toEqual([deposit]);
    await dev.mintTo(deposit, 3_000_000n);
    await dev.mine(2);
    await until(
      "the worker to credit the deposit",
      async () => {
        await dev.mine(1);
        const { balances } = await billing.getBalances({ accountId: account.id });
        return balances.find((b) => b.chain?.id === "base")?.available === 3_000_000n ? true : undefined;
      },
      30_000,
      () => worker.stderr(),
    );

    const client = new Anthropic({ apiKey: key.secret, baseURL: gateway.facadeUrl, maxRetries: 0 });
    const ask = () =>
      client.messages.create({
        model: "claude-haiku-4-5",
        max_tokens: 30,
        messages: [{ role: "user", content: "x" }],
      });
    await ask();
    const settled = await until(
      "the worker to settle the call onchain",
      async () => {
        await dev.mine(1);
        const { rows } = await billing.listUsage({ accountId: account.id });
        return rows[0]?.settlementStatus === SettlementStatus.CONFIRMED ? rows[0] : undefined;
      },
      30_000,
      () => worker.stderr(),
    );
    expect(await adapter.balanceOf(treasury)).toBe(settled.amount);

    // Without the worker, calls are still held, answered and charged; settlement waits for it.
    expect(await worker.stop("SIGTERM")).toBe(0);
    await ask();
    const { rows } = await billing.listUsage({ accountId: account.id });
    expect(rows).toHaveLength(2);
    expect(rows[0]?.settlementStatus).toBe(SettlementStatus.QUEUED);
    expect(await gateway.stop("SIGTERM")).toBe(0);
  });

  it("refuses to start without a chain registry or a master secret, naming each", async () => {
    const dir = tempDir();
    cleanups.push(dir.cleanup);
    const env = { TOLLGATE_DATA_DIR: dir.path };
    const none = await runCli(["worker"], env);
    expect(none.code).toBe(1);
    expect(none.stderr).toContain("worker refuses to start without");
    expect(none.stderr).toContain("TOLLGATE_CHAINS");
    expect(none.stderr).toContain("TOLLGATE_MASTER_SECRET");
    expect(none.stdout).not.toContain("ready");
    const withSecret = await runCli(["worker"], { ...env, TOLLGATE_MASTER_SECRET: "ab".repeat(32) });
    expect(withSecret.code).toBe(1);
    expect(withSecret.stderr).toContain("TOLLGATE_CHAINS");
    expect(withSecret.stderr).not.toContain("TOLLGATE_MASTER_SECRET (");
  });
});
