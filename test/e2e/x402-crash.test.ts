import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { x402Client } from "@x402/core/client";
import type { Network } from "@x402/core/types";
import { toClientEvmSigner } from "@x402/evm";
import { ExactEvmScheme as ExactClient } from "@x402/evm/exact/client";
import { UptoEvmScheme as UptoClient } from "@x402/evm/upto/client";
import { wrapFetchWithPayment } from "@x402/fetch";
import { type Address, bytesToHex, createPublicClient, type Hash, http } from "viem";
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

// kill -9 after the chain took a collection and before the gateway recorded it: the proxy lets
// the collecting transaction through, waits until it is mined, then kills the gateway before it
// hears the chain's answer. The payment was marked as being collected before the facilitator
// was asked, so its hold is not swept; after a restart the recovery pass asks the chain, finds
// the collection, records it with its transaction and settles the call's ledger once.

/** A dev chain behind a proxy that kills the gateway once its first collection is mined. */
async function killedOnceMined(secretHex: string) {
  const dev: EvmDevChain = await startEvmDevChain({ id: "base", chainId: 8453 });
  cleanups.push(() => dev.close());
  const upstream = await startDevUpstream({});
  cleanups.push(() => upstream.close());
  const chain = createPublicClient({ transport: http(dev.rpcUrl) });
  const rig = {
    gateway: undefined as GatewayProcess | undefined,
    armed: true,
    /** The collecting transaction the killed gateway sent and never heard back about. */
    sent: undefined as Hash | undefined,
  };
  const proxy = await rpcProxy(dev.rpcUrl, async (phase, answer) => {
    if (phase !== "after" || !rig.armed || rig.gateway === undefined) return false;
    rig.armed = false;
    const sent = (JSON.parse(answer!) as { result: Hash }).result;
    rig.sent = sent;
    await until("the collection to be mined", async () =>
      (await chain.getTransactionReceipt({ hash: sent }).catch(() => undefined))?.status === "success"
        ? true
        : undefined,
    );
    await rig.gateway.stop("SIGKILL");
    return true;
  });
  cleanups.push(() => new Promise((resolve) => proxy.close(resolve)));
  const dir = tempDir();
  cleanups.push(dir.cleanup);
  const secret = new Uint8Array(Buffer.from(secretHex, "hex"));
  const chainsFile = join(dir.path, "chains.json");
  writeChainsFile(chainsFile, dev, `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`);
  const env = {
    TOLLGATE_DATA_DIR: join(dir.path, "data"),
    TOLLGATE_CHAINS: chainsFile,
    TOLLGATE_DEV_CHAINS: "auto",
    TOLLGATE_MASTER_SECRET: secretHex,
    TOLLGATE_ANTHROPIC_URL: upstream.url,
    // The sweeper runs often and expires holds fast: it must leave one being collected alone.
    TOLLGATE_MAX_CALL_MS: "3000",
    TOLLGATE_UPSTREAM_RESPONSE_TIMEOUT_MS: "2000",
    TOLLGATE_HOLD_SWEEP_INTERVAL_MS: "300",
  };
  await dev.fundGas(privateKeyToAccount(bytesToHex(x402FacilitatorSeed(secret, "evm"))).address);
  const treasury = privateKeyToAccount(bytesToHex(treasurySeed(secret, "evm"))).address;
  const payer = privateKeyToAccount(generatePrivateKey());
  await dev.mintTo(payer.address, 2_000_000n);
  const balanceOf = async (address: Address) =>
    await chain.readContract({
      address: dev.token,
      abi: eip3009Abi,
      functionName: "balanceOf",
      args: [address],
    });
  const network = "eip155:8453" as Network;
  const signer = toClientEvmSigner(payer, chain);
  const client = new x402Client()
    .register(network, new ExactClient(signer))
    .register(network, new UptoClient(signer, { rpcUrl: dev.rpcUrl }))
    .setSpendControls({ allowedAssets: [{ network, asset: dev.token }] });
  return { dev, env, rig, treasury, payer, balanceOf, pay: wrapFetchWithPayment(fetch, client) };
}

/** The one x402 payment in the data directory, and its call's hold resolutions. */
function paymentIn(dataDir: string) {
  const db = openDatabase(dataDir);
  try {
    const payment = db.prepare("SELECT * FROM x402_payments").safeIntegers(true).get() as {
      id: string;
      hold_id: string;
      status: string;
      settled: bigint;
      tx_hash: string;
      collecting_at: bigint | null;
    };
    const resolutions = db
      .prepare("SELECT status, amount FROM hold_resolutions WHERE hold_id = ?")
      .safeIntegers(true)
      .all(payment.hold_id) as { status: string; amount: bigint }[];
    return { payment, resolutions };
  } finally {
    db.close();
  }
}

/** Restarts the gateway on `env` and waits until its recovery pass ended the open payment. */
async function recoverAfterRestart(env: Record<string, string>, paymentId: string): Promise<GatewayProcess> {
  const second = await startGateway(env, 60_000);
  cleanups.push(() => second.stop("SIGTERM"));
  await until(
    "the open payment to be ended",
    async () => {
      const db = openDatabase(env.TOLLGATE_DATA_DIR!);
      try {
        const row = db.prepare("SELECT status FROM x402_payments WHERE id = ?").get(paymentId) as {
          status: string;
        };
        return row.status === "authorised" || row.status === "collected" ? undefined : row.status;
      } finally {
        db.close();
      }
    },
    30_000,
    () => second.stderr(),
  );
  return second;
}

