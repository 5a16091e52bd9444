import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { x402Client } from "@x402/core/client";
import { x402Facilitator } from "@x402/core/facilitator";
import {
  decodePaymentResponseHeader,
  decodePaymentSignatureHeader,
  encodePaymentRequiredHeader,
  encodePaymentResponseHeader,
} from "@x402/core/http";
import { x402ResourceServer } from "@x402/core/server";
import type { Network, PaymentRequirements, SupportedResponse } from "@x402/core/types";
import { toClientEvmSigner, toFacilitatorEvmSigner } from "@x402/evm";
import { ExactEvmScheme as ExactClient } from "@x402/evm/exact/client";
import { ExactEvmScheme as ExactFacilitator } from "@x402/evm/exact/facilitator";
import { ExactEvmScheme as ExactServer } from "@x402/evm/exact/server";
import { UptoEvmScheme as UptoClient } from "@x402/evm/upto/client";
import { UptoEvmScheme as UptoFacilitator } from "@x402/evm/upto/facilitator";
import { UptoEvmScheme as UptoServer } from "@x402/evm/upto/server";
import { declareEip2612GasSponsoringExtension } from "@x402/extensions";
import { wrapFetchWithPayment } from "@x402/fetch";
import { type Address, createPublicClient, createWalletClient, http, parseAbi, publicActions } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type EvmDevChain, startEvmDevChain } from "../../../src/dev/chains/evm/dev-chain.js";
import {
  PERMIT2_ADDRESS,
  permit2DomainSeparator,
  UPTO_PROXY_ADDRESS,
} from "../../../src/dev/chains/evm/x402-contracts.js";

// The dev chains carry what x402 needs (src/dev/chains/evm/x402-contracts.ts): x402's own
// packages pay and settle on them, and the tokens move — read from the chain, never taken from
// the facilitator's word (without Permit2 and the upto proxy, an upto settle "succeeds" with a
// transaction that moves nothing). The HTTP server here is the x402 packages' resource server,
// the smallest one that serves a payment: the gateway's own is tested in its e2e tests.

const ERC20 = parseAbi([
  "function balanceOf(address) view returns (uint256)",
  "function allowance(address, address) view returns (uint256)",
]);

let dev: EvmDevChain;
let server: Server;
let base: string;
const payer = privateKeyToAccount(generatePrivateKey());
const payTo = privateKeyToAccount(generatePrivateKey()).address;
const facilitatorAccount = privateKeyToAccount(generatePrivateKey());

