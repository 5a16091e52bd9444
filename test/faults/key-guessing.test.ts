/**
 * Key guessing (issue 18, item 7): failed authentications are throttled per client address. The
 * clients are real sockets bound to addresses of 127.0.0.0/8 (all of it is loopback on Linux),
 * so each one is a client address of its own; the valid caller is the official Anthropic SDK.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { connect } from "node:net";
import { resolve } from "node:path";
import { text } from "node:stream/consumers";
import Anthropic from "@anthropic-ai/sdk";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Redis } from "ioredis";
import { Agent, fetch } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateKey } from "../../src/core/auth/keys.js";
import { errorInfo } from "../../src/core/errors.js";
import { AuthService } from "../../src/gen/tollgate/auth/v1/auth_pb.js";
import { BillingService, HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { REDIS_KEY_PREFIX } from "../../src/limits/redis.js";
import { accountWithKey } from "../helpers/app.js";
import { type RedisServer, startRedis } from "../helpers/redis.js";
import { startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

const GUESSES = 2_000;
/**
 * Requests a guesser keeps in flight at once: many, as a blocked address's refusals are held back
 * a second each.
 */
const GUESSER_CONCURRENCY = 100;
const HELLO: Anthropic.MessageCreateParamsNonStreaming = {
  model: "model-haiku-4-5",
  max_tokens: 16,
  messages: [{ role: "user", content: "hello" }],
};
const FUNDS = 100_000_000n;
/** Valid calls measured before the guessing starts, and at most during it. */
const VALID_BEFORE = 200;
const VALID_DURING_MAX = 500;

/** Connections from one client address (a loopback address of its own). */
function clientAt(address: string): Agent {
  return new Agent({ localAddress: address });
}

/** The Anthropic SDK as a valid caller at `agent`'s address. */
function sdkAt(t: TextGateway, agent: Agent): Anthropic {
  return new Anthropic({
    apiKey: t.secret,
    baseURL: t.baseUrl,
    maxRetries: 0,
    fetchOptions: { dispatcher: agent } as Anthropic["fetchOptions"],
  });
}

/** A Connect client of the core's port over HTTP/2, its connection bound to `address`. */
function coreClientsAt(coreUrl: string, address: string) {
  const transport = createConnectTransport({
    baseUrl: coreUrl,
    httpVersion: "2",
    nodeOptions: {
      createConnection: (authority: URL) =>
        connect({ host: authority.hostname, port: Number(authority.port), localAddress: address }),
    },
  });
  return { auth: createClient(AuthService, transport), billing: createClient(BillingService, transport) };
}

/** One answer the facade gave. */
interface Answer {
  readonly status: number;
  readonly body: { type?: string; error?: { type?: string; code?: string | null; message?: string } };
  readonly requestId: string | null;
  readonly retryAfter: string | null;
}