describe("x402 across a kill -9 after the chain took the collection, before the gateway recorded it", () => {
  it.each([
    {
      what: "an image (exact, EIP-3009)",
      path: "/x402/v1/images/generations",
      body: { model: "image-2", prompt: "a harbour", response_format: "b64_json" },
    },
    {
      what: "a non-streaming text answer (upto, Permit2)",
      path: "/x402/v1/messages",
      body: { model: "claude-haiku-4-5", max_tokens: 64, messages: [{ role: "user", content: "hello" }] },
    },
  ])(
    "settles $what once after a restart, with the transaction the chain took",
    async ({ path, body }) => {
      const { env, rig, treasury, payer, balanceOf, pay } = await killedOnceMined("7d".repeat(32));
      const first = await startGateway(env, 60_000);
      rig.gateway = first;
      cleanups.push(() => first.stop("SIGKILL"));
      const treasuryBefore = await balanceOf(treasury);
      const answer = await pay(`${first.facadeUrl}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      }).catch((error: unknown) => error);
      // Killed while its collection was in flight: the client got no answer.
      expect(answer, `${String(answer)} ${first.stderr()}`).toBeInstanceOf(Error);
      await until("the gateway to be killed", async () =>
        first.child.signalCode !== null ? true : undefined,
      );
      expect(first.child.signalCode).toBe("SIGKILL");
      expect(rig.sent).toMatch(/^0x[0-9a-f]{64}$/);
      // The chain took it: the payer paid, exactly once.
      const collected = (await balanceOf(treasury)) - treasuryBefore;
      expect(collected).toBeGreaterThan(0n);
      expect(await balanceOf(payer.address)).toBe(2_000_000n - collected);
      // The gateway heard nothing: the payment is still authorised, marked as being collected,
      // and its call's hold is pending. Well past the longest call, nothing runs to sweep it.
      const before = paymentIn(env.TOLLGATE_DATA_DIR);
      expect(before.payment).toMatchObject({ status: "authorised", settled: 0n, tx_hash: "" });
      expect(before.payment.collecting_at).not.toBeNull();
      expect(before.resolutions).toEqual([]);

      const second = await recoverAfterRestart(env, before.payment.id);
      // Past another sweep, nothing more moves.
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      expect(await second.stop("SIGTERM")).toBe(0);
      const after = paymentIn(env.TOLLGATE_DATA_DIR);
      expect(after.payment).toMatchObject({ status: "settled", settled: collected, tx_hash: rig.sent });
      // The ledger charged the call once, at what the chain took.
      expect(after.resolutions).toEqual([{ status: "settled", amount: collected }]);
      expect(await balanceOf(treasury)).toBe(treasuryBefore + collected);
      expect(await balanceOf(payer.address)).toBe(2_000_000n - collected);
      const db = openDatabase(env.TOLLGATE_DATA_DIR);
      try {
        expect(auditLedger(db)).toEqual([]);
      } finally {
        db.close();
      }
    },
    120_000,
  );

  it("settles a stream whose collection was mined as the gateway was killed: its spent permit is found onchain, the payer owes nothing", async () => {
    const { env, rig, treasury, payer, balanceOf, pay } = await killedOnceMined("7e".repeat(32));
    const first = await startGateway(env, 60_000);
    rig.gateway = first;
    cleanups.push(() => first.stop("SIGKILL"));
    const treasuryBefore = await balanceOf(treasury);
    const message = (stream: boolean) => ({
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: "claude-haiku-4-5",
        max_tokens: 64,
        stream,
        messages: [{ role: "user", content: "hello" }],
      }),
    });
    const response = await pay(`${first.facadeUrl}/x402/v1/messages`, message(true));
    expect(response.status, `${await response.clone().text()} ${first.stderr()}`).toBe(200);
    // The whole stream arrives; its collection after it is mined, and the gateway killed.
    expect(await response.text()).toContain("event: message_stop");
    await until("the gateway to be killed once its collection is mined", async () =>
      first.child.signalCode !== null ? true : undefined,
    );
    const collected = (await balanceOf(treasury)) - treasuryBefore;
    expect(collected).toBeGreaterThan(0n);
    const before = paymentIn(env.TOLLGATE_DATA_DIR);
    expect(before.payment).toMatchObject({ status: "authorised", tx_hash: "" });
    expect(before.payment.collecting_at).not.toBeNull();
    // The stream's charge was settled in the ledger before its collection.
    expect(before.resolutions).toEqual([{ status: "settled", amount: collected }]);

    // The recovery pass collects a charged stream: its permit is spent, so the chain refuses.
    // It must find the collection that spent it, not close the payment failed and the payer owing.
    const second = await recoverAfterRestart(env, before.payment.id);
    const after = paymentIn(env.TOLLGATE_DATA_DIR);
    expect(after.payment).toMatchObject({ status: "settled", settled: collected, tx_hash: rig.sent });
    expect(after.resolutions).toEqual([{ status: "settled", amount: collected }]);
    expect(await balanceOf(treasury)).toBe(treasuryBefore + collected);
    expect(await balanceOf(payer.address)).toBe(2_000_000n - collected);
    // Not owing: its next call is served.
    const next = await pay(`${second.facadeUrl}/x402/v1/messages`, message(false));
    expect(next.status, await next.clone().text()).toBe(200);
    expect(await second.stop("SIGTERM")).toBe(0);
    const db = openDatabase(env.TOLLGATE_DATA_DIR);
    try {
      expect(db.prepare("SELECT COUNT(*) AS n FROM x402_payments WHERE status = 'failed'").get()).toEqual({
        n: 0,
      });
      expect(auditLedger(db)).toEqual([]);
    } finally {
      db.close();
    }
  }, 120_000);
});
