import { x402Client } from "@x402/core/client";
import {
  decodePaymentRequiredHeader,
  decodePaymentResponseHeader,
  encodePaymentSignatureHeader,
} from "@x402/core/http";
import type { Network, PaymentPayload, PaymentRequired } from "@x402/core/types";
import { toClientEvmSigner } from "@x402/evm";
import { UptoEvmScheme as UptoClient } from "@x402/evm/upto/client";
import { type Address, bytesToHex, createPublicClient, createWalletClient, getAddress, http } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eip3009Abi } from "../../src/chains/evm/evm-adapter.js";
import { treasurySeed } from "../../src/chains/keys.js";
import { DEV_MASTER_SECRET, readDevChainsFile, requestFaucet } from "../../src/dev/chains/dev-chains-file.js";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { freePort } from "../helpers/ports.js";
import { cliJson, type GatewayProcess, startGateway, tempDir, until } from "../helpers/process.js";

// x402 as a hostile payer would try it (issue 29, items 2 and 3), against `tollgate dev` on its
// dev chains, paid with x402's own client. Every amount is read from the chain: one signed
// authorisation pays for one call however it is re-encoded; a payer that moves its funds away
// between verify and collection gets no non-streaming answer, and one whose stream went
// uncollected is refused until the operator clears it; the worst case a keyless stream may
// run up is capped. The ledger audit runs at the end.

const NETWORK = "eip155:8453" as Network;
/** The drain-scripted calls' answers wait this long, so the payer's funds are gone by then. */
const DRAIN_WAIT_MS = 2_500;
/** The largest worst case served to an x402 call here (TOLLGATE_X402_MAX_AUTHORISATION, dollars). */
const MAX_AUTHORISATION = "0.05";

let dir: ReturnType<typeof tempDir>;
let upstream: DevUpstream;
let gateway: GatewayProcess;
let base: string;
let metricsUrl: string;
let token: Address;
let rpcUrl: string;
const treasury = privateKeyToAccount(bytesToHex(treasurySeed(DEV_MASTER_SECRET, "evm"))).address;
const sink = privateKeyToAccount(generatePrivateKey()).address;
/** Set by a test: the payer whose funds go to {@link sink} as soon as the provider is asked. */
let drainOnRequest: ReturnType<typeof privateKeyToAccount> | undefined;
let draining: Promise<void> | undefined;

const erc20Transfer = [
  {
    type: "function",
    name: "transfer",
    stateMutability: "nonpayable",
    inputs: [
      { name: "to", type: "address" },
      { name: "value", type: "uint256" },
    ],
    outputs: [{ name: "", type: "bool" }],
  },
] as const;

const chainClient = () => createPublicClient({ transport: http(rpcUrl) });
const balanceOf = async (address: Address): Promise<bigint> =>
  await chainClient().readContract({
    address: token,
    abi: eip3009Abi,
    functionName: "balanceOf",
    args: [address],
  });

/** A payer with `amount` test tokens (and no Permit2 approval: it signs a permit per payment). */
async function fundedPayer(amount: bigint) {
  const payer = privateKeyToAccount(generatePrivateKey());
  const dev = readDevChainsFile(dir.path)!;
  await requestFaucet(dev.faucetUrl, "base", payer.address, amount);
  await until("the payer's test funds", async () =>
    (await balanceOf(payer.address)) === amount ? true : undefined,
  );
  return payer;
}

/** Moves all of `payer`'s tokens away (anvil gives it the gas), and waits until it is mined. */
async function drain(payer: ReturnType<typeof privateKeyToAccount>): Promise<void> {
  await fetch(rpcUrl, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "anvil_setBalance",
      params: [payer.address, "0xDE0B6B3A7640000"],
    }),
  });
  const wallet = createWalletClient({ account: payer, transport: http(rpcUrl) });
  const all = await balanceOf(payer.address);
  const chainId = await chainClient().getChainId();
  const hash = await wallet.writeContract({
    address: token,
    abi: erc20Transfer,
    functionName: "transfer",
    args: [sink, all],
    chain: {
      id: chainId,
      name: "base",
      nativeCurrency: { name: "ETH", symbol: "ETH", decimals: 18 },
      rpcUrls: { default: { http: [rpcUrl] } },
    },
  });
  await chainClient().waitForTransactionReceipt({ hash });
}

