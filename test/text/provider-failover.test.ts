/**
 * Issue 33 through the gateway: a providers file with two Anthropic endpoints (dev providers on
 * real sockets), the official SDK as the client. The first endpoint fails in every way the
 * router must fail over from — and in the ways it must not — and every call is held once,
 * charged once for what was delivered, and named by the endpoint that served it.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import Anthropic from "@anthropic-ai/sdk";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import {
  type DevUpstream,
  type RecordedRequest,
  type ScriptedEvent,
  type ScriptedReply,
  startDevUpstream,
} from "../../src/dev/provider/dev-upstream.js";
import { HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { tempDir } from "../helpers/process.js";
import { expectedCharge, startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

const INPUT_TOKENS = 40;
const WORDS = ["alpha", "bravo", "charlie", "delta"];
const OVERLOADED = { type: "error", error: { type: "overloaded_error", message: "Overloaded" } };

const messageStart: ScriptedEvent = {
  event: "message_start",
  data: {
    type: "message_start",
    message: {
      id: "msg_routed",
      type: "message",
      role: "assistant",
      model: "claude-haiku-4-5-20251001",
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: {
        input_tokens: INPUT_TOKENS,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
        output_tokens: 1,
      },
    },
  },
};
const blockStart: ScriptedEvent = {
  event: "content_block_start",
  data: { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
};
const deltas: ScriptedEvent[] = WORDS.map((word, i) => ({
  event: "content_block_delta",
  data: {
    type: "content_block_delta",
    index: 0,
    delta: { type: "text_delta", text: i === 0 ? word : ` ${word}` },
  },
}));
const ending: ScriptedEvent[] = [
  { event: "content_block_stop", data: { type: "content_block_stop", index: 0 } },
  {
    event: "message_delta",
    data: {
      type: "message_delta",
      delta: { stop_reason: "end_turn", stop_sequence: null },
      usage: { output_tokens: WORDS.length },
    },
  },
  { event: "message_stop", data: { type: "message_stop" } },
];
const WHOLE: ScriptedReply = { kind: "stream", events: [messageStart, blockStart, ...deltas, ...ending] };
const BEFORE_CONTENT: ScriptedReply = {
  kind: "stream",
  events: [messageStart, { event: "ping", data: { type: "ping" } }, { event: "error", data: OVERLOADED }],
};
const AFTER_CONTENT: ScriptedReply = {
  kind: "stream",
  events: [messageStart, blockStart, ...deltas.slice(0, 2), { event: "error", data: OVERLOADED }],
};
const STATUS_529: ScriptedReply = { kind: "json", status: 529, body: OVERLOADED };
const CHARGE = expectedCharge("model-haiku-4-5", { input: INPUT_TOKENS, output: WORDS.length });

const REQUEST = {
  model: "model-haiku-4-5",
  max_tokens: 100,
  messages: [{ role: "user" as const, content: "Go" }],
};

/** Only message calls are scripted: the router's count_tokens calls get the dev answers. */
const messages = (reply: () => ScriptedReply | undefined) => (request: RecordedRequest) =>
  request.path.startsWith("/v1/messages") && !request.path.includes("count_tokens") ? reply() : undefined;

