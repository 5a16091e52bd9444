/**
 * Anonymous work is limited (issue 29, item 6): keyless billed calls (x402 offers and payments
 * alike) and dashboard sign-in nonces are counted per client address and refused with 429 and
 * retry-after past their limit, before they cost anything; an unpaid keyless call may send a
 * small body only. The gateway is `tollgate dev` on its dev chains (x402 runs there); the clients
 * are real sockets bound to addresses of 127.0.0.0/8, each a client address of its own; the
 * keyed caller is the official Anthropic SDK, timed while each flood runs.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { connect } from "node:net";
import { resolve } from "node:path";
import { text } from "node:stream/consumers";
import Anthropic from "@anthropic-ai/sdk";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { x402Client } from "@x402/core/client";
import {
  decodePaymentRequiredHeader,
  decodePaymentResponseHeader,
  encodePaymentSignatureHeader,
} from "@x402/core/http";
import { toClientEvmSigner } from "@x402/evm";
import { ExactEvmScheme as ExactEvmClient } from "@x402/evm/exact/client";
import { Redis } from "ioredis";
import { Agent, fetch } from "undici";
import { createPublicClient, http } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eip3009Abi } from "../../src/chains/evm/evm-adapter.js";
import { errorInfo } from "../../src/core/errors.js";
import { readDevChainsFile, requestFaucet } from "../../src/dev/chains/dev-chains-file.js";
import { labelledPng } from "../../src/dev/provider/dev-png.js";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { AnonymousWork, AuthService } from "../../src/gen/tollgate/auth/v1/auth_pb.js";
import { BillingService, HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { REDIS_KEY_PREFIX } from "../../src/limits/redis.js";
import { remoteCoreTransport } from "../../src/runtime/remote-core.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { type GatewayProcess, startGateway, tempDir, until } from "../helpers/process.js";
import { type RedisServer, startRedis } from "../helpers/redis.js";
import { startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

/** A route on x402's door (`{origin}/x402`), where keyless calls are paid (docs/x402.md). */
const x402Path = (path: string): string => `/x402${path}`;

const ADMIN_TOKEN = "anonymous-limits-test-operator-token-0123";
/** Keyless calls per address per minute, and nonces: small, so a flood passes them early. */
const CALLS_LIMIT = 100;
const NONCES_LIMIT = 100;
const OFFERS = 2_000;
const NONCES = 20_000;
/** Requests the flooder keeps in flight: many, as refusals of a refused address are held back a second. */
const FLOOD_CONCURRENCY = 200;
/** The nonce flood is ten times larger: more in flight, so its held-back refusals end in time. */
const NONCE_FLOOD_CONCURRENCY = 800;
const FUNDS = 100_000_000n;
const HELLO: Anthropic.MessageCreateParamsNonStreaming = {
  model: "model-haiku-4-5",
  max_tokens: 16,
  messages: [{ role: "user", content: "hello" }],
};
/** Keyed calls timed before a flood starts, and at most during it (all of them fit one usage page). */
const KEYED_BEFORE = 100;
const KEYED_DURING_MAX = 300;

const FLOODER = resolve(import.meta.dirname, "children/flooder.mjs");

/** One answer the gateway gave. */
interface Answer {
  readonly status: number;
  // biome-ignore lint/suspicious/noExplicitAny: JSON of several envelopes
  readonly body: any;
  readonly requestId: string | null;
  readonly retryAfter: string | null;
}

/** `count` POSTs of `body` to `url` from `address`, by a process of its own; answers in arrival order. */
async function flood(
  address: string,
  url: string,
  count: number,
  body: string,
  headers: Record<string, string> = { "content-type": "application/json" },
  concurrency = FLOOD_CONCURRENCY,
): Promise<Answer[]> {
  const child = spawn(process.execPath, [FLOODER], { stdio: ["pipe", "pipe", "inherit"] });
  child.stdin.end(JSON.stringify({ url, localAddress: address, concurrency, count, headers, body }));
  const [output, [code]] = await Promise.all([text(child.stdout), once(child, "exit")]);
  expect(code).toBe(0);
  return JSON.parse(output) as Answer[];
}