async function post(
  agent: Agent,
  url: string,
  headers: Record<string, string>,
  body: unknown = HELLO,
): Promise<Answer> {
  const response = await fetch(url, {
    method: "POST",
    dispatcher: agent,
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  return {
    status: response.status,
    body: (await response.json()) as Answer["body"],
    requestId: response.headers.get("x-request-id"),
    retryAfter: response.headers.get("retry-after"),
  };
}

/** A guess: a key of the right shape, with a valid checksum, that no account has. */
const guessedKey = () => generateKey().secret;

const GUESSER = resolve(import.meta.dirname, "children/key-guesser.mjs");

/**
 * `count` guesses on /v1/messages from `address`, `GUESSER_CONCURRENCY` at a time, by a process of
 * its own (children/key-guesser.mjs); the answers in the order they arrived.
 */
async function guess(address: string, baseUrl: string, count: number): Promise<Answer[]> {
  const child = spawn(process.execPath, [GUESSER], { stdio: ["pipe", "pipe", "inherit"] });
  const job = {
    url: baseUrl,
    localAddress: address,
    concurrency: GUESSER_CONCURRENCY,
    keys: Array.from({ length: count }, guessedKey),
  };
  child.stdin.end(JSON.stringify(job));
  const [output, [code]] = await Promise.all([text(child.stdout), once(child, "exit")]);
  expect(code).toBe(0);
  return JSON.parse(output) as Answer[];
}

/** A refusal of a throttled address in the Anthropic envelope. */
function expectThrottledAnthropic(answer: Answer, blockS: number): void {
  expect(answer.status).toBe(429);
  expect(answer.body.type).toBe("error");
  expect(answer.body.error?.type).toBe("rate_limit_error");
  expect(answer.body.error?.message).toMatch(/^Too many failed authentications from this address/);
  expect(answer.requestId).toMatch(/^req_/);
  expect(Number(answer.retryAfter)).toBeGreaterThanOrEqual(1);
  expect(Number(answer.retryAfter)).toBeLessThanOrEqual(blockS);
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

/**
 * The valid caller at `valid`'s address times `VALID_BEFORE` calls, then keeps calling while
 * `GUESSES` guesses come from `address` (at most `VALID_DURING_MAX` calls).
 */
async function guessWhileTiming(t: TextGateway, valid: Agent, address: string) {
  const sdk = sdkAt(t, valid);
  const before: number[] = [];
  for (let i = 0; i < VALID_BEFORE; i++) before.push(await timed(() => sdk.messages.create(HELLO)));
  let guessing = true;
  const during: number[] = [];
  const validLoop = (async () => {
    while (guessing && during.length < VALID_DURING_MAX) {
      during.push(await timed(() => sdk.messages.create(HELLO)));
    }
  })();
  const answers = await guess(address, t.baseUrl, GUESSES);
  guessing = false;
  await validLoop;
  // Meanwhile the valid caller kept being served, and billed as ever.
  expect(during.length).toBeGreaterThan(0);
  await expectBilledNormally(t, VALID_BEFORE + during.length);
  return { answers, before, during };
}

/** The valid caller's median latency before and during the guessing, for the log. */
function latencies(before: readonly number[], during: readonly number[]): string {
  return `valid caller p50 ${p50(before).toFixed(2)} ms before, ${p50(during).toFixed(2)} ms during (${during.length} calls)`;
}

/** Every call of the account settled with a charge, and the balance down by exactly their sum. */
async function expectBilledNormally(t: TextGateway, calls: number): Promise<void> {
  const rows = await t.usage();
  expect(rows).toHaveLength(calls);
  for (const row of rows) {
    expect(row.status).toBe(HoldStatus.SETTLED);
    expect(row.amount).toBeGreaterThan(0n);
  }
  const charged = rows.reduce((sum, row) => sum + row.amount, 0n);
  expect(await t.available()).toBe(FUNDS - charged);
  t.expectSoundLedger();
}

describe("key guessing, one gateway", () => {
  let t: TextGateway;
  const guesser = clientAt("127.0.0.2");
  const valid = clientAt("127.0.0.3");
  beforeAll(async () => {
    t = await startTextGateway((upstream) => ({
      TOLLGATE_GEMINI_URL: upstream,
      // The valid caller makes hundreds of calls in a minute.
      TOLLGATE_RATE_LIMIT_RPM: "1000000",
    }));
    await t.credit(FUNDS);
  });
  afterAll(async () => {
    await guesser.close();
    await valid.close();
    await t?.close();
  });

  it("answers 2,000 guessed keys from one address 401 up to its budget, then 429 in each route's envelope without looking keys up; a valid caller elsewhere is served and billed as before", async () => {
    const { authFailuresPerMinute: budget, authBlockMs } = t.gateway.app.config;
    const blockS = authBlockMs / 1000;
    expect(budget).toBe(30);
    const { answers, before, during } = await guessWhileTiming(t, valid, "127.0.0.2");

    const unauthenticated = answers.filter((a) => a.status === 401);
    const throttled = answers.filter((a) => a.status === 429);
    expect(unauthenticated.length + throttled.length).toBe(GUESSES);
    // The budget, plus at most the guesses already in flight when it ran out.
    expect(unauthenticated.length).toBeGreaterThanOrEqual(budget);
    expect(unauthenticated.length).toBeLessThanOrEqual(budget + GUESSER_CONCURRENCY);
    for (const answer of unauthenticated) expect(answer.body.error?.type).toBe("authentication_error");
    // After the budget: at most the in-flight ones still answer 401, then every answer is 429.
    const firstThrottled = answers.findIndex((a) => a.status === 429);
    expect(answers.slice(firstThrottled + GUESSER_CONCURRENCY).every((a) => a.status === 429)).toBe(true);
    for (const answer of throttled) expectThrottledAnthropic(answer, blockS);

    // The address is refused on every route, in that route's own envelope, and even with the
    // valid key, which never authenticated from this address: the refusal comes before any key
    // is looked at (a valid key would pass a lookup).
    expectThrottledAnthropic(
      await post(guesser, `${t.baseUrl}/v1/messages`, { "x-api-key": t.secret }),
      blockS,
    );
    expectThrottledAnthropic(
      await post(guesser, `${t.baseUrl}/v1/messages/count_tokens`, { "x-api-key": t.secret }),
      blockS,
    );
    const image = await post(
      guesser,
      `${t.baseUrl}/v1/images/generations`,
      { authorization: `Bearer ${t.secret}` },
      { model: "image-1", prompt: "a cat" },
    );
    expect(image.status).toBe(429);
    expect(image.body.error).toEqual({
      message: expect.stringMatching(/^Too many failed authentications/),
      type: "rate_limit_error",
      param: null,
      code: "auth_throttled",
    });
    expect(image.requestId).toMatch(/^req_/);
    expect(Number(image.retryAfter)).toBeGreaterThanOrEqual(1);
    // The core's port counts by the connection's address: the same address is blocked there too.
    const core = coreClientsAt(t.gateway.coreUrl, "127.0.0.2");
    const refusal = await core.billing.getBalances({}, { headers: { "x-api-key": t.secret } }).then(
      () => undefined,
      (error: unknown) => ConnectError.from(error),
    );
    expect(refusal?.code).toBe(Code.ResourceExhausted);
    expect(errorInfo(refusal!)?.reason).toBe("AUTH_THROTTLED");
    expect(Number(errorInfo(refusal!)?.metadata.retry_after)).toBeGreaterThanOrEqual(1);
    // No guess reached the provider: it saw the valid caller's calls and nothing else.
    expect(t.upstream.requests).toHaveLength(VALID_BEFORE + during.length);

    console.log(
      `key guessing: ${unauthenticated.length} × 401 then ${throttled.length} × 429 of ${GUESSES} guesses; ` +
        latencies(before, during),
    );
  });

  it("throttles guesses made on the core's port by the connection's address, with code resource_exhausted", async () => {
    const { auth } = coreClientsAt(t.gateway.coreUrl, "127.0.0.4");
    const codes: (Code | "ok")[] = [];
    for (let i = 0; i < 40; i++) {
      codes.push(
        await auth.authenticate({ key: guessedKey() }).then(
          () => "ok" as const,
          (error: unknown) => ConnectError.from(error).code,
        ),
      );
    }
    expect(codes.slice(0, 30)).toEqual(Array(30).fill(Code.Unauthenticated));
    expect(codes.slice(30)).toEqual(Array(10).fill(Code.ResourceExhausted));
    // The client a caller names is ignored unless it proves itself a facade (TOLLGATE_FACADE_TOKEN):
    // naming another address does not escape the block (test/auth/core-port-trust.test.ts).
    const named = await auth.authenticate({ key: guessedKey(), clientAddress: "192.0.2.9" }).then(
      () => undefined,
      (error: unknown) => ConnectError.from(error).code,
    );
    expect(named).toBe(Code.ResourceExhausted);
  });

  it("counts refused dashboard sign-ins under the same throttle, answering resource_exhausted in Connect's shape", async () => {
    const browser = clientAt("127.0.0.5");
    try {
      const signIn = () =>
        post(
          browser,
          `${t.baseUrl}/dashboard/rpc/tollgate.auth.v1.AuthService/SignIn`,
          {},
          {
            family: "WALLET_FAMILY_EVM",
            message: "not a sign-in message",
            signature: "0x00",
          },
        );
      for (let i = 0; i < 30; i++) {
        const refused = await signIn();
        expect(refused.status).toBe(401);
        expect((refused.body as { code?: string }).code).toBe("unauthenticated");
      }
      const throttled = await signIn();
      expect(throttled.status).toBe(429);
      expect((throttled.body as { code?: string }).code).toBe("resource_exhausted");
      // The same address's key calls are refused too: one budget per address.
      expectThrottledAnthropic(
        await post(browser, `${t.baseUrl}/v1/messages`, { "x-api-key": t.secret }),
        t.gateway.app.config.authBlockMs / 1000,
      );
    } finally {
      await browser.close();
    }
  });

  it("ignores X-Forwarded-For unless TOLLGATE_TRUST_PROXY names the proxy", async () => {
    const spoofer = clientAt("127.0.0.6");
    try {
      const statuses: number[] = [];
      for (let i = 0; i < 33; i++) {
        const headers = { "x-api-key": guessedKey(), "x-forwarded-for": `203.0.113.${i}` };
        statuses.push((await post(spoofer, `${t.baseUrl}/v1/messages`, headers)).status);
      }
      expect(statuses.slice(0, 30)).toEqual(Array(30).fill(401));
      expect(statuses.slice(30)).toEqual(Array(3).fill(429));
    } finally {
      await spoofer.close();
    }
  });
});

describe("key guessing from an address a valid caller shares (issue 29)", () => {
  let t: TextGateway;
  const shared = clientAt("127.0.0.12");
  beforeAll(async () => {
    t = await startTextGateway({ TOLLGATE_RATE_LIMIT_RPM: "1000000" });
    await t.credit(FUNDS);
  });
  afterAll(async () => {
    await shared.close();
    await t?.close();
  });

  it("2,000 guesses from one address interleaved with 120 valid-key calls from it: all 120 served; keys it never used there get 429", async () => {
    const VALID_CALLS = 120;
    const sdk = sdkAt(t, shared);
    // The valid caller is at work behind the shared address before anyone guesses there.
    await sdk.messages.create(HELLO);
    // Guesses until the address is blocked, so that every valid call below is made during the block.
    let sent = 0;
    for (;;) {
      sent++;
      if ((await post(shared, `${t.baseUrl}/v1/messages`, { "x-api-key": guessedKey() })).status === 429)
        break;
    }
    expect(sent).toBe(t.gateway.app.config.authFailuresPerMinute + 1);
    const statuses: number[] = [];
    let guessing = true;
    const validLoop = (async () => {
      while (statuses.length < VALID_CALLS) {
        const { response } = await sdk.messages.create(HELLO).withResponse();
        statuses.push(response.status);
        // Spread over the guessing (answered a second apart per connection), not ahead of it.
        if (guessing) await new Promise((done) => setTimeout(done, 50));
      }
    })();
    const answers = await guess("127.0.0.12", t.baseUrl, GUESSES - sent);
    guessing = false;
    await validLoop;
    expect(statuses).toEqual(Array(VALID_CALLS).fill(200));
    // Every guess was refused unchecked: the block held throughout.
    expect(answers.every((a) => a.status === 429)).toBe(true);
    // A valid key that never authenticated from this address is refused there like a guess...
    const other = await accountWithKey(t.gateway.operator, "other");
    expectThrottledAnthropic(
      await post(shared, `${t.baseUrl}/v1/messages`, { "x-api-key": other.secret }),
      t.gateway.app.config.authBlockMs / 1000,
    );
    // ...while the known one also passes the core's port from the same address.
    const core = coreClientsAt(t.gateway.coreUrl, "127.0.0.12");
    const { balances } = await core.billing.getBalances({}, { headers: { "x-api-key": t.secret } });
    expect(balances.length).toBeGreaterThan(0);
    // No guess reached the provider; every valid call did, and was billed as ever.
    expect(t.upstream.requests).toHaveLength(1 + VALID_CALLS);
    await expectBilledNormally(t, 1 + VALID_CALLS);
  });
});

describe("key guessing behind a trusted proxy", () => {
  let t: TextGateway;
  const proxy = clientAt("127.0.0.7");
  beforeAll(async () => {
    t = await startTextGateway({ TOLLGATE_TRUST_PROXY: "127.0.0.7", TOLLGATE_AUTH_FAILURES_PER_MINUTE: "5" });
    await t.credit(FUNDS);
  });
  afterAll(async () => {
    await proxy.close();
    await t?.close();
  });

  it("counts the forwarded client's address: one client blocked, another behind the same proxy served", async () => {
    const from = (client: string, key: string) =>
      post(proxy, `${t.baseUrl}/v1/messages`, { "x-api-key": key, "x-forwarded-for": client });
    for (let i = 0; i < 5; i++) expect((await from("203.0.113.1", guessedKey())).status).toBe(401);
    expect((await from("203.0.113.1", guessedKey())).status).toBe(429);
    expect((await from("203.0.113.1", t.secret)).status).toBe(429);
    expect((await from("203.0.113.2", t.secret)).status).toBe(200);
    // A client that forwards its own header through the proxy: the proxy's entry (the last) counts.
    expect((await from("203.0.113.2, 203.0.113.1", t.secret)).status).toBe(429);
    await expectBilledNormally(t, 1);
  });
});

describe("key guessing across gateway hosts (Redis)", () => {
  let redis: RedisServer;
  let a: TextGateway;
  let b: TextGateway;
  const guesser = clientAt("127.0.0.8");
  const valid = clientAt("127.0.0.9");
  beforeAll(async () => {
    redis = await startRedis();
    a = await startTextGateway({ TOLLGATE_REDIS_URL: redis.url, TOLLGATE_AUTH_BLOCK_S: "120" });
    b = await startTextGateway({ TOLLGATE_REDIS_URL: redis.url, TOLLGATE_AUTH_BLOCK_S: "120" });
    await a.credit(FUNDS);
    await b.credit(FUNDS);
  });
  afterAll(async () => {
    await guesser.close();
    await valid.close();
    await a?.close();
    await b?.close();
    await redis?.stop();
  });

  it("two hosts share one budget per address: failures on either count, and both refuse the address", async () => {
    const hosts = [a, b];
    const statuses: number[] = [];
    for (let i = 0; i < 34; i++) {
      const answer = await post(guesser, `${hosts[i % 2]!.baseUrl}/v1/messages`, {
        "x-api-key": guessedKey(),
      });
      statuses.push(answer.status);
      if (answer.status === 429) expectThrottledAnthropic(answer, 120);
    }
    expect(statuses.slice(0, 30)).toEqual(Array(30).fill(401));
    expect(statuses.slice(30)).toEqual(Array(4).fill(429));
    for (const host of hosts) {
      expect((await post(guesser, `${host.baseUrl}/v1/messages`, { "x-api-key": host.secret })).status).toBe(
        429,
      );
      await sdkAt(host, valid).messages.create(HELLO);
      await expectBilledNormally(host, 1);
    }
    const peek = new Redis(redis.url);
    try {
      expect(await peek.exists(`${REDIS_KEY_PREFIX}:auth_failures:127.0.0.8`)).toBe(1);
    } finally {
      peek.disconnect();
    }
  });
});

describe("key guessing with the throttle off", () => {
  let t: TextGateway;
  const valid = clientAt("127.0.0.11");
  beforeAll(async () => {
    t = await startTextGateway({
      TOLLGATE_AUTH_FAILURES_PER_MINUTE: "0",
      TOLLGATE_RATE_LIMIT_RPM: "1000000",
    });
    await t.credit(FUNDS);
  });
  afterAll(async () => {
    await valid.close();
    await t?.close();
  });

  it("TOLLGATE_AUTH_FAILURES_PER_MINUTE=0 answers every guess 401, each one looked up", async () => {
    const { answers, before, during } = await guessWhileTiming(t, valid, "127.0.0.10");
    expect(answers).toHaveLength(GUESSES);
    expect(answers.every((a) => a.status === 401 && a.body.error?.type === "authentication_error")).toBe(
      true,
    );
    console.log(`key guessing, throttle off: ${GUESSES} × 401; ${latencies(before, during)}`);
  });
});
