import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { x402Client } from "@x402/core/client";
import { x402Facilitator } from "@x402/core/facilitator";
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from "@x402/core/http";
import type { Network } from "@x402/core/types";
import { toClientEvmSigner, toFacilitatorEvmSigner } from "@x402/evm";
import { ExactEvmScheme as ExactClient } from "@x402/evm/exact/client";
import { ExactEvmScheme as ExactFacilitator } from "@x402/evm/exact/facilitator";
import { UptoEvmScheme as UptoFacilitator } from "@x402/evm/upto/facilitator";
import { wrapFetchWithPayment } from "@x402/fetch";
import {
  type Address,
  bytesToHex,
  createPublicClient,
  createTestClient,
  createWalletClient,
  defineChain,
  getAddress,
  http,
  parseEther,
  publicActions,
} from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eip3009Abi } from "../../src/chains/evm/evm-adapter.js";
import { treasurySeed, x402FacilitatorSeed } from "../../src/chains/keys.js";
import { DEV_MASTER_SECRET, readDevChainsFile, requestFaucet } from "../../src/dev/chains/dev-chains-file.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { type GatewayProcess, startGateway, tempDir, until } from "../helpers/process.js";

// TOLLGATE_X402_FACILITATOR_URL: an operator's own x402 facilitator verifies and settles the
// payments instead of the gateway's. Here it is x402's x402Facilitator behind the three HTTP
// routes x402's facilitator client calls (/supported, /verify, /settle), signing with a key of
// its own; the gateway's built-in facilitator key must never send a transaction.

const NETWORK = "eip155:8453" as Network;

let dir: ReturnType<typeof tempDir>;
let gateway: GatewayProcess;
let facilitatorServer: Server;
const facilitatorCalls: string[] = [];
const facilitatorAccount = privateKeyToAccount(generatePrivateKey());
const payer = privateKeyToAccount(generatePrivateKey());
let rpcUrl = "";
let token: Address;

/**
 * The facilitator, built on its first request: the dev chains it settles on are started by the
 * gateway, which asks for /supported as it starts (after its dev chains are up).
 */
let facilitator: Promise<x402Facilitator> | undefined;
function facilitatorFor(dataDir: string): Promise<x402Facilitator> {
  facilitator ??= (async () => {
    const chain = readDevChainsFile(dataDir)!.registry.byId.get("base")!;
    rpcUrl = chain.rpcUrl;
    token = getAddress(chain.asset.address);
    await createTestClient({ mode: "anvil", transport: http(rpcUrl) }).setBalance({
      address: facilitatorAccount.address,
      value: parseEther("10"),
    });
    const wallet = createWalletClient({
      account: facilitatorAccount,
      chain: defineChain({
        id: 8453,
        name: "dev base",
        nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
        rpcUrls: { default: { http: [rpcUrl] } },
      }),
      transport: http(rpcUrl),
      pollingInterval: 100,
    }).extend(publicActions);
    const signer = toFacilitatorEvmSigner({ ...wallet, address: facilitatorAccount.address } as Parameters<
      typeof toFacilitatorEvmSigner
    >[0]);
    return new x402Facilitator()
      .register(NETWORK, new ExactFacilitator(signer))
      .register(NETWORK, new UptoFacilitator(signer));
  })();
  return facilitator;
}

const balanceOf = async (address: Address): Promise<bigint> =>
  await createPublicClient({ transport: http(rpcUrl) }).readContract({
    address: token,
    abi: eip3009Abi,
    functionName: "balanceOf",
    args: [address],
  });