async function post(
  agent: Agent,
  url: string,
  body: string | Buffer,
  headers: Record<string, string> = {},
): Promise<Answer> {
  const response = await fetch(url, {
    method: "POST",
    dispatcher: agent,
    headers: { "content-type": "application/json", ...headers },
    body,
  });
  const raw = await response.text();
  return {
    status: response.status,
    body: raw.startsWith("{") ? JSON.parse(raw) : raw,
    requestId: response.headers.get("x-request-id"),
    retryAfter: response.headers.get("retry-after"),
  };
}

/** A messages body of about `bytes` bytes. */
function messagesOf(bytes: number): string {
  return JSON.stringify({ ...HELLO, messages: [{ role: "user", content: "x".repeat(bytes) }] });
}

async function timed(call: () => Promise<unknown>): Promise<number> {
  const start = performance.now();
  await call();
  return performance.now() - start;
}

function p50(samples: readonly number[]): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
}

/** An anonymous-limit refusal in the Anthropic envelope. */
function expectThrottledAnthropic(answer: Answer): void {
  expect(answer.status).toBe(429);
  expect(answer.body.type).toBe("error");
  expect(answer.body.error.type).toBe("rate_limit_error");
  expect(answer.body.error.message).toMatch(/^Too many calls without an API key from this address/);
  expect(answer.requestId).toMatch(/^req_/);
  expect(Number(answer.retryAfter)).toBeGreaterThanOrEqual(1);
  expect(Number(answer.retryAfter)).toBeLessThanOrEqual(60);
}

