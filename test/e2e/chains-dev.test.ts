import { spawn } from "node:child_process";
import { createPublicKey, verify } from "node:crypto";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import Anthropic from "@anthropic-ai/sdk";
import { createClient } from "@connectrpc/connect";
import { getAssociatedTokenAddressSync } from "@solana/spl-token";
import { Connection, PublicKey } from "@solana/web3.js";
import { createPublicClient, createTestClient, getAddress, http } from "viem";
import { afterEach, describe, expect, it } from "vitest";
import { eip3009Abi } from "../../src/chains/evm/evm-adapter.js";
import { formatUnits } from "../../src/core/billing/money.js";
import { readDevChainsFile } from "../../src/dev/chains/dev-chains-file.js";
import {
  BillingService,
  SettlementStatus,
  TransferStatus,
} from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { HealthService } from "../../src/gen/tollgate/health/v1/health_pb.js";
import { remoteCoreTransport } from "../../src/runtime/remote-core.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { CLI, childEnv, cliJson, runCli, startGateway, tempDir } from "../helpers/process.js";

// The whole onchain path on one machine, through the real `tollgate serve` in dev mode: dev
// chains (anvil), faucet deposit, finality, credit, calls through the official SDK, settlement
// to the treasury, a withdrawal, and reconciliation of onchain totals with the ledger.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(150);
  }
}

const ADMIN_TOKEN = "chains-dev-test-operator-token-0123456789";

