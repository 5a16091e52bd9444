import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { x402Client } from "@x402/core/client";
import type { Network } from "@x402/core/types";
import { toClientEvmSigner } from "@x402/evm";
import { ExactEvmScheme as ExactClient } from "@x402/evm/exact/client";
import { UptoEvmScheme as UptoClient } from "@x402/evm/upto/client";
import { wrapFetchWithPayment } from "@x402/fetch";
import { type Address, bytesToHex, createPublicClient, http } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterEach, describe, expect, it } from "vitest";
import { eip3009Abi } from "../../src/chains/evm/evm-adapter.js";
import { treasurySeed, x402FacilitatorSeed } from "../../src/chains/keys.js";
import { type EvmDevChain, startEvmDevChain } from "../../src/dev/chains/evm/dev-chain.js";
import { startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { writeChainsFile } from "../helpers/evm.js";
import { type GatewayProcess, startGateway, tempDir, until } from "../helpers/process.js";
import { rpcProxy } from "../helpers/rpc-proxy.js";

// kill -9 between a stream's end and the collection of its x402 payment: a JSON-RPC proxy
// between the gateway and anvil kills the gateway when its facilitator first tries to send the
// collecting transaction, before forwarding it. The ledger has charged the delivered stream, and
// the payment is left open. After a restart the recovery pass must collect that charge onchain
// (read from the chain), close the payment and return the rest, leaving a sound ledger.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe("x402 across a kill -9", () => {
  it("collects a stream's charge after a restart when the gateway died before collecting it", async () => {
    const dev: EvmDevChain = await startEvmDevChain({ id: "base", chainId: 8453 });
    cleanups.push(() => dev.close());
    const upstream = await startDevUpstream({});
    cleanups.push(() => upstream.close());
    let gateway: GatewayProcess | undefined;
    let killOnSend = true;
    const proxy = await rpcProxy(dev.rpcUrl, async (phase) => {
      if (phase !== "before" || !killOnSend || gateway === undefined) return false;
      killOnSend = false;
      await gateway.stop("SIGKILL");
      return true;
    });
    cleanups.push(() => new Promise((resolve) => proxy.close(resolve)));
    const proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;

    const dir = tempDir();
    cleanups.push(dir.cleanup);
    const secretHex = "7b".repeat(32);
    const secret = new Uint8Array(Buffer.from(secretHex, "hex"));
    const chainsFile = join(dir.path, "chains.json");
    writeChainsFile(chainsFile, dev, proxyUrl);
    const env = {
      TOLLGATE_DATA_DIR: join(dir.path, "data"),
      TOLLGATE_CHAINS: chainsFile,
      TOLLGATE_DEV_CHAINS: "auto",
      TOLLGATE_MASTER_SECRET: secretHex,
      TOLLGATE_ANTHROPIC_URL: upstream.url,
      // Calls are short here, so a payment left open is recovered within seconds.
      TOLLGATE_MAX_CALL_MS: "3000",
      TOLLGATE_UPSTREAM_RESPONSE_TIMEOUT_MS: "2000",
      TOLLGATE_HOLD_SWEEP_INTERVAL_MS: "300",
    };
    // Configured chains: the operator funds the facilitator's gas (docs/x402.md).
    await dev.fundGas(privateKeyToAccount(bytesToHex(x402FacilitatorSeed(secret, "evm"))).address);
    const treasury = privateKeyToAccount(bytesToHex(treasurySeed(secret, "evm"))).address;
    const payer = privateKeyToAccount(generatePrivateKey());
    await dev.mintTo(payer.address, 2_000_000n);
    const balanceOf = async (address: Address) =>
      await createPublicClient({ transport: http(dev.rpcUrl) }).readContract({
        address: dev.token,
        abi: eip3009Abi,
        functionName: "balanceOf",
        args: [address],
      });
    expect(await balanceOf(payer.address)).toBe(2_000_000n);

    gateway = await startGateway(env, 60_000);
    const first = gateway;
    cleanups.push(() => first.stop("SIGKILL"));
    const network = "eip155:8453" as Network;
    const client = new x402Client()
      .register(
        network,
        new UptoClient(toClientEvmSigner(payer, createPublicClient({ transport: http(dev.rpcUrl) })), {
          rpcUrl: dev.rpcUrl,
        }),
      )
      .setSpendControls({ allowedAssets: [{ network, asset: dev.token }] });
    const response = await wrapFetchWithPayment(fetch, client)(`${first.facadeUrl}/x402/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: "claude-haiku-4-5",
        max_tokens: 64,
        stream: true,
        messages: [{ role: "user", content: "hello" }],
      }),
    });
    expect(response.status, `${await response.clone().text()} ${first.stderr()} ${first.stdout()}`).toBe(200);
    // The whole stream arrives; the collection after it kills the gateway before it is sent.
    expect(await response.text()).toContain("event: message_stop");
    await until("the gateway to be killed as it collects", async () =>
      first.child.exitCode !== null || first.child.signalCode !== null ? true : undefined,
    );
    expect(first.child.signalCode).toBe("SIGKILL");
    expect(await balanceOf(payer.address)).toBe(2_000_000n);
    let db = openDatabase(env.TOLLGATE_DATA_DIR);
    const open = db
      .prepare("SELECT id, hold_id, authorised FROM x402_payments WHERE status = 'authorised'")
      .safeIntegers(true)
      .all() as { id: string; hold_id: string; authorised: bigint }[];
    expect(open).toHaveLength(1);
    const { charge } = db
      .prepare("SELECT amount AS charge FROM hold_resolutions WHERE hold_id = ? AND status = 'settled'")
      .safeIntegers(true)
      .get(open[0]!.hold_id) as { charge: bigint };
    expect(charge).toBeGreaterThan(0n);
    db.close();

    const treasuryBefore = await balanceOf(treasury);
    const second = await startGateway(env, 60_000);
    cleanups.push(() => second.stop("SIGTERM"));
    await until(
      "the open payment to be collected",
      async () => {
        const check = openDatabase(env.TOLLGATE_DATA_DIR);
        try {
          const row = check.prepare("SELECT status FROM x402_payments WHERE id = ?").get(open[0]!.id) as {
            status: string;
          };
          return row.status === "authorised" ? undefined : row.status;
        } finally {
          check.close();
        }
      },
      30_000,
      () => second.stderr(),
    );
    expect(await second.stop("SIGTERM")).toBe(0);
    db = openDatabase(env.TOLLGATE_DATA_DIR);
    try {
      const row = db
        .prepare("SELECT status, settled, tx_hash FROM x402_payments WHERE id = ?")
        .safeIntegers(true)
        .get(open[0]!.id) as { status: string; settled: bigint; tx_hash: string };
      expect(row).toMatchObject({ status: "settled", settled: charge });
      expect(row.tx_hash).toMatch(/^0x[0-9a-f]{64}$/);
      // Onchain: exactly the charge, once; nothing of the unspent authorisation.
      expect(await balanceOf(payer.address)).toBe(2_000_000n - charge);
      expect(await balanceOf(treasury)).toBe(treasuryBefore + charge);
      expect(auditLedger(db)).toEqual([]);
    } finally {
      db.close();
    }
  }, 120_000);

  it("settles an image whose payment was collected when its ledger settle was refused and the gateway then died", async () => {
    const dev: EvmDevChain = await startEvmDevChain({ id: "base", chainId: 8453 });
    cleanups.push(() => dev.close());
    const upstream = await startDevUpstream({});
    cleanups.push(() => upstream.close());
    const dir = tempDir();
    cleanups.push(dir.cleanup);
    const secretHex = "7c".repeat(32);
    const secret = new Uint8Array(Buffer.from(secretHex, "hex"));
    const chainsFile = join(dir.path, "chains.json");
    writeChainsFile(chainsFile, dev, dev.rpcUrl);
    const env = {
      TOLLGATE_DATA_DIR: join(dir.path, "data"),
      TOLLGATE_CHAINS: chainsFile,
      TOLLGATE_DEV_CHAINS: "auto",
      TOLLGATE_MASTER_SECRET: secretHex,
      TOLLGATE_ANTHROPIC_URL: upstream.url,
      // The sweeper runs often and expires holds fast: it must still leave a collected one alone.
      TOLLGATE_MAX_CALL_MS: "3000",
      TOLLGATE_HOLD_SWEEP_INTERVAL_MS: "300",
    };
    await dev.fundGas(privateKeyToAccount(bytesToHex(x402FacilitatorSeed(secret, "evm"))).address);
    const treasury = privateKeyToAccount(bytesToHex(treasurySeed(secret, "evm"))).address;
    const payer = privateKeyToAccount(generatePrivateKey());
    await dev.mintTo(payer.address, 1_000_000n);
    const balanceOf = async (address: Address) =>
      await createPublicClient({ transport: http(dev.rpcUrl) }).readContract({
        address: dev.token,
        abi: eip3009Abi,
        functionName: "balanceOf",
        args: [address],
      });
    const first = await startGateway(env, 60_000);
    cleanups.push(() => first.stop("SIGKILL"));
    // The store refuses every hold settlement from now on (as a full disk or a lost connection
    // would): the image's collection lands onchain, its ledger settle does not.
    let db = openDatabase(env.TOLLGATE_DATA_DIR);
    db.exec(`CREATE TRIGGER refuse_settles BEFORE INSERT ON hold_resolutions
               BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`);
    db.close();
    const network = "eip155:8453" as Network;
    const client = new x402Client()
      .register(
        network,
        new ExactClient(toClientEvmSigner(payer, createPublicClient({ transport: http(dev.rpcUrl) }))),
      )
      .setSpendControls({ allowedAssets: [{ network, asset: dev.token }] });
    const treasuryBefore = await balanceOf(treasury);
    const response = await wrapFetchWithPayment(fetch, client)(
      `${first.facadeUrl}/x402/v1/images/generations`,
      {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "image-2", prompt: "a harbour", response_format: "b64_json" }),
      },
    );
    expect(response.status).toBeGreaterThanOrEqual(500);
    // Collected onchain: exactly the image's price, once.
    expect(await balanceOf(payer.address)).toBe(1_000_000n - 39_000n);
    expect(await balanceOf(treasury)).toBe(treasuryBefore + 39_000n);
    // Well past the longest call, with the sweeper running: the collection is on record and its
    // hold is still pending, not swept.
    await new Promise((resolve) => setTimeout(resolve, 4_000));
    db = openDatabase(env.TOLLGATE_DATA_DIR);
    const collected = db
      .prepare("SELECT id, hold_id, status, settled, tx_hash FROM x402_payments")
      .safeIntegers(true)
      .get() as { id: string; hold_id: string; status: string; settled: bigint; tx_hash: string };
    expect(collected).toMatchObject({ status: "collected", settled: 39_000n });
    expect(collected.tx_hash).toMatch(/^0x[0-9a-f]{64}$/);
    expect(
      db.prepare("SELECT COUNT(*) AS n FROM hold_resolutions WHERE hold_id = ?").get(collected.hold_id),
    ).toEqual({
      n: 0,
    });
    db.close();
    await first.stop("SIGKILL");
    db = openDatabase(env.TOLLGATE_DATA_DIR);
    db.exec("DROP TRIGGER refuse_settles");
    db.close();

    const second = await startGateway(env, 60_000);
    cleanups.push(() => second.stop("SIGTERM"));
    await until(
      "the collected payment to be settled",
      async () => {
        const check = openDatabase(env.TOLLGATE_DATA_DIR);
        try {
          const row = check.prepare("SELECT status FROM x402_payments WHERE id = ?").get(collected.id) as {
            status: string;
          };
          return row.status === "collected" ? undefined : row.status;
        } finally {
          check.close();
        }
      },
      30_000,
      () => second.stderr(),
    );
    expect(await second.stop("SIGTERM")).toBe(0);
    db = openDatabase(env.TOLLGATE_DATA_DIR);
    try {
      const row = db
        .prepare("SELECT status, settled, tx_hash FROM x402_payments WHERE id = ?")
        .safeIntegers(true)
        .get(collected.id);
      expect(row).toEqual({ status: "settled", settled: 39_000n, tx_hash: collected.tx_hash });
      const charged = db
        .prepare("SELECT status, amount FROM hold_resolutions WHERE hold_id = ?")
        .safeIntegers(true)
        .all(collected.hold_id);
      expect(charged).toEqual([{ status: "settled", amount: 39_000n }]);
      // Nothing more moved onchain: the charge was collected once.
      expect(await balanceOf(treasury)).toBe(treasuryBefore + 39_000n);
      expect(auditLedger(db)).toEqual([]);
    } finally {
      db.close();
    }
  }, 120_000);
});
