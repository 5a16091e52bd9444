import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import Anthropic from "@anthropic-ai/sdk";
import { createClient } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import { createEvmAdapter } from "../../src/chains/evm/evm-adapter.js";
import { type EvmDevChain, startEvmDevChain } from "../../src/dev/chains/evm/dev-chain.js";
import { BillingService, SettlementStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { remoteCoreTransport } from "../../src/runtime/remote-core.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { devChainConfig, writeChainsFile } from "../helpers/evm.js";
import { cliJson, type GatewayProcess, startGateway, tempDir, until } from "../helpers/process.js";
import { rpcProxy } from "../helpers/rpc-proxy.js";

// kill -9 between broadcast and recording: a JSON-RPC proxy between the gateway and anvil
// forwards the settlement's eth_sendRawTransaction to the chain, then SIGKILLs the gateway before
// the answer reaches it. After a restart the gateway must find the transaction instead of paying
// again.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const ADMIN_TOKEN = "chains-crash-test-operator-token-0123456789";

describe("settlement across a kill -9", () => {
  it("a gateway killed between broadcast and recording does not pay twice after restart", async () => {
    const dev: EvmDevChain = await startEvmDevChain({ id: "base", chainId: 8453 });
    cleanups.push(() => dev.close());
    let gateway: GatewayProcess | undefined;
    let killOnSend = true;
    const proxy = await rpcProxy(dev.rpcUrl, async (phase) => {
      if (phase !== "after" || !killOnSend || gateway === undefined) return false;
      killOnSend = false;
      await gateway.stop("SIGKILL");
      return true;
    });
    cleanups.push(() => new Promise((resolve) => proxy.close(resolve)));
    const proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;

    const dir = tempDir();
    cleanups.push(dir.cleanup);
    const secretHex = "5a".repeat(32);
    const chain = devChainConfig(dev, 1);
    const chainsFile = join(dir.path, "chains.json");
    writeChainsFile(chainsFile, dev, proxyUrl);
    const env = {
      TOLLGATE_DATA_DIR: join(dir.path, "data"),
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

    gateway = await startGateway(env);
    const first = gateway;
    cleanups.push(() => first.stop("SIGKILL"));
    expect(first.stdout()).toContain("chains: configured RPCs");
    const account = await cliJson<{ id: string }>(["account", "create"], env);
    const key = await cliJson<{ secret: string }>(["key", "create", "--account", account.id], env);
    // The watcher of a configured chain starts at the finalized block it first sees: wait for it.
    await until("the watcher to start", async () => {
      const db = openDatabase(env.TOLLGATE_DATA_DIR);
      try {
        return db.prepare("SELECT 1 FROM chain_cursors").get() === undefined ? undefined : true;
      } finally {
        db.close();
      }
    });
    const billing = createClient(BillingService, remoteCoreTransport(first.coreUrl, ADMIN_TOKEN));
    const { addresses } = await billing.getDepositAddresses({ accountId: account.id });
    const deposit = adapter.depositAddress(account.id);
    expect(addresses.map((a) => a.address)).toEqual([deposit]); // derived from the same master secret
    await dev.mintTo(deposit, 3_000_000n);
    await dev.mine(2);
    await until(
      "the deposit to be credited",
      async () => {
        const { balances } = await billing.getBalances({ accountId: account.id });
        return balances.find((b) => b.chain?.id === "base")?.available === 3_000_000n ? true : undefined;
      },
      30_000,
      () => first.stderr(),
    );

    const client = new Anthropic({ apiKey: key.secret, baseURL: first.facadeUrl, maxRetries: 0 });
    await client.messages.create({
      model: "claude-haiku-4-5",
      max_tokens: 30,
      messages: [{ role: "user", content: "x" }],
    });
    // The worker signs, records, broadcasts — and dies before it hears the RPC's answer.
    await until("the gateway to be killed mid-broadcast", async () =>
      first.child.exitCode !== null || first.child.signalCode !== null ? true : undefined,
    );
    expect(first.child.signalCode).toBe("SIGKILL");

    let db = openDatabase(env.TOLLGATE_DATA_DIR);
    const [before] = db.prepare("SELECT status, tx_hash FROM chain_transfers").all() as {
      status: string;
      tx_hash: string;
    }[];
    const charged = (
      db.prepare("SELECT amount FROM ledger_entries WHERE kind = 'charge'").safeIntegers(true).get() as {
        amount: bigint;
      }
    ).amount;
    db.close();
    expect(before).toMatchObject({ status: "prepared" });
    await dev.mine(2);
    expect(await adapter.balanceOf(treasury)).toBe(charged); // it did land, once

    gateway = await startGateway(env);
    const second = gateway;
    cleanups.push(() => second.stop("SIGKILL"));
    const billingAgain = createClient(BillingService, remoteCoreTransport(second.coreUrl, ADMIN_TOKEN));
    await until("the settlement to be confirmed", async () => {
      await dev.mine(1);
      const usage = await billingAgain.listUsage({ accountId: account.id });
      return usage.rows[0]?.settlementStatus === SettlementStatus.CONFIRMED ? usage.rows[0] : undefined;
    });
    await dev.mine(3);
    await sleep(500);
    expect(await adapter.balanceOf(treasury)).toBe(charged);
    expect(await adapter.balanceOf(deposit)).toBe(3_000_000n - charged);
    db = openDatabase(env.TOLLGATE_DATA_DIR);
    try {
      expect(db.prepare("SELECT status, tx_hash FROM chain_transfers").all()).toEqual([
        { status: "confirmed", tx_hash: before!.tx_hash },
      ]);
      expect(auditLedger(db)).toEqual([]);
    } finally {
      db.close();
    }
    expect(await second.stop("SIGTERM")).toBe(0);
  });
});