beforeAll(async () => {
  dev = await startEvmDevChain({ id: "base", chainId: 8453 });
  const network = `eip155:${dev.chainId}` as Network;
  await dev.fundGas(facilitatorAccount.address);
  await dev.mintTo(payer.address, 10_000_000n);
  const chain = {
    id: dev.chainId,
    name: "dev base",
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    rpcUrls: { default: { http: [dev.rpcUrl] } },
  };
  const wallet = createWalletClient({
    account: facilitatorAccount,
    chain,
    transport: http(dev.rpcUrl),
  }).extend(publicActions);
  const signer = toFacilitatorEvmSigner({ ...wallet, address: facilitatorAccount.address } as Parameters<
    typeof toFacilitatorEvmSigner
  >[0]);
  const facilitator = new x402Facilitator()
    .register(network, new ExactFacilitator(signer))
    .register(network, new UptoFacilitator(signer));
  const resources = new x402ResourceServer({
    verify: (payload, requirements) => facilitator.verify(payload, requirements),
    settle: (payload, requirements) => facilitator.settle(payload, requirements),
    // Its getSupported answers at once; a facilitator client's returns a promise.
    getSupported: async () => facilitator.getSupported() as SupportedResponse,
  })
    .register(network, new ExactServer())
    .register(network, new UptoServer());
  await resources.initialize();
  // The dev token's EIP-712 domain: name "Test USD", version "2" (contracts/TestStablecoin.sol).
  const price = (amount: string) => ({ asset: dev.token, amount, extra: { name: "Test USD", version: "2" } });
  const offers: Record<string, PaymentRequirements[]> = {
    "/exact": await resources.buildPaymentRequirements({
      scheme: "exact",
      network,
      payTo,
      price: price("10000"),
      maxTimeoutSeconds: 120,
    }),
    "/upto": await resources.buildPaymentRequirements({
      scheme: "upto",
      network,
      payTo,
      price: price("50000"),
      maxTimeoutSeconds: 120,
    }),
  };
  server = createServer(async (req, res) => {
    const accepts = offers[req.url ?? ""]!;
    const signature = req.headers["payment-signature"];
    if (typeof signature !== "string") {
      const required = await resources.createPaymentRequiredResponse(
        accepts,
        { url: `${base}${req.url}` },
        "Payment required",
        req.url === "/upto" ? declareEip2612GasSponsoringExtension() : undefined,
      );
      res.writeHead(402, { "payment-required": encodePaymentRequiredHeader(required) }).end();
      return;
    }
    const payload = decodePaymentSignatureHeader(signature);
    const requirements = resources.findMatchingRequirements(accepts, payload)!;
    const verified = await resources.verifyPayment(payload, requirements);
    if (!verified.isValid) {
      res.writeHead(402).end(JSON.stringify(verified));
      return;
    }
    // upto: settle what was "delivered", less than the authorised maximum.
    const settled = await resources.settlePayment(
      payload,
      requirements,
      undefined,
      undefined,
      req.url === "/upto" ? { amount: "1234" } : undefined,
    );
    res
      .writeHead(settled.success ? 200 : 402, { "payment-response": encodePaymentResponseHeader(settled) })
      .end();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}, 60_000);

afterAll(async () => {
  server?.close();
  await dev?.close();
});

describe("x402 on a dev chain", () => {
  it("has Permit2 (its domain separator for this chain) and the upto proxy at their canonical addresses", async () => {
    const client = createPublicClient({ transport: http(dev.rpcUrl) });
    const separator = await client.readContract({
      address: PERMIT2_ADDRESS,
      abi: parseAbi(["function DOMAIN_SEPARATOR() view returns (bytes32)"]),
      functionName: "DOMAIN_SEPARATOR",
    });
    expect(separator).toBe(permit2DomainSeparator(8453));
    const proxyPermit2 = await client.readContract({
      address: UPTO_PROXY_ADDRESS,
      abi: parseAbi(["function PERMIT2() view returns (address)"]),
      functionName: "PERMIT2",
    });
    expect(proxyPermit2).toBe(PERMIT2_ADDRESS);
  });

  it("settles an exact payment and an upto payment below its maximum, moving exactly those tokens", async () => {
    const client = createPublicClient({ transport: http(dev.rpcUrl) });
    const balance = (address: Address) =>
      client.readContract({ address: dev.token, abi: ERC20, functionName: "balanceOf", args: [address] });
    const network = `eip155:${dev.chainId}` as Network;
    const signer = toClientEvmSigner(payer, client as Parameters<typeof toClientEvmSigner>[1]);
    const payments = new x402Client()
      .register(network, new ExactClient(signer))
      .register(network, new UptoClient(signer, { rpcUrl: dev.rpcUrl }))
      .setSpendControls({ allowedAssets: [{ network, asset: dev.token }] });
    const pay = wrapFetchWithPayment(fetch, payments);

    const exact = await pay(`${base}/exact`);
    expect(exact.status).toBe(200);
    expect(decodePaymentResponseHeader(exact.headers.get("payment-response")!)).toMatchObject({
      success: true,
    });
    expect(await balance(payer.address)).toBe(10_000_000n - 10_000n);
    expect(await balance(payTo)).toBe(10_000n);

    const upto = await pay(`${base}/upto`);
    expect(upto.status).toBe(200);
    const response = decodePaymentResponseHeader(upto.headers.get("payment-response")!);
    expect(response).toMatchObject({ success: true });
    // 1,234 moved, not the 50,000 authorised; the rest of the Permit2 allowance was never taken.
    expect(await balance(payer.address)).toBe(10_000_000n - 10_000n - 1_234n);
    expect(await balance(payTo)).toBe(11_234n);
    const receipt = await client.getTransactionReceipt({ hash: response.transaction as `0x${string}` });
    expect(receipt.status).toBe("success");
  });
});
