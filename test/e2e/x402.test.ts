import { createPublicKey, verify } from "node:crypto";
import Anthropic from "@anthropic-ai/sdk";
import { generateKeyPairSigner } from "@solana/kit";
import { getAssociatedTokenAddressSync } from "@solana/spl-token";
import { Connection, PublicKey } from "@solana/web3.js";
import { x402Client, x402HTTPClient } from "@x402/core/client";
import {
  decodePaymentRequiredHeader,
  decodePaymentResponseHeader,
  encodePaymentSignatureHeader,
} from "@x402/core/http";
import type { Network, PaymentRequired } from "@x402/core/types";
import { toClientEvmSigner } from "@x402/evm";
import { ExactEvmScheme as ExactClient } from "@x402/evm/exact/client";
import { UptoEvmScheme as UptoClient } from "@x402/evm/upto/client";
import {
  createSIWxClientHook,
  isSolanaSigner,
  type SIWxSigner,
  wrapFetchWithSIWx,
} from "@x402/extensions/sign-in-with-x";
import { wrapFetchWithPayment } from "@x402/fetch";
import { toClientSvmSigner } from "@x402/svm";
import { ExactSvmScheme as ExactSvmClient } from "@x402/svm/exact/client";
import { compactVerify, importJWK } from "jose";
import { type Address, bytesToHex, createPublicClient, getAddress, http } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eip3009Abi } from "../../src/chains/evm/evm-adapter.js";
import { treasurySeed } from "../../src/chains/keys.js";
import { solanaTreasuryKeypair } from "../../src/chains/solana/keys.js";
import { DEV_SOLANA_NETWORK } from "../../src/dev/chains/dev-chains.js";
import { DEV_MASTER_SECRET, readDevChainsFile, requestFaucet } from "../../src/dev/chains/dev-chains-file.js";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { smallPng } from "../helpers/image-fixtures.js";
import { type GatewayProcess, startGateway, tempDir, until } from "../helpers/process.js";

// x402 end to end (docs/x402.md): `tollgate dev` on its dev chains, paid by x402's own client
// (@x402/fetch over @x402/evm's exact and upto schemes) with no account and no key. Every
// amount that moved is read from the chain, never taken from the facilitator's word; the
// ledger's audit (conservation, and each payment's credit and return) runs at the end, and the
// treasury's onchain balance must equal what the ledger says x402 collected.

const NETWORK = "eip155:8453" as Network;
/** The dev upstream's stream pauses this long before its last events (see the stream test). */
const PAUSE_MS = 800;

let dir: ReturnType<typeof tempDir>;
let upstream: DevUpstream;
let gateway: GatewayProcess;
let token: Address;
let rpcUrl: string;
let base: string;
const payer = privateKeyToAccount(generatePrivateKey());
const treasury = privateKeyToAccount(bytesToHex(treasurySeed(DEV_MASTER_SECRET, "evm"))).address;
let treasuryAtStart = 0n;
let solanaTreasuryAtStart = 0n;

const balanceOf = async (address: Address): Promise<bigint> =>
  await createPublicClient({ transport: http(rpcUrl) }).readContract({
    address: token,
    abi: eip3009Abi,
    functionName: "balanceOf",
    args: [address],
  });

/** x402's client for the payer, on the dev base chain's test token. */
function payingClient(): x402Client {
  const signer = toClientEvmSigner(payer, createPublicClient({ transport: http(rpcUrl) }));
  return new x402Client()
    .register(NETWORK, new ExactClient(signer))
    .register(NETWORK, new UptoClient(signer, { rpcUrl }))
    .setSpendControls({ allowedAssets: [{ network: NETWORK, asset: token }] });
}

const messages = (maxTokens: number, stream = false) =>
  JSON.stringify({
    model: "claude-haiku-4-5",
    max_tokens: maxTokens,
    stream,
    messages: [{ role: "user", content: "hello" }],
  });

/** An image edit's multipart form: one reference image, answered as base64. */
function editForm(): FormData {
  const form = new FormData();
  form.set("model", "image-2");
  form.set("prompt", "make it blue");
  form.set("response_format", "b64_json");
  form.set("image", new Blob([smallPng()], { type: "image/png" }), "a.png");
  return form;
}