describe("serve with dev chains", () => {
  it("deposit → credit at finality → billed calls settled onchain → withdrawal; totals reconcile", async () => {
    const dir = tempDir();
    cleanups.push(dir.cleanup);
    const env = {
      TOLLGATE_DATA_DIR: dir.path,
      TOLLGATE_DEV_CHAINS: "on",
      TOLLGATE_SETTLEMENT_MODE: "per-call",
      TOLLGATE_CHAIN_POLL_MS: "100",
      TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN,
      TOLLGATE_HEALTH_INTERVAL_S: "1",
    };
    const gateway = await startGateway(env);
    // Polling goes through the core's gRPC port (a CLI process per poll would be slow).
    const billing = createClient(BillingService, remoteCoreTransport(gateway.coreUrl, ADMIN_TOKEN));
    cleanups.push(() => gateway.stop("SIGTERM"));
    expect(gateway.stdout()).toMatch(
      /chains: dev chains base, arbitrum, robinhood, solana.*faucet http:\/\/127\.0\.0\.1:\d+/,
    );

    const account = await cliJson<{ id: string }>(["account", "create"], env);
    const key = await cliJson<{ secret: string }>(["key", "create", "--account", account.id], env);
    const { addresses } = await cliJson<{ addresses: { chain: { id: string }; address: string }[] }>(
      ["addresses", "--account", account.id],
      env,
    );
    const deposit = addresses.find((a) => a.chain.id === "base")!.address;
    // Every EVM chain gives the account the same address.
    expect(new Set(addresses.filter((a) => a.chain.id !== "solana").map((a) => a.address)).size).toBe(1);

    const faucet = await runCli(
      ["faucet", "--account", account.id, "--chain", "base", "--amount", "10"],
      env,
    );
    expect(faucet.code, faucet.stderr).toBe(0);
    await until("the deposit to be credited", async () => {
      const { deposits } = await billing.listDeposits({ accountId: account.id });
      return deposits.some((d) => d.credited && d.amount === 10_000_000n) ? true : undefined;
    });
    const listed = await cliJson<{ deposits: { credited?: boolean }[] }>(
      ["deposits", "--account", account.id],
      env,
    );
    expect(listed.deposits[0]?.credited).toBe(true);

    const client = new Anthropic({ apiKey: key.secret, baseURL: gateway.facadeUrl, maxRetries: 0 });
    for (let i = 0; i < 4; i++) {
      const message = await client.messages.create({
        model: "claude-haiku-4-5",
        max_tokens: 40 + i,
        messages: [{ role: "user", content: `call ${i}` }],
      });
      expect(message.content[0]?.type).toBe("text");
    }

    type UsageRows = {
      rows: { requestId: string; amount?: string; settlementStatus?: string; settlementTxHash?: string }[];
    };
    const rows = await until("every call to settle onchain", async () => {
      const usage = await cliJson<UsageRows>(["usage", "--account", account.id], env);
      return usage.rows.length === 4 &&
        usage.rows.every((r) => r.settlementStatus === "SETTLEMENT_STATUS_CONFIRMED")
        ? usage.rows
        : undefined;
    });
    for (const row of rows) expect(row.settlementTxHash).toMatch(/^0x[0-9a-f]{64}$/);
    // Each call's receipt, fetched now, names the confirmed settlement transaction; its
    // signature checks against the published key (derived from the master secret).
    const { keys } = (await (await fetch(`${gateway.facadeUrl}/.well-known/jwks.json`)).json()) as {
      keys: { kty: string; crv: string; x: string }[];
    };
    const publicKey = createPublicKey({ key: keys[0]!, format: "jwk" });
    for (const row of rows) {
      const response = await fetch(`${gateway.facadeUrl}/v1/receipts/${row.requestId}`, {
        headers: { "x-api-key": key.secret },
      });
      const [header, payload, signature] = ((await response.json()) as { signature: string }).signature.split(
        ".",
      );
      expect(
        verify(null, Buffer.from(`${header}.${payload}`), publicKey, Buffer.from(signature!, "base64url")),
      ).toBe(true);
      expect(JSON.parse(Buffer.from(payload!, "base64url").toString())).toMatchObject({
        network: "eip155:8453",
        requestId: row.requestId,
        charge: { amount: row.amount },
        transaction: row.settlementTxHash,
        settlement: { status: "confirmed", transaction: row.settlementTxHash },
      });
    }
    const charged = rows.reduce((sum, r) => sum + BigInt(r.amount ?? "0"), 0n);
    expect(charged).toBeGreaterThan(0n);

    // Withdraw part of what is left to an outside address: 2.5 received, the chain's network fee
    // debited on top, both said by the CLI.
    const to = "0x000000000000000000000000000000000000bEEF";
    const withdrawal = await runCli(
      ["withdraw", "--account", account.id, "--chain", "base", "--amount", "2.5", "--to", to],
      env,
    );
    expect(withdrawal.code, withdrawal.stderr).toBe(0);
    expect(withdrawal.stdout).toMatch(
      /receives\s+2\.500000 USDC\n\s+network fee\s+0\.050000 USDC\n\s+debited\s+2\.550000 USDC/,
    );
    const available = 10_000_000n - charged - 2_550_000n;
    expect(withdrawal.stdout).toContain(`Available on base: ${formatUnits(available, 6)} USDC.`);
    await until("the withdrawal to confirm", async () => {
      const { withdrawals } = await billing.listWithdrawals({ accountId: account.id });
      return withdrawals[0]?.status === TransferStatus.CONFIRMED ? true : undefined;
    });

    // Reconciliation, to the smallest unit, against the chain itself.
    const dev = readDevChainsFile(dir.path)!;
    const base = dev.registry.byId.get("base")!;
    const rpc = createPublicClient({ transport: http(base.rpcUrl) });
    const balanceOf = (address: string) =>
      rpc.readContract({
        address: getAddress(base.asset.address),
        abi: eip3009Abi,
        functionName: "balanceOf",
        args: [getAddress(address)],
      });
    const backlog = await cliJson<{
      chains: { chain: string; settledOnchain?: string; settledOffchain?: string }[];
    }>(["settlement"], env);
    const baseBacklog = backlog.chains.find((c) => c.chain === "base")!;
    expect(BigInt(baseBacklog.settledOnchain ?? "0")).toBe(charged);
    expect(baseBacklog.settledOffchain ?? "0").toBe("0");
    const health = (await (await fetch(`${gateway.facadeUrl}/v1/health`)).json()) as {
      dependencies: { name: string; ok: boolean; detail?: string }[];
    };
    expect(health.dependencies.find((d) => d.name === "chain:base")).toEqual({
      name: "chain:base",
      ok: true,
      required: false,
      status: "ready",
    });
    // The detail (watcher lag, backlog, the treasury and its balance) is the operator's alone
    // (issue 29): HealthService.Inspect with the operator token.
    const inspected = await createClient(
      HealthService,
      remoteCoreTransport(gateway.coreUrl, ADMIN_TOKEN),
    ).inspect({});
    const baseHealth = inspected.dependencies.find((d) => d.name === "chain:base")!;
    expect(baseHealth.ok).toBe(true);
    expect(baseHealth.detail).toMatch(
      /watcher lag \d+.*settlement backlog \d+; treasury 0x[0-9a-fA-F]{40} holds/,
    );
    const db = openDatabase(dir.path);
    try {
      const treasury = db
        .prepare(
          "SELECT DISTINCT to_address FROM chain_transfers WHERE kind = 'settlement' AND chain = 'base'",
        )
        .all() as { to_address: string }[];
      expect(treasury).toHaveLength(1);
      const ledgerCharged = (
        db
          .prepare("SELECT SUM(amount) AS s FROM ledger_entries WHERE chain = 'base' AND kind = 'charge'")
          .safeIntegers(true)
          .get() as {
          s: bigint;
        }
      ).s;
      expect(ledgerCharged).toBe(charged);
      expect(await balanceOf(treasury[0]!.to_address)).toBe(ledgerCharged);
      expect(await balanceOf(to)).toBe(2_500_000n);
      // The fee's tokens stay at the deposit address, committed: the account cannot spend them.
      expect(await balanceOf(deposit)).toBe(10_000_000n - charged - 2_500_000n);
      const fees = db
        .prepare("SELECT SUM(amount) AS s FROM ledger_entries WHERE chain = 'base' AND credit_account = ?")
        .safeIntegers(true)
        .get("system:withdrawal-fees") as { s: bigint };
      expect(fees.s).toBe(50_000n);
      const { balances } = await billing.getBalances({ accountId: account.id });
      expect(balances.find((b) => b.chain?.id === "base")?.available).toBe(available);
      expect(auditLedger(db)).toEqual([]);
    } finally {
      db.close();
    }
    expect(await gateway.stop("SIGTERM")).toBe(0);
  });

  it("keeps the dev chains' state across a restart: Solana deposits before and after are both there", async () => {
    const dir = tempDir();
    cleanups.push(dir.cleanup);
    const env = {
      TOLLGATE_DATA_DIR: dir.path,
      TOLLGATE_DEV_CHAINS: "on",
      TOLLGATE_CHAIN_POLL_MS: "100",
      TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN,
    };
    const account = await cliJson<{ id: string }>(["account", "create"], env);
    const fundAndWait = async (amount: string, available: bigint) => {
      const faucet = await runCli(
        ["faucet", "--account", account.id, "--chain", "solana", "--amount", amount],
        env,
      );
      expect(faucet.code, faucet.stderr).toBe(0);
      await until(`a Solana balance of ${available}`, async () => {
        const { balances } = await billing.getBalances({ accountId: account.id });
        return balances.find((b) => b.chain?.id === "solana")?.available === available ? true : undefined;
      });
    };
    let gateway = await startGateway(env);
    let billing = createClient(BillingService, remoteCoreTransport(gateway.coreUrl, ADMIN_TOKEN));
    await fundAndWait("3", 3_000_000n);
    expect(await gateway.stop("SIGTERM")).toBe(0);

    gateway = await startGateway(env);
    cleanups.push(() => gateway.stop("SIGTERM"));
    billing = createClient(BillingService, remoteCoreTransport(gateway.coreUrl, ADMIN_TOKEN));
    await fundAndWait("2", 5_000_000n);
    const { deposits } = await billing.listDeposits({ accountId: account.id });
    expect(deposits.filter((d) => d.credited).map((d) => d.amount)).toEqual([2_000_000n, 3_000_000n]);
    // The chain itself still holds the first deposit: its state came back with it.
    const solana = readDevChainsFile(dir.path)!.registry.byId.get("solana")!;
    const owner = (await billing.getDepositAddresses({ accountId: account.id })).addresses.find(
      (a) => a.chain?.id === "solana",
    )!.address;
    const tokenAccount = getAssociatedTokenAddressSync(
      new PublicKey(solana.asset.address),
      new PublicKey(owner),
    );
    const held = await new Connection(solana.rpcUrl, "confirmed").getTokenAccountBalance(tokenAccount);
    expect(held.value.amount).toBe("5000000");
    auditAt(dir.path);
  });

  it("configured mode: a gateway pointed at `tollgate dev-chains` in another process credits, bills and settles", async () => {
    const dir = tempDir();
    cleanups.push(dir.cleanup);
    // The chains run in their own process and write the registry file the gateway is given.
    const chains = spawn(process.execPath, [CLI, "dev-chains"], {
      env: childEnv({ TOLLGATE_DATA_DIR: dir.path }),
      stdio: ["ignore", "pipe", "pipe"],
    });
    const exited = new Promise((done) => chains.on("exit", done));
    cleanups.push(async () => {
      chains.kill("SIGTERM");
      await exited;
    });
    let chainsOut = "";
    chains.stdout!.on("data", (chunk) => {
      chainsOut += chunk;
    });
    await until("the dev chains to start", async () =>
      chainsOut.includes("tollgate dev-chains ready") ? true : undefined,
    );
    const env = {
      TOLLGATE_DATA_DIR: dir.path,
      TOLLGATE_CHAINS: join(dir.path, "dev-chains.json"),
      TOLLGATE_MASTER_SECRET: "c0ffee".repeat(11).slice(0, 64),
      TOLLGATE_DEV_CHAINS: "auto",
      TOLLGATE_SETTLEMENT_MODE: "per-call",
      TOLLGATE_CHAIN_POLL_MS: "100",
      TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN,
    };
    const gateway = await startGateway(env);
    cleanups.push(() => gateway.stop("SIGTERM"));
    expect(gateway.stdout()).not.toMatch(/dev chains/);
    const billing = createClient(BillingService, remoteCoreTransport(gateway.coreUrl, ADMIN_TOKEN));
    // Outside dev mode the operator funds the treasury's fees; `tollgate settlement` names it.
    const backlog = await cliJson<{ chains: { chain: string; treasuryAddress?: string }[] }>(
      ["settlement"],
      env,
    );
    expect(backlog.chains.map((c) => c.chain)).toEqual(["arbitrum", "base", "robinhood", "solana"]);
    const treasury = backlog.chains.find((c) => c.chain === "base")!.treasuryAddress!;
    expect(treasury).toMatch(/^0x[0-9a-fA-F]{40}$/);
    const base = readDevChainsFile(dir.path)!.registry.byId.get("base")!;
    await createTestClient({ mode: "anvil", transport: http(base.rpcUrl) }).setBalance({
      address: getAddress(treasury),
      value: 10n ** 18n,
    });
    const account = await cliJson<{ id: string }>(["account", "create"], env);
    const key = await cliJson<{ secret: string }>(["key", "create", "--account", account.id], env);
    const faucet = await runCli(["faucet", "--account", account.id, "--chain", "base", "--amount", "4"], env);
    expect(faucet.code, faucet.stderr).toBe(0);
    await until("the deposit to be credited", async () => {
      const { balances } = await billing.getBalances({ accountId: account.id });
      return balances.find((b) => b.chain?.id === "base")?.available === 4_000_000n ? true : undefined;
    });
    const client = new Anthropic({ apiKey: key.secret, baseURL: gateway.facadeUrl, maxRetries: 0 });
    await client.messages.create({
      model: "claude-haiku-4-5",
      max_tokens: 20,
      messages: [{ role: "user", content: "configured" }],
    });
    const row = await until("the call to settle onchain", async () => {
      const { rows } = await billing.listUsage({ accountId: account.id });
      return rows[0]?.settlementStatus === SettlementStatus.CONFIRMED ? rows[0] : undefined;
    });
    expect(row.settlementTxHash).toMatch(/^0x[0-9a-f]{64}$/);
    expect(await gateway.stop("SIGTERM")).toBe(0);
    auditAt(dir.path);
  });

  it("says clearly when there are no chains to talk to", async () => {
    const dir = tempDir();
    cleanups.push(dir.cleanup);
    const env = { TOLLGATE_DATA_DIR: dir.path };
    const account = await cliJson<{ id: string }>(["account", "create"], env);
    const faucet = await runCli(["faucet", "--account", account.id, "--chain", "base", "--amount", "1"], env);
    expect(faucet.code).toBe(2);
    expect(faucet.stderr).toContain("no dev chains are running for this data directory");
    const addresses = await runCli(["addresses", "--account", account.id], env); // TOLLGATE_DEV_CHAINS=off
    expect(addresses.code).toBe(1);
    expect(addresses.stderr).toContain("Onchain features are not running on this gateway");
  });
});

function auditAt(dataDir: string): void {
  const db = openDatabase(dataDir);
  try {
    expect(auditLedger(db)).toEqual([]);
  } finally {
    db.close();
  }
}