describe("providers file: failover before the first byte, through the gateway (official SDK)", () => {
  let t: TextGateway;
  let first: DevUpstream;
  let firstReply: (() => ScriptedReply | undefined) | undefined;
  let client: Anthropic;
  const dir = tempDir();

  /** The resolved rows, newest first, once none is pending. */
  async function settledRows(count: number) {
    for (let i = 0; i < 400; i++) {
      const rows = await t.usage();
      if (rows.length >= count && rows.every((row) => row.status !== HoldStatus.PENDING)) return rows;
      await sleep(25);
    }
    throw new Error("calls were never settled");
  }

  /** The endpoint recorded on each hold's resolution, by request id. */
  function endpoints(): Map<string, string> {
    const rows = t.gateway.db
      .prepare(
        "SELECT h.request_id AS id, r.endpoint AS endpoint FROM holds h JOIN hold_resolutions r ON r.hold_id = h.id",
      )
      .all() as { id: string; endpoint: string }[];
    return new Map(rows.map((row) => [row.id, row.endpoint]));
  }

  beforeAll(async () => {
    first = await startDevUpstream({ script: messages(() => firstReply?.()) });
    const file = join(dir.path, "providers.json");
    t = await startTextGateway((secondUrl) => {
      writeFileSync(
        file,
        JSON.stringify({
          endpoints: [
            { name: "first", kind: "anthropic", baseUrl: first.url, apiKey: { env: "TEST_FIRST_KEY" } },
            {
              name: "second",
              kind: "anthropic",
              baseUrl: secondUrl,
              apiKey: { env: "TEST_SECOND_KEY" },
              connections: 128,
            },
          ],
          text: { "model-haiku-4-5": ["first", "second"] },
          // Flapping is the point here: the breaker stays out of the way.
          breaker: { failures: 1_000_000 },
        }),
      );
      return { TOLLGATE_PROVIDERS: file, TEST_FIRST_KEY: "sk-first", TEST_SECOND_KEY: "sk-second" };
    });
    await t.credit(100_000_000n);
    client = new Anthropic({ apiKey: t.secret, baseURL: t.baseUrl, maxRetries: 0 });
  });
  beforeEach(() => {
    firstReply = undefined;
    t.script(undefined);
  });
  afterAll(async () => {
    t.expectSoundLedger();
    await t.close();
    await first.close();
    dir.cleanup();
  });

  it("answers 529 on the first endpoint → served by the second, byte for byte, charged once, named", async () => {
    firstReply = () => STATUS_529;
    t.script(messages(() => WHOLE));
    const before = first.messageRequests().length;
    const response = await fetch(`${t.baseUrl}/v1/messages`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-api-key": t.secret,
        "anthropic-version": "2023-06-01",
      },
      body: JSON.stringify({ ...REQUEST, stream: true }),
    });
    expect(response.status).toBe(200);
    const relayed = await response.text();
    // What the second endpoint itself sends for the same script, read straight from it.
    const direct = await fetch(`${t.upstream.url}/v1/messages`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-api-key": "sk-second",
        "anthropic-version": "2023-06-01",
      },
      body: JSON.stringify({ ...REQUEST, model: "claude-haiku-4-5", stream: true }),
    });
    expect(relayed).toBe(await direct.text());
    expect(first.messageRequests().length - before).toBe(1);
    const [row] = await settledRows(1);
    expect(row!.status).toBe(HoldStatus.SETTLED);
    expect(row!.amount).toBe(CHARGE);
    expect(endpoints().get(row!.requestId)).toBe("second");
    // The signed receipt names it too (docs/receipts.md), its payload read as any holder would.
    const receipt = await fetch(`${t.baseUrl}/v1/receipts/${encodeURIComponent(row!.requestId)}`, {
      headers: { "x-api-key": t.secret },
    });
    expect(receipt.status).toBe(200);
    const jws = ((await receipt.json()) as { signature?: string }).signature ?? "";
    const payload = JSON.parse(Buffer.from(jws.split(".")[1] ?? "", "base64url").toString()) as Record<
      string,
      unknown
    >;
    expect(payload).toMatchObject({ model: "model-haiku-4-5", endpoint: "second", status: "settled" });
  });

  it("the SDK's stream succeeds when the first endpoint sends overloaded_error before content", async () => {
    firstReply = () => BEFORE_CONTENT;
    t.script(messages(() => WHOLE));
    const rowsBefore = (await t.usage()).length;
    const message = await client.messages.stream(REQUEST).finalMessage();
    expect(message.content.map((block) => (block.type === "text" ? block.text : block.type))).toEqual([
      WORDS.join(" "),
    ]);
    const rows = await settledRows(rowsBefore + 1);
    expect(rows).toHaveLength(rowsBefore + 1);
    expect(rows[0]!.amount).toBe(CHARGE);
    expect(endpoints().get(rows[0]!.requestId)).toBe("second");
  });

  it("an error after content ends the stream with it: no second attempt, charged for what was delivered", async () => {
    firstReply = () => AFTER_CONTENT;
    const secondBefore = t.upstream.messageRequests().length;
    const rowsBefore = (await t.usage()).length;
    const stream = client.messages.stream(REQUEST);
    const texts: string[] = [];
    stream.on("text", (text) => texts.push(text));
    await expect(stream.finalMessage()).rejects.toMatchObject({
      error: { error: { type: "overloaded_error" } },
    });
    expect(texts.join("")).toBe("alpha bravo");
    expect(t.upstream.messageRequests().length).toBe(secondBefore);
    const rows = await settledRows(rowsBefore + 1);
    expect(rows).toHaveLength(rowsBefore + 1);
    expect(rows[0]!.amount).toBe(expectedCharge("model-haiku-4-5", { input: INPUT_TOKENS, output: 2 }));
    expect(endpoints().get(rows[0]!.requestId)).toBe("first");
  });

  it("a caller's 400 from the first endpoint is not retried and charges nothing", async () => {
    firstReply = () => ({
      kind: "json",
      status: 400,
      body: { type: "error", error: { type: "invalid_request_error", message: "messages: bad" } },
    });
    const secondBefore = t.upstream.messageRequests().length;
    const rowsBefore = (await t.usage()).length;
    await expect(client.messages.create(REQUEST)).rejects.toBeInstanceOf(Anthropic.BadRequestError);
    expect(t.upstream.messageRequests().length).toBe(secondBefore);
    const rows = await settledRows(rowsBefore + 1);
    expect(rows[0]!.status).toBe(HoldStatus.RELEASED);
    expect(rows[0]!.amount).toBe(0n);
  });

  it("64 concurrent streams while the first endpoint flaps: each served or ended with the provider's error, none charged twice", async () => {
    const flaps: ScriptedReply[] = [
      STATUS_529,
      BEFORE_CONTENT,
      WHOLE,
      AFTER_CONTENT,
      { kind: "json", status: 503, body: OVERLOADED },
    ];
    let n = 0;
    firstReply = () => flaps[n++ % flaps.length];
    t.script(messages(() => WHOLE));
    const rowsBefore = (await t.usage()).length;
    const outcomes = await Promise.all(
      Array.from({ length: 64 }, async () => {
        try {
          const message = await client.messages.stream(REQUEST).finalMessage();
          return message.content.map((block) => (block.type === "text" ? block.text : "")).join("");
        } catch (error) {
          return `error ${(error as { error?: { error?: { type?: string } } }).error?.error?.type ?? String(error)}`;
        }
      }),
    );
    const served = outcomes.filter((outcome) => outcome === WORDS.join(" ")).length;
    const failed = outcomes.filter((outcome) => outcome === "error overloaded_error").length;
    expect(served + failed).toBe(64);
    const rows = (await settledRows(rowsBefore + 64)).slice(0, 64);
    expect(rows).toHaveLength(64);
    // One row per call; served calls charged their listed price exactly once, cut ones what they got.
    expect(rows.filter((row) => row.amount === CHARGE)).toHaveLength(served);
    const partial = expectedCharge("model-haiku-4-5", { input: INPUT_TOKENS, output: 2 });
    expect(rows.filter((row) => row.amount === partial)).toHaveLength(failed);
    expect(new Set(rows.map((row) => row.requestId)).size).toBe(64);
    t.expectSoundLedger();
  });
});