function client(payer: ReturnType<typeof privateKeyToAccount>): x402Client {
  const signer = toClientEvmSigner(payer, chainClient());
  return new x402Client()
    .register(NETWORK, new UptoClient(signer, { rpcUrl }))
    .setSpendControls({ allowedAssets: [{ network: NETWORK, asset: token }] });
}

const messages = (maxTokens: number, stream = false, text = "hello") =>
  JSON.stringify({
    model: "claude-haiku-4-5",
    max_tokens: maxTokens,
    stream,
    messages: [{ role: "user", content: text }],
  });

/** A signed upto payment on base for the call `body`'s worst case. */
async function signedPayment(
  payer: ReturnType<typeof privateKeyToAccount>,
  body: string,
): Promise<PaymentPayload> {
  const offered = await fetch(`${base}/x402/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
  });
  expect(offered.status).toBe(402);
  const required = decodePaymentRequiredHeader(offered.headers.get("payment-required")!) as PaymentRequired;
  const onBase = { ...required, accepts: required.accepts.filter((a) => a.network === NETWORK) };
  return await client(payer).createPaymentPayload(onBase);
}

/** Sends `body` to the door with `payment` as its PAYMENT-SIGNATURE. */
const pay = (payment: unknown, body: string) =>
  fetch(`${base}/x402/v1/messages`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      "payment-signature": encodePaymentSignatureHeader(payment as PaymentPayload),
    },
    body,
  });

/** Eight encodings of one signed upto authorisation that x402's facilitator reads as the same. */
function reEncodings(payment: PaymentPayload): unknown[] {
  const p = payment.payload as {
    signature: string;
    permit2Authorization: {
      from: string;
      permitted: { token: string; amount: string };
      spender: string;
      nonce: string;
      deadline: string;
      witness: { to: string; facilitator: string; validAfter: string };
    };
  };
  const auth = p.permit2Authorization;
  const withAuth = (changed: Partial<typeof auth>) => ({
    ...payment,
    payload: { ...p, permit2Authorization: { ...auth, ...changed } },
  });
  return [
    payment,
    withAuth({ from: auth.from.toLowerCase() }),
    withAuth({ from: `0x${auth.from.slice(2).toUpperCase()}` }),
    withAuth({ nonce: `0x${BigInt(auth.nonce).toString(16)}` }),
    withAuth({ nonce: `000${auth.nonce}` }),
    withAuth({ permitted: { ...auth.permitted, token: auth.permitted.token.toLowerCase() } }),
    withAuth({ deadline: `0x${BigInt(auth.deadline).toString(16)}`, spender: auth.spender.toLowerCase() }),
    withAuth({ witness: { ...auth.witness, to: auth.witness.to.toLowerCase(), validAfter: "0x0" } }),
  ];
}

const reasonOf = async (response: Response) => {
  const body = (await response.json()) as { error: { message: string } };
  return body.error.message;
};

/**
 * How many answers the facade gave with the core's error `reason` (lower case), from the metrics
 * port: the HTTP answer carries the message only, the metrics the reason it was refused for.
 */
async function answeredWith(reason: string): Promise<number> {
  const scraped = await (await fetch(metricsUrl)).text();
  let total = 0;
  for (const line of scraped.split("\n")) {
    if (line.startsWith("tollgate_http_requests_total{") && line.includes(`reason="${reason}"`))
      total += Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return total;
}

/**
 * Expects exactly `count` answers with `reason`: the facade counts an answer once it has ended,
 * which may be a moment after the client read it, so the count is awaited, then checked exactly.
 */
async function expectAnsweredWith(reason: string, count: number): Promise<void> {
  const counted = await until(
    `${count} answers with reason ${reason}`,
    async () => {
      const now = await answeredWith(reason);
      return now >= count ? now : undefined;
    },
    5_000,
  );
  expect(counted).toBe(count);
}

/** The status of `payer`'s one x402 payment in the ledger. */
function paymentStatus(payer: Address): string | undefined {
  const db = openDatabase(dir.path);
  try {
    const row = db.prepare("SELECT status FROM x402_payments WHERE payer = ?").get(payer.toLowerCase()) as
      | { status: string }
      | undefined;
    return row?.status;
  } finally {
    db.close();
  }
}

beforeAll(async () => {
  dir = tempDir();
  upstream = await startDevUpstream({
    script: (request) => {
      const payer = drainOnRequest;
      if (payer === undefined) return undefined;
      drainOnRequest = undefined;
      draining = drain(payer);
      const body = request.body as { stream?: boolean };
      if (body.stream === true) {
        // The first bytes go out at once; the end waits until the payer's funds are gone.
        return {
          kind: "stream",
          events: [
            {
              event: "message_start",
              data: {
                type: "message_start",
                message: {
                  id: "msg_drain",
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
              data: { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Unpaid." } },
            },
            {
              event: "content_block_stop",
              data: { type: "content_block_stop", index: 0 },
              delayMs: DRAIN_WAIT_MS,
            },
            {
              event: "message_delta",
              data: {
                type: "message_delta",
                delta: { stop_reason: "end_turn", stop_sequence: null },
                usage: { output_tokens: 3 },
              },
            },
            { event: "message_stop", data: { type: "message_stop" } },
          ],
        };
      }
      return {
        kind: "raw",
        status: 200,
        headers: { "content-type": "application/json", "request-id": "req_drain" },
        chunks: [
          " ",
          JSON.stringify({
            id: "msg_drain",
            type: "message",
            role: "assistant",
            model: "claude-haiku-4-5",
            content: [{ type: "text", text: "The secret answer." }],
            stop_reason: "end_turn",
            stop_sequence: null,
            usage: { input_tokens: 12, output_tokens: 5 },
          }),
        ],
        chunkDelayMs: DRAIN_WAIT_MS,
      };
    },
  });
  const metricsPort = await freePort();
  metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`;
  gateway = await startGateway(
    {
      TOLLGATE_DATA_DIR: dir.path,
      TOLLGATE_DEV_CHAINS: "on",
      TOLLGATE_ANTHROPIC_URL: upstream.url,
      TOLLGATE_CHAIN_POLL_MS: "100",
      TOLLGATE_METRICS_PORT: `${metricsPort}`,
      TOLLGATE_X402_MAX_AUTHORISATION: MAX_AUTHORISATION,
    },
    60_000,
  );
  base = gateway.facadeUrl;
  const dev = readDevChainsFile(dir.path)!;
  const chain = dev.registry.byId.get("base")!;
  token = getAddress(chain.asset.address);
  rpcUrl = chain.rpcUrl;
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

describe("x402: one authorisation pays for one call", () => {
  it("serves one of eight re-encodings of one authorisation sent at once; seven are X402_PAYMENT_REPLAYED, nothing forwarded for them, and none pays once the payment closed", async () => {
    const payer = await fundedPayer(1_000_000n);
    const body = messages(200);
    const payment = await signedPayment(payer, body);
    const treasuryBefore = await balanceOf(treasury);
    const forwarded = upstream.requests.length;
    const replays = await answeredWith("x402_payment_replayed");
    const answers = await Promise.all(reEncodings(payment).map((encoded) => pay(encoded, body)));
    const served = answers.filter((r) => r.status === 200);
    expect(served).toHaveLength(1);
    const refused = answers.filter((r) => r.status !== 200);
    expect(refused.map((r) => r.status)).toEqual(Array(7).fill(402));
    for (const r of refused) expect(await reasonOf(r)).toMatch(/already presented/);
    // Refused as X402_PAYMENT_REPLAYED, all seven.
    await expectAnsweredWith("x402_payment_replayed", replays + 7);
    expect(upstream.requests.length).toBe(forwarded + 1);
    const collected = BigInt(
      decodePaymentResponseHeader(served[0]!.headers.get("payment-response")!).amount!,
    );
    expect(collected).toBeGreaterThan(0n);
    expect(await balanceOf(treasury)).toBe(treasuryBefore + collected);
    expect(await balanceOf(payer.address)).toBe(1_000_000n - collected);

    // Once its payment is closed, none of the eight encodings pays again either.
    await until("the payment to close", async () =>
      paymentStatus(payer.address) === "settled" ? true : undefined,
    );
    const again = await Promise.all(reEncodings(payment).map((encoded) => pay(encoded, body)));
    expect(again.map((r) => r.status)).toEqual(Array(8).fill(402));
    for (const r of again) expect(await reasonOf(r)).toMatch(/already presented/);
    await expectAnsweredWith("x402_payment_replayed", replays + 15);
    expect(upstream.requests.length).toBe(forwarded + 1);
    expect(await balanceOf(treasury)).toBe(treasuryBefore + collected);
  });

  it("serves the first of eight re-encodings sent one after another; the seven after it are X402_PAYMENT_REPLAYED", async () => {
    const payer = await fundedPayer(1_000_000n);
    const body = messages(200, true);
    const payment = await signedPayment(payer, body);
    const treasuryBefore = await balanceOf(treasury);
    const forwarded = upstream.requests.length;
    const replays = await answeredWith("x402_payment_replayed");
    const [first, ...rest] = reEncodings(payment);
    const served = await pay(first, body);
    expect(served.status).toBe(200);
    expect(await served.text()).toContain("event: message_stop");
    for (const encoded of rest) {
      const again = await pay(encoded, body);
      expect(again.status).toBe(402);
      expect(await reasonOf(again)).toMatch(/already presented/);
    }
    await expectAnsweredWith("x402_payment_replayed", replays + 7);
    expect(upstream.requests.length).toBe(forwarded + 1);
    // The stream's collection runs after its end: exactly one charge reaches the treasury.
    const charge = await until("the stream's collection", async () => {
      const spent = 1_000_000n - (await balanceOf(payer.address));
      return spent > 0n ? spent : undefined;
    });
    expect(await balanceOf(treasury)).toBe(treasuryBefore + charge);
  });

  it("refuses a payment with a key x402 does not define, in its payload or around it", async () => {
    const payer = await fundedPayer(1_000_000n);
    const body = messages(100);
    const payment = await signedPayment(payer, body);
    const forwarded = upstream.requests.length;
    const invalid = await answeredWith("x402_payment_invalid");
    const p = payment.payload as { permit2Authorization: Record<string, unknown> };
    for (const tampered of [
      { ...payment, payload: { ...payment.payload, x: 1 } },
      { ...payment, payload: { ...p, permit2Authorization: { ...p.permit2Authorization, extra: "1" } } },
      { ...payment, memo: "hi" },
    ]) {
      const response = await pay(tampered, body);
      expect(response.status).toBe(402);
      expect(await reasonOf(response)).toMatch(/key x402 does not define/);
    }
    await expectAnsweredWith("x402_payment_invalid", invalid + 3);
    expect(upstream.requests.length).toBe(forwarded);
    expect(await balanceOf(payer.address)).toBe(1_000_000n);
    // The payment itself, untouched, still pays once.
    expect((await pay(payment, body)).status).toBe(200);
  });
});

describe("x402: collected before it is handed over, and bounded when it cannot be", () => {
  it("delivers nothing and charges nothing when a non-streaming call's collection fails (the payer drained its wallet meanwhile)", async () => {
    const payer = await fundedPayer(1_000_000n);
    const body = messages(100);
    const payment = await signedPayment(payer, body);
    const treasuryBefore = await balanceOf(treasury);
    const notCollected = await answeredWith("x402_payment_not_collected");
    drainOnRequest = payer;
    const response = await pay(payment, body);
    await draining;
    expect(response.status).toBe(402);
    const text = await response.text();
    expect(text).not.toContain("The secret answer.");
    expect(text).toMatch(/could not be collected onchain/);
    await expectAnsweredWith("x402_payment_not_collected", notCollected + 1);
    expect(response.headers.get("payment-response")).not.toBeNull();
    const scraped = await (await fetch(metricsUrl)).text();
    expect(scraped).toMatch(/tollgate_x402_collections_total\{outcome="refused"\} 1\n/);
    expect(await balanceOf(treasury)).toBe(treasuryBefore);
    const db = openDatabase(dir.path);
    try {
      const row = db
        .prepare(
          "SELECT status, settled, hold_id FROM x402_payments WHERE payer = ? ORDER BY created_at DESC",
        )
        .safeIntegers(true)
        .get(payer.address.toLowerCase()) as { status: string; settled: bigint; hold_id: string };
      expect(row).toMatchObject({ status: "unused", settled: 0n });
      const resolution = db
        .prepare("SELECT status, amount FROM hold_resolutions WHERE hold_id = ?")
        .safeIntegers(true)
        .get(row.hold_id);
      expect(resolution).toMatchObject({ status: "released", amount: 0n });
      expect(auditLedger(db)).toEqual([]);
    } finally {
      db.close();
    }
  });

  it("refuses a payer whose stream went uncollected until the operator clears it; the failure is counted", async () => {
    const payer = await fundedPayer(1_000_000n);
    const body = messages(100, true);
    const payment = await signedPayment(payer, body);
    drainOnRequest = payer;
    const response = await pay(payment, body);
    expect(response.status).toBe(200);
    // The stream is delivered whole: it cannot wait for its collection.
    expect(await response.text()).toContain("event: message_stop");
    await draining;
    await until("the refused collection to be recorded", async () => {
      const db = openDatabase(dir.path);
      try {
        const row = db
          .prepare("SELECT status FROM x402_payments WHERE payer = ?")
          .get(payer.address.toLowerCase()) as { status: string } | undefined;
        return row?.status === "failed" ? true : undefined;
      } finally {
        db.close();
      }
    });
    const scraped = await (await fetch(metricsUrl)).text();
    expect(scraped).toMatch(/tollgate_x402_collections_total\{outcome="failed"\} 1/);
    // Funded again, it signs a fresh payment: refused before anything runs.
    const dev = readDevChainsFile(dir.path)!;
    await requestFaucet(dev.faucetUrl, "base", payer.address, 1_000_000n);
    await until("the payer's new funds", async () =>
      (await balanceOf(payer.address)) === 1_000_000n ? true : undefined,
    );
    const forwarded = upstream.requests.length;
    const owes = await answeredWith("x402_payer_owes");
    const next = await pay(await signedPayment(payer, messages(100)), messages(100));
    expect(next.status).toBe(402);
    expect(await reasonOf(next)).toMatch(/refused until the gateway's operator clears it/);
    await expectAnsweredWith("x402_payer_owes", owes + 1);
    expect(upstream.requests.length).toBe(forwarded);
    // The operator clears it (having settled out of band): its calls are taken again.
    const cleared = await cliJson<{ cleared: number }>(["x402", "clear", "--payer", payer.address], {
      TOLLGATE_DATA_DIR: dir.path,
    });
    expect(cleared.cleared).toBe(1);
    const after = await pay(await signedPayment(payer, messages(100)), messages(100));
    expect(after.status).toBe(200);
  });

  it("refuses a keyless call whose worst case is above TOLLGATE_X402_MAX_AUTHORISATION with a 400 on max_tokens, forwarding nothing", async () => {
    const forwarded = upstream.requests.length;
    // claude-haiku-4-5 at $5 per million output tokens: 64,000 tokens is a worst case of $0.32.
    const response = await fetch(`${base}/x402/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: messages(64_000),
    });
    expect(response.status).toBe(400);
    const body = (await response.json()) as { error: { type: string; message: string } };
    expect(body.error.type).toBe("invalid_request_error");
    expect(body.error.message).toMatch(/max_tokens|TOLLGATE_X402_MAX_AUTHORISATION/);
    expect(response.headers.get("payment-required")).toBeNull();
    expect(upstream.requests.length).toBe(forwarded);
  });
});