/** An unpaid call's 402 and its decoded PAYMENT-REQUIRED offer. */
async function offerFor(body: string, headers: Record<string, string> = {}) {
  const response = await fetch(`${base}/x402/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body,
  });
  const header = response.headers.get("payment-required");
  return { response, required: header === null ? undefined : decodePaymentRequiredHeader(header) };
}

beforeAll(async () => {
  dir = tempDir();
  upstream = await startDevUpstream({
    // Streams pause before their end, so a relay that buffered would deliver nothing early.
    script: (request) => {
      const body = request.body as { stream?: boolean } | undefined;
      if (body?.stream !== true) return undefined;
      return {
        kind: "stream",
        events: [
          {
            event: "message_start",
            data: {
              type: "message_start",
              message: {
                id: "msg_x402",
                type: "message",
                role: "assistant",
                model: "claude-haiku-4-5",
                content: [],
                stop_reason: null,
                stop_sequence: null,
                usage: { input_tokens: 12, output_tokens: 1 },
              },
            },
          },
          {
            event: "content_block_start",
            data: { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
          },
          {
            event: "content_block_delta",
            data: {
              type: "content_block_delta",
              index: 0,
              delta: { type: "text_delta", text: "Paid per call." },
            },
          },
          { event: "content_block_stop", data: { type: "content_block_stop", index: 0 }, delayMs: PAUSE_MS },
          {
            event: "message_delta",
            data: {
              type: "message_delta",
              delta: { stop_reason: "end_turn", stop_sequence: null },
              usage: { output_tokens: 5 },
            },
          },
          { event: "message_stop", data: { type: "message_stop" } },
        ],
      };
    },
  });
  gateway = await startGateway(
    {
      TOLLGATE_DATA_DIR: dir.path,
      TOLLGATE_DEV_CHAINS: "on",
      TOLLGATE_ANTHROPIC_URL: upstream.url,
      TOLLGATE_CHAIN_POLL_MS: "100",
    },
    60_000,
  );
  base = gateway.facadeUrl;
  const dev = readDevChainsFile(dir.path)!;
  const chain = dev.registry.byId.get("base")!;
  token = getAddress(chain.asset.address);
  rpcUrl = chain.rpcUrl;
  await requestFaucet(dev.faucetUrl, "base", payer.address, 5_000_000n);
  await until("the payer's test funds", async () =>
    (await balanceOf(payer.address)) === 5_000_000n ? true : undefined,
  );
  treasuryAtStart = await balanceOf(treasury);
  solanaTreasuryAtStart = await solanaTreasuryTokens();
}, 90_000);

afterAll(async () => {
  await gateway?.stop("SIGTERM");
  await upstream?.close();
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

describe("x402 on the billed routes", () => {
  it("answers a call with neither key nor payment 402, with an offer on each EVM chain and the route's envelope", async () => {
    const forwarded = upstream.requests.length;
    const { response, required } = await offerFor(messages(100));
    expect(response.status).toBe(402);
    const body = (await response.json()) as { type: string; error: { type: string; message: string } };
    expect(body.type).toBe("error");
    expect(body.error.type).toBe("billing_error");
    expect(body.error.message).toMatch(/x402/);
    expect(required?.x402Version).toBe(2);
    expect(required?.resource.url).toBe(`${base}/x402/v1/messages`);
    const networks = required!.accepts.map((a) => a.network).sort();
    expect(networks).toEqual(["eip155:42161", "eip155:4663", "eip155:8453"].sort());
    for (const offer of required!.accepts) {
      expect(offer.scheme).toBe("upto");
      expect(offer.payTo).toBe(treasury);
      expect(BigInt(offer.amount)).toBeGreaterThan(0n);
    }
    expect(required!.extensions).toHaveProperty("eip2612GasSponsoring");
    // Images are offered on Solana too (exact), text only where upto runs (EVM).
    const image = await fetch(`${base}/x402/v1/images/generations`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "image-2", prompt: "a harbour" }),
    });
    expect(image.status).toBe(402);
    const imageOffer = decodePaymentRequiredHeader(image.headers.get("payment-required")!);
    expect(imageOffer.accepts.map((a) => `${a.scheme} ${a.network}`).sort()).toEqual(
      ["exact eip155:42161", "exact eip155:4663", "exact eip155:8453", `exact ${DEV_SOLANA_NETWORK}`].sort(),
    );
    // Naming a chain narrows the offer to it.
    const named = await offerFor(messages(100), { "x-gateway-billing-chain": "arbitrum" });
    expect(named.required!.accepts.map((a) => a.network)).toEqual(["eip155:42161"]);
    // Text names a chain upto does not run on: no offer, and the answer says why.
    const solanaText = await offerFor(messages(100), { "x-gateway-billing-chain": "solana" });
    expect(solanaText.response.status).toBe(402);
    expect(solanaText.required!.accepts).toEqual([]);
    expect(((await solanaText.response.json()) as { error: { message: string } }).error.message).toMatch(
      /No x402 payment is taken on solana for \/x402\/v1\/messages/,
    );
    expect(upstream.requests.length).toBe(forwarded);
  });

  it("answers a call without a key on /v1 401 in each format's envelope, even with a payment: x402 has its own door", async () => {
    const forwarded = upstream.requests.length;
    const { required } = await offerFor(messages(50));
    const payment = encodePaymentSignatureHeader(
      await payingClient().createPaymentPayload(onlyBase(required!)),
    );
    for (const headers of [{}, { "payment-signature": payment }] as Record<string, string>[]) {
      const text = await fetch(`${base}/v1/messages`, {
        method: "POST",
        headers: { "content-type": "application/json", ...headers },
        body: messages(50),
      });
      expect(text.status).toBe(401);
      expect(text.headers.get("x-request-id")).toMatch(/^req_/);
      expect(text.headers.get("payment-required")).toBeNull();
      const body = (await text.json()) as { type: string; error: { type: string } };
      expect(body).toMatchObject({ type: "error", error: { type: "authentication_error" } });
      const image = await fetch(`${base}/v1/images/generations`, {
        method: "POST",
        headers: { "content-type": "application/json", ...headers },
        body: JSON.stringify({ model: "image-2", prompt: "a harbour" }),
      });
      expect(image.status).toBe(401);
      expect(image.headers.get("x-request-id")).toMatch(/^req_/);
      expect(((await image.json()) as { error: { type: string } }).error.type).toBe("authentication_error");
      const edit = await fetch(`${base}/v1/images/edits`, { method: "POST", headers, body: editForm() });
      expect(edit.status).toBe(401);
      expect(edit.headers.get("x-request-id")).toMatch(/^req_/);
      expect(edit.headers.get("payment-required")).toBeNull();
      expect(((await edit.json()) as { error: { type: string } }).error.type).toBe("authentication_error");
    }
    expect(upstream.requests.length).toBe(forwarded);
    // The door pays for calls and nothing else.
    const count = await fetch(`${base}/x402/v1/messages/count_tokens`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: messages(50),
    });
    expect(count.status).toBe(404);
  });

  it("serves the official Anthropic SDK at baseURL {origin}/x402 with an x402-wrapped fetch; the SDK's key is ignored", async () => {
    const forwarded = upstream.requests.length;
    const client = new Anthropic({
      baseURL: `${base}/x402`,
      // The SDK insists on a key; the door never looks at it (a bogus one would be a 401 on /v1).
      apiKey: "tg_not_a_key",
      fetch: wrapFetchWithPayment(fetch, payingClient()),
      maxRetries: 0,
    });
    const { data: message, response } = await client.messages
      .create({ model: "claude-haiku-4-5", max_tokens: 64, messages: [{ role: "user", content: "hello" }] })
      .withResponse();
    expect(message.type).toBe("message");
    expect(response.headers.get("payment-response")).not.toBeNull();
    expect(upstream.requests.length).toBe(forwarded + 1);
    // The key went nowhere: the provider saw the gateway's own credentials only.
    expect(JSON.stringify(upstream.requests.at(-1))).not.toContain("tg_not_a_key");
  });

  it("pays an image with exact at its listed price, collected onchain before it is handed over", async () => {
    const paidFetch = wrapFetchWithPayment(fetch, payingClient());
    const before = await balanceOf(payer.address);
    const treasuryBefore = await balanceOf(treasury);
    const response = await paidFetch(`${base}/x402/v1/images/generations`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "image-2", prompt: "a harbour", response_format: "b64_json" }),
    });
    expect(response.status, await response.clone().text()).toBe(200);
    const settled = decodePaymentResponseHeader(response.headers.get("payment-response")!);
    expect(settled.success).toBe(true);
    expect(settled.transaction).toMatch(/^0x[0-9a-f]{64}$/);
    const image = (await response.json()) as { data: { b64_json: string }[] };
    expect(image.data[0]!.b64_json.length).toBeGreaterThan(100);
    // image-2 at 1K lists $0.039: exactly that moved from the payer to the treasury.
    expect(await balanceOf(payer.address)).toBe(before - 39_000n);
    expect(await balanceOf(treasury)).toBe(treasuryBefore + 39_000n);
    await expectVerifiedReceipt(response.headers.get("x-request-id")!, {
      charge: "39000",
      status: "settled",
      transaction: settled.transaction,
    });
  });

  it("pays an image edit (multipart) on the door with exact at its offered price, collected before it is handed over", async () => {
    const unpaid = await fetch(`${base}/x402/v1/images/edits`, { method: "POST", body: editForm() });
    expect(unpaid.status).toBe(402);
    expect(((await unpaid.json()) as { error: { type: string } }).error.type).toBe("billing_error");
    const offer = onlyBase(decodePaymentRequiredHeader(unpaid.headers.get("payment-required")!));
    expect(offer.accepts.map((a) => a.scheme)).toEqual(["exact"]);
    const price = BigInt(offer.accepts[0]!.amount);
    expect(price).toBeGreaterThan(0n);
    const before = await balanceOf(payer.address);
    const treasuryBefore = await balanceOf(treasury);
    const response = await wrapFetchWithPayment(fetch, payingClient())(`${base}/x402/v1/images/edits`, {
      method: "POST",
      // A key sent to the door is ignored, never checked (a bogus one would be a 401 on /v1).
      headers: { authorization: "Bearer tg_not_a_key" },
      body: editForm(),
    });
    expect(response.status, await response.clone().text()).toBe(200);
    const settled = decodePaymentResponseHeader(response.headers.get("payment-response")!);
    expect(settled.success).toBe(true);
    expect(settled.transaction).toMatch(/^0x[0-9a-f]{64}$/);
    const image = (await response.json()) as { data: { b64_json: string }[] };
    expect(image.data[0]!.b64_json.length).toBeGreaterThan(100);
    // Exactly the offered price moved, once, before the answer: read from the chain.
    expect(await balanceOf(payer.address)).toBe(before - price);
    expect(await balanceOf(treasury)).toBe(treasuryBefore + price);
    await expectVerifiedReceipt(response.headers.get("x-request-id")!, {
      charge: `${price}`,
      status: "settled",
      transaction: settled.transaction,
    });
  });

  it("pays an image on Solana with exact, through @x402/svm, into the treasury's token account", async () => {
    const dev = readDevChainsFile(dir.path)!;
    const solana = dev.registry.byId.get("solana")!;
    expect(solana.network).toBe(DEV_SOLANA_NETWORK);
    const solanaPayer = await generateKeyPairSigner();
    await requestFaucet(dev.faucetUrl, "solana", solanaPayer.address, 1_000_000n);
    const connection = new Connection(solana.rpcUrl, "confirmed");
    const mint = new PublicKey(solana.asset.address);
    const tokens = async (owner: string) => {
      const account = getAssociatedTokenAddressSync(mint, new PublicKey(owner), true);
      return BigInt((await connection.getTokenAccountBalance(account)).value.amount);
    };
    await until("the Solana payer's test funds", async () =>
      (await tokens(solanaPayer.address).catch(() => 0n)) === 1_000_000n ? true : undefined,
    );
    const treasurySol = solanaTreasuryKeypair(DEV_MASTER_SECRET).publicKey.toBase58();
    const treasuryBefore = await tokens(treasurySol);
    const client = new x402Client()
      .register(
        DEV_SOLANA_NETWORK,
        new ExactSvmClient(toClientSvmSigner(solanaPayer), { rpcUrl: solana.rpcUrl }),
      )
      .setSpendControls({ allowedAssets: [{ network: DEV_SOLANA_NETWORK, asset: solana.asset.address }] });
    const response = await wrapFetchWithPayment(fetch, client)(`${base}/x402/v1/images/generations`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-gateway-billing-chain": "solana" },
      body: JSON.stringify({ model: "image-2", prompt: "a harbour" }),
    });
    expect(response.status, await response.clone().text()).toBe(200);
    expect(response.headers.get("x-gateway-billing-chain")).toBe("solana");
    const settled = decodePaymentResponseHeader(response.headers.get("payment-response")!);
    expect(settled.success).toBe(true);
    await until("the collection to be confirmed", async () =>
      (await tokens(treasurySol)) === treasuryBefore + 39_000n ? true : undefined,
    );
    expect(await tokens(solanaPayer.address)).toBe(1_000_000n - 39_000n);
    // @solana/kit's signer is the extension's SolanaKitSigner; only kit's branded types differ.
    const receipt = await receiptPayload(
      response.headers.get("x-request-id")!,
      solanaPayer as unknown as SIWxSigner,
    );
    expect(receipt).toMatchObject({
      payer: solanaPayer.address,
      accountId: `acct_x402_${solanaPayer.address}`,
      network: DEV_SOLANA_NETWORK,
      transaction: settled.transaction,
      x402: { scheme: "exact", status: "settled", collected: "39000" },
    });
  });

  it("streams a text call paid with upto event by event and collects only the delivered price", async () => {
    const paidFetch = wrapFetchWithPayment(fetch, payingClient());
    const forwarded = upstream.requests.length;
    const { required } = await offerFor(messages(4000, true));
    const authorised = BigInt(required!.accepts.find((a) => a.network === NETWORK)!.amount);
    const before = await balanceOf(payer.address);
    const treasuryBefore = await balanceOf(treasury);
    const response = await paidFetch(`${base}/x402/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: messages(4000, true),
    });
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/);
    expect(response.headers.get("x-gateway-billing-chain")).toBe("base");
    const requestId = response.headers.get("request-id")!;
    // Read as it arrives: the delta is in hand while the provider still pauses before its end.
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    let text = "";
    let deltaAt: number | undefined;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
      if (deltaAt === undefined && text.includes("Paid per call.")) deltaAt = performance.now();
    }
    const endedAt = performance.now();
    expect(deltaAt).toBeDefined();
    expect(endedAt - deltaAt!).toBeGreaterThan(PAUSE_MS / 2);
    const events = [...text.matchAll(/^event: (\S+)$/gm)].map((m) => m[1]);
    expect(events).toEqual([
      "message_start",
      "content_block_start",
      "content_block_delta",
      "content_block_stop",
      "message_delta",
      "message_stop",
    ]);
    expect(upstream.requests.length).toBe(forwarded + 1);
    // The stream's collection runs after its end: its receipt says when it landed.
    const receipt = await until(
      "the stream's payment to be collected",
      async () => {
        const payload = await receiptPayload(requestId);
        return (payload.x402 as { status: string }).status === "authorised" ? undefined : payload;
      },
      30_000,
    );
    const charge = BigInt((receipt.charge as { amount: string }).amount);
    expect(charge).toBeGreaterThan(0n);
    expect(charge).toBeLessThan(authorised);
    expect(receipt.x402).toMatchObject({ scheme: "upto", status: "settled", collected: `${charge}` });
    expect(receipt.transaction).toMatch(/^0x[0-9a-f]{64}$/);
    // Onchain: the delivered price moved, and nothing of the unspent authorisation.
    expect(await balanceOf(payer.address)).toBe(before - charge);
    expect(await balanceOf(treasury)).toBe(treasuryBefore + charge);
  });

  it("answers a non-streaming upto call with its PAYMENT-RESPONSE and receipt headers", async () => {
    const paidFetch = wrapFetchWithPayment(fetch, payingClient());
    const before = await balanceOf(payer.address);
    const response = await paidFetch(`${base}/x402/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: messages(300),
    });
    expect(response.status).toBe(200);
    const settled = decodePaymentResponseHeader(response.headers.get("payment-response")!);
    expect(settled.success).toBe(true);
    const collected = BigInt(settled.amount!);
    expect(await balanceOf(payer.address)).toBe(before - collected);
    const [, payload] = response.headers.get("x-gateway-receipt")!.split(".");
    const signed = JSON.parse(Buffer.from(payload!, "base64url").toString()) as Record<string, unknown>;
    expect(signed).toMatchObject({
      payer: payer.address.toLowerCase(),
      transaction: settled.transaction,
      charge: { amount: `${collected}` },
    });
  });

  it("refuses a payment below the call's worst case: nothing forwarded, nothing collected", async () => {
    // Signed for a small call's worst case, then sent with a far larger max_tokens.
    const { required } = await offerFor(messages(16));
    const payment = await payingClient().createPaymentPayload(onlyBase(required!));
    const forwarded = upstream.requests.length;
    const before = await balanceOf(payer.address);
    const response = await fetch(`${base}/x402/v1/messages`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "payment-signature": encodePaymentSignatureHeader(payment),
      },
      body: messages(8000),
    });
    expect(response.status).toBe(402);
    const body = (await response.json()) as { error: { message: string } };
    expect(body.error.message).toMatch(/needs an authorisation of at least 0\.\d+ USDC? on base/);
    const fresh = decodePaymentRequiredHeader(response.headers.get("payment-required")!);
    expect(BigInt(onlyBase(fresh).accepts[0]!.amount)).toBeGreaterThan(BigInt(payment.accepted.amount));
    expect(upstream.requests.length).toBe(forwarded);
    expect(await balanceOf(payer.address)).toBe(before);
  });

  it("refuses a payment for another chain than the one named, and a replayed payment", async () => {
    const { required } = await offerFor(messages(50, true));
    const payment = await payingClient().createPaymentPayload(onlyBase(required!));
    const header = encodePaymentSignatureHeader(payment);
    const send = (headers: Record<string, string>) =>
      fetch(`${base}/x402/v1/messages`, {
        method: "POST",
        headers: { "content-type": "application/json", "payment-signature": header, ...headers },
        body: messages(50, true),
      });
    const forwarded = upstream.requests.length;
    const wrongChain = await send({ "x-gateway-billing-chain": "arbitrum" });
    expect(wrongChain.status).toBe(402);
    expect(((await wrongChain.json()) as { error: { message: string } }).error.message).toMatch(
      /payment is on base .* names arbitrum/,
    );
    expect(upstream.requests.length).toBe(forwarded);
    const before = await balanceOf(payer.address);
    // The first use streams (the provider pauses before its end); the same payment again while
    // it runs is refused by the ledger (the chain has not seen it yet), and again once it ran.
    const first = await send({});
    expect(first.status).toBe(200);
    const during = await send({});
    expect(during.status).toBe(402);
    expect(((await during.json()) as { error: { message: string } }).error.message).toMatch(
      /already presented/,
    );
    const firstText = await first.text();
    expect(firstText).toContain("event: message_stop");
    const requestId = first.headers.get("request-id")!;
    const receipt = await until("the first use's collection", async () => {
      const payload = await receiptPayload(requestId);
      return (payload.x402 as { status: string }).status === "authorised" ? undefined : payload;
    });
    const charge = BigInt((receipt.charge as { amount: string }).amount);
    const after = await send({});
    expect(after.status).toBe(402);
    expect(((await after.json()) as { error: { message: string } }).error.message).toMatch(
      /already presented|refused/,
    );
    expect(upstream.requests.length).toBe(forwarded + 1);
    expect(await balanceOf(payer.address)).toBe(before - charge);
  });

  it("reconciles: each treasury received exactly what the ledger says x402 collected on its chain", async () => {
    const db = openDatabase(dir.path);
    try {
      const collected = (chain: string) =>
        (
          db
            .prepare(
              "SELECT COALESCE(SUM(settled), 0) AS s FROM x402_payments WHERE status = 'settled' AND chain = ?",
            )
            .safeIntegers(true)
            .get(chain) as { s: bigint }
        ).s;
      const open = db
        .prepare("SELECT COUNT(*) AS n FROM x402_payments WHERE status = 'authorised'")
        .get() as {
        n: number;
      };
      expect(open.n).toBe(0);
      expect(collected("solana")).toBe(39_000n);
      expect(await balanceOf(treasury)).toBe(treasuryAtStart + collected("base"));
      expect(await solanaTreasuryTokens()).toBe(solanaTreasuryAtStart + collected("solana"));
      expect(auditLedger(db)).toEqual([]);
    } finally {
      db.close();
    }
  });
});

/** The Solana treasury's test tokens (its token account, opened by the gateway at start). */
async function solanaTreasuryTokens(): Promise<bigint> {
  const solana = readDevChainsFile(dir.path)!.registry.byId.get("solana")!;
  const account = getAssociatedTokenAddressSync(
    new PublicKey(solana.asset.address),
    solanaTreasuryKeypair(DEV_MASTER_SECRET).publicKey,
    true,
  );
  const balance = await new Connection(solana.rpcUrl, "confirmed").getTokenAccountBalance(account);
  return BigInt(balance.value.amount);
}

/** The offer on the dev base chain only (the client would otherwise pick among the chains). */
function onlyBase(required: PaymentRequired): PaymentRequired {
  return { ...required, accepts: required.accepts.filter((a) => a.network === NETWORK) };
}

/**
 * A keyless call's receipt payload, fetched at the x402 door by its payer signed in with x402's
 * sign-in-with-x (docs/receipts.md); its signature verified. An EVM wallet signs in with
 * `wrapFetchWithSIWx`; a Solana one through @x402/fetch with the extension's client hook, which
 * picks the challenge's Solana network (the wrapper signs for the first network offered, EVM).
 */
async function receiptPayload(
  requestId: string,
  signer: SIWxSigner = payer,
): Promise<Record<string, unknown>> {
  const signedIn = isSolanaSigner(signer)
    ? wrapFetchWithPayment(
        fetch,
        new x402HTTPClient(new x402Client()).onPaymentRequired(createSIWxClientHook(signer)),
      )
    : wrapFetchWithSIWx(fetch, signer);
  const response = await signedIn(`${base}/x402/v1/receipts/${requestId}`);
  expect(response.status, await response.clone().text()).toBe(200);
  const { signature } = (await response.json()) as { signature: string };
  const { keys } = (await (await fetch(`${base}/.well-known/jwks.json`)).json()) as {
    keys: { kty: string; crv: string; x: string }[];
  };
  // jose, a verifier independent of the gateway's signer.
  const { payload } = await compactVerify(signature, await importJWK({ ...keys[0]!, alg: "EdDSA" }));
  const [header, body, sig] = signature.split(".");
  // A tampered receipt fails.
  const tampered = Buffer.from(
    JSON.stringify({ ...JSON.parse(Buffer.from(body!, "base64url").toString()), payer: "0x0" }),
  ).toString("base64url");
  expect(
    verify(
      null,
      Buffer.from(`${header}.${tampered}`),
      createPublicKey({ key: keys[0]!, format: "jwk" }),
      Buffer.from(sig!, "base64url"),
    ),
  ).toBe(false);
  return JSON.parse(new TextDecoder().decode(payload)) as Record<string, unknown>;
}

async function expectVerifiedReceipt(
  requestId: string,
  expected: { charge: string; status: string; transaction: string },
): Promise<void> {
  const payload = await receiptPayload(requestId);
  expect(payload).toMatchObject({
    payer: payer.address.toLowerCase(),
    accountId: `acct_x402_${payer.address.toLowerCase()}`,
    chain: "base",
    network: NETWORK,
    transaction: expected.transaction,
    charge: { amount: expected.charge },
    x402: { scheme: "exact", status: expected.status, collected: expected.charge },
  });
  expect(payload).not.toHaveProperty("keyId");
}