describe("providers file: the breaker seen in /v1/health and the metrics", () => {
  let t: TextGateway;
  let first: DevUpstream;
  const dir = tempDir();

  beforeAll(async () => {
    first = await startDevUpstream({ script: messages(() => STATUS_529) });
    const file = join(dir.path, "providers.yaml");
    t = await startTextGateway((secondUrl) => {
      writeFileSync(
        file,
        [
          "endpoints:",
          `  - { name: first, kind: anthropic, baseUrl: "${first.url}", apiKey: { env: TEST_FIRST_KEY } }`,
          `  - { name: second, kind: anthropic, baseUrl: "${secondUrl}", apiKey: { env: TEST_SECOND_KEY } }`,
          "text:",
          "  model-haiku-4-5: [first, second]",
          "breaker: { failures: 2, windowMs: 60000, cooldownMs: 600000 }",
        ].join("\n"),
      );
      return {
        TOLLGATE_PROVIDERS: file,
        TEST_FIRST_KEY: "sk-first",
        TEST_SECOND_KEY: "sk-second",
        TOLLGATE_HEALTH_INTERVAL_S: "1",
        // Opened, never listened on here: the registry is scraped in process.
        TOLLGATE_METRICS_PORT: "19999",
      };
    });
    await t.credit(10_000_000n);
  });
  afterAll(async () => {
    t.expectSoundLedger();
    await t.close();
    await first.close();
    dir.cleanup();
  });

  it("opens after two failures: later calls skip the endpoint; health degrades and the metrics say why", async () => {
    const client = new Anthropic({ apiKey: t.secret, baseURL: t.baseUrl, maxRetries: 0 });
    // Not streamed: the second endpoint's own (dev) answers.
    for (let i = 0; i < 4; i++) await client.messages.create(REQUEST);
    expect(first.messageRequests()).toHaveLength(2);
    let health: { status: string; dependencies: { name: string; status: string }[] } | undefined;
    for (let i = 0; i < 100; i++) {
      const response = await fetch(`${t.baseUrl}/v1/health`);
      expect(response.status).toBe(200);
      health = (await response.json()) as typeof health;
      if (health!.dependencies.some((d) => d.name === "provider endpoints" && d.status === "degraded")) break;
      await sleep(50);
    }
    expect(health).toMatchObject({ status: "degraded" });
    expect(health!.dependencies).toContainEqual(
      expect.objectContaining({ name: "provider endpoints", status: "degraded" }),
    );
    const { text } = await t.gateway.app.metrics!.registry.scrape();
    expect(text).toContain('tollgate_provider_breaker_open{endpoint="first",model="model-haiku-4-5"} 1');
    expect(text).toContain('tollgate_provider_breaker_open{endpoint="second",model="model-haiku-4-5"} 0');
    expect(text).toMatch(
      /tollgate_provider_endpoint_events_total\{endpoint="first",model="model-haiku-4-5",event="failover",reason=""\} 2/,
    );
    expect(text).toMatch(
      /tollgate_provider_endpoint_events_total\{endpoint="first",model="model-haiku-4-5",event="failure",reason="529"\} 2/,
    );
    expect(text).toMatch(
      /tollgate_provider_endpoint_events_total\{endpoint="second",model="model-haiku-4-5",event="request",reason=""\} 4/,
    );
    const rows = await t.usage();
    expect(rows.filter((row) => row.status === HoldStatus.SETTLED)).toHaveLength(4);
  });
});