beforeAll(async () => {
  dir = tempDir();
  facilitatorServer = createServer(async (req, res) => {
    facilitatorCalls.push(`${req.method} ${req.url}`);
    let body = "";
    for await (const chunk of req) body += chunk;
    const local = await facilitatorFor(dir.path);
    const answer = (status: number, value: unknown) =>
      res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(value));
    try {
      if (req.url === "/supported") return answer(200, local.getSupported());
      const { paymentPayload, paymentRequirements } = JSON.parse(body);
      if (req.url === "/verify") return answer(200, await local.verify(paymentPayload, paymentRequirements));
      if (req.url === "/settle") return answer(200, await local.settle(paymentPayload, paymentRequirements));
      answer(404, { error: "no such route" });
    } catch (error) {
      answer(500, { error: String(error) });
    }
  });
  await new Promise<void>((resolve) => facilitatorServer.listen(0, "127.0.0.1", resolve));
  const facilitatorUrl = `http://127.0.0.1:${(facilitatorServer.address() as AddressInfo).port}`;
  gateway = await startGateway(
    {
      TOLLGATE_DATA_DIR: dir.path,
      TOLLGATE_DEV_CHAINS: "on",
      TOLLGATE_X402_FACILITATOR_URL: facilitatorUrl,
    },
    60_000,
  );
  const dev = readDevChainsFile(dir.path)!;
  await requestFaucet(dev.faucetUrl, "base", payer.address, 1_000_000n);
  await until("the payer's test funds", async () =>
    (await balanceOf(payer.address)) === 1_000_000n ? true : undefined,
  );
}, 90_000);

afterAll(async () => {
  await gateway?.stop("SIGTERM");
  facilitatorServer?.close();
  if (dir !== undefined) {
    const db = openDatabase(dir.path);
    try {
      expect(auditLedger(db)).toEqual([]);
    } finally {
      db.close();
    }
    dir.cleanup();
  }
});

describe("x402 through the operator's facilitator", () => {
  it("verifies and settles through TOLLGATE_X402_FACILITATOR_URL; the payment reaches the treasury", async () => {
    expect(facilitatorCalls).toContain("GET /supported");
    // Offered only where the operator's facilitator settles: base.
    const unpaid = await fetch(`${gateway.facadeUrl}/x402/v1/images/generations`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "image-2", prompt: "a harbour" }),
    });
    expect(unpaid.status).toBe(402);
    const offer = decodePaymentRequiredHeader(unpaid.headers.get("payment-required")!);
    expect(offer.accepts.map((a) => `${a.scheme} ${a.network}`)).toEqual(["exact eip155:8453"]);
    const treasury = privateKeyToAccount(bytesToHex(treasurySeed(DEV_MASTER_SECRET, "evm"))).address;
    const treasuryBefore = await balanceOf(treasury);
    const signer = toClientEvmSigner(payer, createPublicClient({ transport: http(rpcUrl) }));
    const client = new x402Client()
      .register(NETWORK, new ExactClient(signer))
      .setSpendControls({ allowedAssets: [{ network: NETWORK, asset: token }] });
    const response = await wrapFetchWithPayment(fetch, client)(
      `${gateway.facadeUrl}/x402/v1/images/generations`,
      {
        method: "POST",
        headers: { "content-type": "application/json", "x-gateway-billing-chain": "base" },
        body: JSON.stringify({ model: "image-2", prompt: "a harbour" }),
      },
    );
    expect(response.status, await response.clone().text()).toBe(200);
    const settled = decodePaymentResponseHeader(response.headers.get("payment-response")!);
    expect(settled.success).toBe(true);
    expect(facilitatorCalls).toEqual(expect.arrayContaining(["POST /verify", "POST /settle"]));
    expect(await balanceOf(payer.address)).toBe(1_000_000n - 39_000n);
    expect(await balanceOf(treasury)).toBe(treasuryBefore + 39_000n);
    // The collecting transaction was the operator facilitator's, not the gateway's own key's.
    const publicClient = createPublicClient({ transport: http(rpcUrl) });
    const tx = await publicClient.getTransaction({ hash: settled.transaction as `0x${string}` });
    expect(getAddress(tx.from)).toBe(facilitatorAccount.address);
    const builtIn = privateKeyToAccount(bytesToHex(x402FacilitatorSeed(DEV_MASTER_SECRET, "evm"))).address;
    expect(await publicClient.getTransactionCount({ address: builtIn })).toBe(0);
  });
});