describe("anonymous work on one gateway (tollgate dev, x402 on)", () => {
  const dir = tempDir();
  let upstream: DevUpstream;
  let gateway: GatewayProcess;
  let secret: string;
  let accountId: string;
  let billing: ReturnType<typeof createClient<typeof BillingService>>;
  const keyed = new Agent({ localAddress: "127.0.0.3" });
  let keyedCalls = 0;

  beforeAll(async () => {
    upstream = await startDevUpstream();
    gateway = await startGateway(
      {
        TOLLGATE_DATA_DIR: dir.path,
        TOLLGATE_DEV_CHAINS: "on",
        TOLLGATE_ANTHROPIC_URL: upstream.url,
        TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN,
        TOLLGATE_ANONYMOUS_CALLS_PER_MINUTE: `${CALLS_LIMIT}`,
        TOLLGATE_SIGN_IN_NONCES_PER_MINUTE: `${NONCES_LIMIT}`,
        // The keyed caller makes hundreds of calls a minute.
        TOLLGATE_RATE_LIMIT_RPM: "1000000",
      },
      90_000,
    );
    const operator = remoteCoreTransport(gateway.coreUrl, ADMIN_TOKEN);
    const auth = createClient(AuthService, operator);
    billing = createClient(BillingService, operator);
    const { account } = await auth.createAccount({ name: "keyed" });
    accountId = account!.id;
    secret = (await auth.createKey({ accountId, name: "keyed" })).secret;
    await billing.credit({ accountId, chain: "base", amount: FUNDS, reason: "test funds" });
  }, 120_000);

  afterAll(async () => {
    await keyed.close();
    await gateway?.stop("SIGTERM");
    await upstream?.close();
    const db = openDatabase(dir.path);
    try {
      expect(auditLedger(db)).toEqual([]);
    } finally {
      db.close();
      dir.cleanup();
    }
  });

  const sdk = () =>
    new Anthropic({
      apiKey: secret,
      baseURL: gateway.facadeUrl,
      maxRetries: 0,
      fetchOptions: { dispatcher: keyed } as Anthropic["fetchOptions"],
    });

  /** The keyed caller's p50 before and while `work` runs; each of its calls billed as ever. */
  /**
   * What a per-minute fixed window lets through from one address over a flood of `ms`: the
   * limit in each window the flood reached (a loaded machine may take over a minute, and each
   * new window allows the limit again). The window starts at the address's first request.
   */
  function expectWithinWindows(admitted: number, limit: number, ms: number): void {
    const windows = Math.floor(ms / 60_000) + 1;
    expect(admitted % limit, `${admitted} admitted over ${ms} ms`).toBe(0);
    expect(admitted).toBeGreaterThanOrEqual(limit);
    expect(admitted).toBeLessThanOrEqual(limit * windows);
  }

  async function keyedWhile<T>(work: () => Promise<T>): Promise<{ result: T; report: string }> {
    const client = sdk();
    const before: number[] = [];
    for (let i = 0; i < KEYED_BEFORE; i++) before.push(await timed(() => client.messages.create(HELLO)));
    let running = true;
    const during: number[] = [];
    const loop = (async () => {
      while (running && during.length < KEYED_DURING_MAX) {
        during.push(await timed(() => client.messages.create(HELLO)));
      }
    })();
    const result = await work();
    running = false;
    await loop;
    expect(during.length).toBeGreaterThan(0);
    keyedCalls += before.length + during.length;
    const rows = (await billing.listUsage({ accountId, pageSize: 1000 })).rows;
    expect(rows).toHaveLength(keyedCalls);
    for (const row of rows) expect(row.status).toBe(HoldStatus.SETTLED);
    return {
      result,
      report: `keyed caller p50 ${p50(before).toFixed(2)} ms before, ${p50(during).toFixed(2)} ms during (${during.length} calls)`,
    };
  }

  it(`answers ${OFFERS} keyless offers from one address 402 up to its limit, then 429 with retry-after; nothing reaches the provider, and a keyed caller is served as before`, async () => {
    const forwarded = upstream.requests.length;
    const started = Date.now();
    const { result: answers, report } = await keyedWhile(() =>
      flood("127.0.0.2", `${gateway.facadeUrl}${x402Path("/v1/messages")}`, OFFERS, messagesOf(100)),
    );
    const offers = answers.filter((a) => a.status === 402);
    const refused = answers.filter((a) => a.status === 429);
    expect(offers.length + refused.length).toBe(OFFERS);
    // The limit is counted atomically: exactly that many offers per window, whatever arrived together.
    expectWithinWindows(offers.length, CALLS_LIMIT, Date.now() - started);
    for (const offer of offers) expect(offer.body.error.type).toBe("billing_error");
    for (const answer of refused) expectThrottledAnthropic(answer);
    // No keyless call reached the provider: it saw the keyed caller's calls only.
    expect(upstream.requests.length - forwarded).toBe(keyedCalls);

    // The address is refused on the image routes too, in their envelope, before the body is read.
    const flooder = new Agent({ localAddress: "127.0.0.2" });
    try {
      const image = await post(
        flooder,
        `${gateway.facadeUrl}${x402Path("/v1/images/generations")}`,
        JSON.stringify({ model: "image-2", prompt: "a harbour" }),
      );
      expect(image.status).toBe(429);
      expect(image.body.error).toEqual({
        message: expect.stringMatching(/^Too many calls without an API key/),
        type: "rate_limit_error",
        param: null,
        code: "anonymous_throttled",
      });
      expect(image.requestId).toMatch(/^req_/);
      expect(Number(image.retryAfter)).toBeGreaterThanOrEqual(1);
      // Junk payments count as keyless calls: refused before anything verifies them.
      const junk = await post(flooder, `${gateway.facadeUrl}${x402Path("/v1/messages")}`, messagesOf(100), {
        "payment-signature": Buffer.from('{"x402Version":2,"payload":{}}').toString("base64"),
      });
      expectThrottledAnthropic(junk);
      // A key from the same address is never counted here: its calls go on.
      const keyedThere = await post(flooder, `${gateway.facadeUrl}/v1/messages`, JSON.stringify(HELLO), {
        "x-api-key": secret,
      });
      expect(keyedThere.status).toBe(200);
      keyedCalls++;
    } finally {
      await flooder.close();
    }
    console.log(
      `keyless offers: ${offers.length} × 402 then ${refused.length} × 429 of ${OFFERS}; ${report}`,
    );
  }, 300_000);

  it("limits junk payments from a fresh address like offers: refused 429 past the limit", async () => {
    const junk = Buffer.from('{"x402Version":2,"payload":{"signature":"0x00"}}').toString("base64");
    const answers = await flood(
      "127.0.0.4",
      `${gateway.facadeUrl}${x402Path("/v1/messages")}`,
      CALLS_LIMIT + 50,
      messagesOf(100),
      { "content-type": "application/json", "payment-signature": junk },
    );
    const refused = answers.filter((a) => a.status === 429);
    expect(refused).toHaveLength(50);
    for (const answer of refused) expectThrottledAnthropic(answer);
    // The others were refused as payments (4xx), never served.
    for (const answer of answers.filter((a) => a.status !== 429)) {
      expect(answer.status).toBeGreaterThanOrEqual(400);
      expect(answer.status).toBeLessThan(500);
    }
  }, 120_000);

  it(`answers ${NONCES} sign-in nonce requests from one address 200 up to its limit, then 429 with retry-after; a keyed caller is served as before`, async () => {
    const started = Date.now();
    const { result: answers, report } = await keyedWhile(() =>
      flood(
        "127.0.0.5",
        `${gateway.facadeUrl}/dashboard/rpc/tollgate.auth.v1.AuthService/CreateSignInNonce`,
        NONCES,
        "{}",
        { "content-type": "application/json" },
        NONCE_FLOOD_CONCURRENCY,
      ),
    );
    const issued = answers.filter((a) => a.status === 200);
    const refused = answers.filter((a) => a.status === 429);
    expect(issued.length + refused.length).toBe(NONCES);
    expectWithinWindows(issued.length, NONCES_LIMIT, Date.now() - started);
    for (const answer of issued) expect(answer.body.nonce).toMatch(/^[A-Za-z0-9]{32}$/);
    for (const answer of refused) {
      expect(answer.body.code).toBe("resource_exhausted");
      expect(answer.body.message).toMatch(/^Too many sign-in nonces from this address/);
      expect(Number(answer.retryAfter)).toBeGreaterThanOrEqual(1);
      expect(Number(answer.retryAfter)).toBeLessThanOrEqual(60);
    }
    // Only the issued nonces were written.
    const db = openDatabase(dir.path);
    try {
      const stored = db.prepare("SELECT COUNT(*) AS n FROM sign_in_nonces").get() as { n: number };
      expect(stored.n).toBe(issued.length);
    } finally {
      db.close();
    }
    // Another address still gets its nonce.
    const other = new Agent({ localAddress: "127.0.0.6" });
    try {
      const answer = await post(
        other,
        `${gateway.facadeUrl}/dashboard/rpc/tollgate.auth.v1.AuthService/CreateSignInNonce`,
        "{}",
      );
      expect(answer.status).toBe(200);
    } finally {
      await other.close();
    }
    console.log(
      `sign-in nonces: ${issued.length} × 200 then ${refused.length} × 429 of ${NONCES}; ${report}`,
    );
  }, 300_000);

  it("holds a keyless call to a small body until it carries a payment its payer signed: no payment, a junk one or a forged one get 413 before the body is read, nothing forwarded or charged; a genuinely signed large edit is served", async () => {
    const agent = new Agent({ localAddress: "127.0.0.7" });
    try {
      const url = `${gateway.facadeUrl}${x402Path("/v1/messages")}`;
      const forwarded = upstream.requests.length;
      const paymentsBefore = x402PaymentCount();
      // Declared: refused from its content-length, before the body is read.
      const declared = await post(agent, url, messagesOf(2 * 1024 * 1024));
      expect(declared.status).toBe(413);
      expect(declared.body.type).toBe("error");
      expect(declared.body.error.type).toBe("request_too_large");
      expect(declared.body.error.message).toMatch(
        /without an API key may send at most 1 MiB until it carries an x402 payment \(PAYMENT-SIGNATURE or X-PAYMENT\) signed by its payer/,
      );
      expect(declared.requestId).toMatch(/^req_/);
      // Chunked (no content-length): cut off as it arrives.
      const chunkedPost = (headers: Record<string, string>) => {
        const body = Buffer.from(messagesOf(2 * 1024 * 1024));
        return fetch(url, {
          method: "POST",
          dispatcher: agent,
          headers: { "content-type": "application/json", ...headers },
          body: (async function* () {
            for (let at = 0; at < body.length; at += 64 * 1024) yield body.subarray(at, at + 64 * 1024);
          })(),
          duplex: "half",
        });
      };
      const chunked = await chunkedPost({});
      expect(chunked.status).toBe(413);
      expect(chunked.headers.get("x-request-id")).toMatch(/^req_/);
      expect(((await chunked.json()) as { error: { type: string } }).error.type).toBe("request_too_large");
      // Under the cap: an offer as ever.
      expect((await post(agent, url, messagesOf(512 * 1024))).status).toBe(402);

      // A junk payment header lifts nothing: 413 like no payment at all, declared or chunked, and
      // from the headers alone (the body is never sent: the answer comes before it is read).
      const junk = Buffer.from('{"x402Version":2,"payload":{}}').toString("base64");
      const withJunk = await post(agent, url, messagesOf(2 * 1024 * 1024), { "payment-signature": junk });
      expect(withJunk.status).toBe(413);
      expect(withJunk.body.error.type).toBe("request_too_large");
      expect((await chunkedPost({ "payment-signature": junk })).status).toBe(413);
      expect(await statusBeforeBody("127.0.0.7", url, 30 * 1024 * 1024, { "payment-signature": junk })).toBe(
        413,
      );
      expect(await statusBeforeBody("127.0.0.7", url, 30 * 1024 * 1024, { "x-payment": junk })).toBe(413);

      // An image edit's upload: held to TOLLGATE_X402_UNPAID_UPLOAD_BYTES (4 MiB) without a payment.
      const edits = `${gateway.facadeUrl}${x402Path("/v1/images/edits")}`;
      const big = bigEdit();
      const edit = await fetch(edits, { method: "POST", dispatcher: agent, body: big });
      expect(edit.status).toBe(413);
      expect(edit.headers.get("x-request-id")).toMatch(/^req_/);
      const editBody = (await edit.json()) as { error: { message: string; type: string } };
      expect(editBody.error.message).toMatch(/may send at most 4 MiB until it carries an x402 payment/);

      // A payer signs the edit's offer (asked for with a small upload: the price is per image).
      const offered = await fetch(edits, { method: "POST", dispatcher: agent, body: smallEdit() });
      expect(offered.status).toBe(402);
      const required = decodePaymentRequiredHeader(offered.headers.get("payment-required")!);
      const dev = readDevChainsFile(dir.path)!;
      const base = dev.registry.byId.get("base")!;
      const payer = privateKeyToAccount(generatePrivateKey());
      await requestFaucet(dev.faucetUrl, "base", payer.address, 1_000_000n);
      const chain = createPublicClient({ transport: http(base.rpcUrl) });
      await until("the payer's test funds", async () =>
        (await chain.readContract({
          address: base.asset.address as `0x${string}`,
          abi: eip3009Abi,
          functionName: "balanceOf",
          args: [payer.address],
        })) === 1_000_000n
          ? true
          : undefined,
      );
      const client = new x402Client()
        .register("eip155:8453", new ExactEvmClient(toClientEvmSigner(payer, chain)))
        .setSpendControls({ allowedAssets: [{ network: "eip155:8453", asset: base.asset.address }] });
      const signed = await client.createPaymentPayload({
        ...required,
        accepts: required.accepts.filter((a) => a.network === "eip155:8453"),
      });
      // Forged: the same payment claiming more than its payer signed for. Held to the small body.
      const auth = (signed.payload as { authorization: Record<string, string> }).authorization;
      const forged = encodePaymentSignatureHeader({
        ...signed,
        payload: { ...signed.payload, authorization: { ...auth, value: `${BigInt(auth.value!) * 2n}` } },
      });
      const refused = await fetch(edits, {
        method: "POST",
        dispatcher: agent,
        headers: { "payment-signature": forged },
        body: bigEdit(),
      });
      expect(refused.status).toBe(413);
      expect(
        await statusBeforeBody("127.0.0.7", url, 30 * 1024 * 1024, { "payment-signature": forged }),
      ).toBe(413);
      // None of it reached the provider, nor wrote a payment.
      expect(upstream.requests.length).toBe(forwarded);
      expect(x402PaymentCount()).toBe(paymentsBefore);

      // The genuine payment: its 5 MiB edit is read, served, and collected.
      const served = await fetch(edits, {
        method: "POST",
        dispatcher: agent,
        headers: { "payment-signature": encodePaymentSignatureHeader(signed) },
        body: bigEdit(),
      });
      expect(served.status, await served.clone().text()).toBe(200);
      expect(decodePaymentResponseHeader(served.headers.get("payment-response")!).success).toBe(true);
      expect(x402PaymentCount()).toBe(paymentsBefore + 1);
    } finally {
      await agent.close();
    }
  }, 120_000);

  /** The x402 payments the gateway wrote. */
  function x402PaymentCount(): number {
    const db = openDatabase(dir.path);
    try {
      return (db.prepare("SELECT COUNT(*) AS n FROM x402_payments").get() as { n: number }).n;
    } finally {
      db.close();
    }
  }
});

/** An image edit whose upload is a valid PNG of about 5 MiB (above the unpaid 4 MiB). */
function bigEdit(): FormData {
  return editOf(
    labelledPng({
      width: 64,
      height: 48,
      seed: Buffer.from("big"),
      lines: ["BIG"],
      text: { Comment: "x".repeat(5 * 1024 * 1024) },
    }),
  );
}

function smallEdit(): FormData {
  return editOf(
    labelledPng({ width: 64, height: 48, seed: Buffer.from("small"), lines: ["SMALL"], text: {} }),
  );
}

function editOf(png: Buffer): FormData {
  const form = new FormData();
  form.set("model", "image-2");
  form.set("prompt", "make it blue");
  form.set("response_format", "b64_json");
  form.set("image", new Blob([png], { type: "image/png" }), "a.png");
  return form;
}

/**
 * The status the gateway answers a POST of `url` that declares `length` body bytes and sends
 * none of them: only an answer made before the body is read can arrive.
 */
async function statusBeforeBody(
  address: string,
  url: string,
  length: number,
  headers: Record<string, string>,
): Promise<number> {
  const { hostname, port, pathname } = new URL(url);
  const socket = connect({ host: hostname, port: Number(port), localAddress: address });
  try {
    await once(socket, "connect");
    const lines = [
      `POST ${pathname} HTTP/1.1`,
      `host: ${hostname}:${port}`,
      "content-type: application/json",
      `content-length: ${length}`,
      ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`),
    ];
    socket.write(`${lines.join("\r\n")}\r\n\r\n`);
    const [first] = (await once(socket, "data")) as [Buffer];
    return Number(/^HTTP\/1\.1 (\d{3})/.exec(first.toString("latin1"))?.[1]);
  } finally {
    socket.destroy();
  }
}

/** A Connect client of the core's port over HTTP/2, its connection bound to `address`. */
function coreAuthAt(coreUrl: string, address: string) {
  const transport = createConnectTransport({
    baseUrl: coreUrl,
    httpVersion: "2",
    nodeOptions: {
      createConnection: (authority: URL) =>
        connect({ host: authority.hostname, port: Number(authority.port), localAddress: address }),
    },
  });
  return createClient(AuthService, transport);
}

describe("anonymous work across gateway hosts (Redis)", () => {
  let redis: RedisServer;
  let a: TextGateway;
  let b: TextGateway;
  const LIMIT = 10;
  beforeAll(async () => {
    redis = await startRedis();
    const env = {
      TOLLGATE_REDIS_URL: redis.url,
      TOLLGATE_ANONYMOUS_CALLS_PER_MINUTE: `${LIMIT}`,
      TOLLGATE_SIGN_IN_NONCES_PER_MINUTE: `${LIMIT}`,
    };
    a = await startTextGateway(env);
    b = await startTextGateway(env);
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await redis?.stop();
  });

  it("two hosts share one nonce budget per address: requests on either count, and both refuse past it", async () => {
    const browser = new Agent({ localAddress: "127.0.0.8" });
    try {
      const statuses: number[] = [];
      for (let i = 0; i < LIMIT + 4; i++) {
        const host = [a, b][i % 2]!;
        const answer = await post(
          browser,
          `${host.baseUrl}/dashboard/rpc/tollgate.auth.v1.AuthService/CreateSignInNonce`,
          "{}",
        );
        statuses.push(answer.status);
        if (answer.status === 429) expect(Number(answer.retryAfter)).toBeGreaterThanOrEqual(1);
      }
      expect(statuses).toEqual([...Array(LIMIT).fill(200), ...Array(4).fill(429)]);
    } finally {
      await browser.close();
    }
    const peek = new Redis(redis.url);
    try {
      expect(await peek.exists(`${REDIS_KEY_PREFIX}:sign_in_nonces:127.0.0.8`)).toBe(1);
    } finally {
      peek.disconnect();
    }
  });

  it("two hosts share one budget of keyless calls per address, on the core's port by the connection's address", async () => {
    const outcomes: (Code | "ok")[] = [];
    for (let i = 0; i < LIMIT + 3; i++) {
      const host = [a, b][i % 2]!;
      const auth = coreAuthAt(host.gateway.coreUrl, "127.0.0.9");
      outcomes.push(
        await auth.admitAnonymous({ work: AnonymousWork.CALL }).then(
          () => "ok" as const,
          (error: unknown) => {
            const refusal = ConnectError.from(error);
            expect(errorInfo(refusal)?.reason).toBe("ANONYMOUS_THROTTLED");
            expect(Number(errorInfo(refusal)?.metadata.retry_after)).toBeGreaterThanOrEqual(1);
            return refusal.code;
          },
        ),
      );
    }
    expect(outcomes).toEqual([...Array(LIMIT).fill("ok"), ...Array(3).fill(Code.ResourceExhausted)]);
  });
});
