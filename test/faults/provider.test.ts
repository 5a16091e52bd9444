import { createServer } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import Anthropic from "@anthropic-ai/sdk";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { RawEnding, RecordedRequest, ScriptedReply } from "../../src/dev/provider/dev-upstream.js";
import { HoldStatus, type UsageRow } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { encodeSseFrame } from "../../src/upstream/sse.js";
import { type OpenStream, openStream, type ReadEvent } from "../helpers/sse-client.js";
import { expectedCharge, startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

// A misbehaving provider on a real socket (the dev upstream's raw replies: garbage, resets,
// stalls, streams that never end, lying usage), against the documented mapping of
// docs/inference.md ("When the provider misbehaves") and docs/images.md: each fault gets its
// documented status and error type, and exactly its documented charge in micro-dollars —
// nothing for what was not delivered, input in full plus the delivered output for a stream cut
// after content, never a silent $0, never above the hold — with the ledger audited after each.

const HEADERS_MS = 400;
const IDLE_MS = 400;
const RESPONSE_MS = 1_500;
const PING_MS = 200;
/** Scheduling slack for "answered within the documented timeout" (2 shared cores). */
const SLACK_MS = 3_000;

const MODEL = "model-haiku-4-5";
const INPUT = 40;
const WORDS = ["alpha", "bravo", "charlie", "delta", "echo"];
const REQUEST = { model: MODEL, max_tokens: 100, messages: [{ role: "user", content: "Go" }] };
const STREAM = { ...REQUEST, stream: true };
/** The event types of the Anthropic stream format. */
const ANTHROPIC_EVENTS = new Set([
  "message_start",
  "content_block_start",
  "content_block_delta",
  "content_block_stop",
  "message_delta",
  "message_stop",
  "ping",
  "error",
]);

const sse = (event: string, data: unknown) =>
  encodeSseFrame({ kind: "event", event, data: typeof data === "string" ? data : JSON.stringify(data) });

/** `usage: null` leaves usage out. */
function start(usage: unknown = { input_tokens: INPUT, output_tokens: 1 }): string {
  const message = {
    id: "msg_fault",
    type: "message",
    role: "assistant",
    model: "claude-haiku-4-5-20251001",
    content: [],
    stop_reason: null,
    stop_sequence: null,
    ...(usage === null ? {} : { usage }),
  };
  return sse("message_start", { type: "message_start", message });
}
const BLOCK = sse("content_block_start", {
  type: "content_block_start",
  index: 0,
  content_block: { type: "text", text: "" },
});
const PING = sse("ping", { type: "ping" });
/** The first `n` words, one per delta: the dev counter makes each exactly one token. */
const words = (n: number) =>
  WORDS.slice(0, n).map((word, i) =>
    sse("content_block_delta", {
      type: "content_block_delta",
      index: 0,
      delta: { type: "text_delta", text: i === 0 ? word : ` ${word}` },
    }),
  );
function ending(usage: unknown = { output_tokens: 3 }): string[] {
  return [
    sse("content_block_stop", { type: "content_block_stop", index: 0 }),
    sse("message_delta", {
      type: "message_delta",
      delta: { stop_reason: "end_turn", stop_sequence: null },
      ...(usage === null ? {} : { usage }),
    }),
    sse("message_stop", { type: "message_stop" }),
  ];
}
/** A whole stream of three words whose usage is `startUsage` and `finalUsage`. */
const whole = (startUsage?: unknown, finalUsage?: unknown) => [
  start(startUsage),
  BLOCK,
  ...words(3),
  ...ending(finalUsage),
];

function streamReply(chunks: string[], ending: RawEnding = "end", chunkDelayMs = 0): ScriptedReply {
  return { kind: "raw", headers: { "content-type": "text/event-stream" }, chunks, ending, chunkDelayMs };
}
const JSON_HEADERS = { "content-type": "application/json" };
/** `usage: null` leaves usage out. */
function message(usage: unknown, text = "alpha bravo charlie"): string {
  return JSON.stringify({
    id: "msg_fault",
    type: "message",
    role: "assistant",
    model: "claude-haiku-4-5-20251001",
    content: [{ type: "text", text }],
    stop_reason: "end_turn",
    stop_sequence: null,
    ...(usage === null ? {} : { usage }),
  });
}
const jsonReply = (body: string): ScriptedReply => ({ kind: "raw", headers: JSON_HEADERS, chunks: [body] });

/** Every event the client received is one of the format's, with its own type in JSON data. */
function expectAnthropicFrames(events: readonly ReadEvent[]): void {
  for (const { event, data } of events) {
    expect(ANTHROPIC_EVENTS).toContain(event);
    expect(JSON.parse(data)).toMatchObject({ type: event });
  }
}

/** The client's stream ended with the gateway's own error event of `type`, and nothing after. */
function expectErrorEnd(events: readonly ReadEvent[], type: string): void {
  expectAnthropicFrames(events);
  const last = events.at(-1)!;
  expect(last.event).toBe("error");
  expect(JSON.parse(last.data)).toMatchObject({ type: "error", error: { type } });
  expect(events.filter((e) => e.event === "error")).toHaveLength(1);
}

const delivered = (events: readonly ReadEvent[]) =>
  events.filter((e) => e.event === "content_block_delta").length;

describe("a misbehaving text provider", () => {
  let t: TextGateway;

  /** Answers the gateway's calls with `reply`; count_tokens goes to the dev counter unless `counter` is given. */
  function provider(reply: ScriptedReply, counter?: ScriptedReply): void {
    t.script((request: RecordedRequest) =>
      request.path.startsWith("/v1/messages/count_tokens") ? counter : reply,
    );
  }

  /** The newest call's usage row once it is no longer pending. */
  async function resolvedRow(): Promise<UsageRow> {
    for (let i = 0; i < 200; i++) {
      const [row] = await t.usage();
      if (row !== undefined && row.status !== HoldStatus.PENDING) return row;
      await sleep(25);
    }
    throw new Error("the call was never settled");
  }

  /**
   * Runs `call`, then checks its row: settled for exactly `charge` µ$ (released when 0n), the
   * balance lower by exactly that, and the ledger sound.
   */
  async function expectCharged<T>(
    charge: bigint,
    call: () => Promise<T>,
  ): Promise<{ result: T; row: UsageRow }> {
    const before = await t.available();
    const result = await call();
    const row = await resolvedRow();
    expect(row.status).toBe(charge === 0n ? HoldStatus.RELEASED : HoldStatus.SETTLED);
    expect(row.amount).toBe(charge);
    expect(row.amount).toBeLessThanOrEqual(row.heldAmount);
    expect(await t.available()).toBe(before - charge);
    t.expectSoundLedger();
    return { result, row };
  }

  const open = (body: unknown = STREAM): Promise<OpenStream> =>
    openStream(`${t.baseUrl}/v1/messages`, body, { "x-api-key": t.secret });

  async function streamed(reply: ScriptedReply, counter?: ScriptedReply) {
    provider(reply, counter);
    const stream = await open();
    expect(stream.status).toBe(200);
    return stream.rest();
  }

  async function post(body: unknown = REQUEST) {
    const response = await fetch(`${t.baseUrl}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": t.secret, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    return { status: response.status, headers: response.headers, body: await response.json() };
  }

  /** What the dev counter says the request's input is (the gateway's own count route). */
  async function countedInput(body: Record<string, unknown> = REQUEST): Promise<number> {
    const { model, messages } = body;
    const response = await fetch(`${t.baseUrl}/v1/messages/count_tokens`, {
      method: "POST",
      headers: { "x-api-key": t.secret, "content-type": "application/json" },
      body: JSON.stringify({ model, messages }),
    });
    return ((await response.json()) as { input_tokens: number }).input_tokens;
  }

  const charge = (input: number, output: number) => expectedCharge(MODEL, { input, output });

  beforeAll(async () => {
    t = await startTextGateway({
      TOLLGATE_UPSTREAM_HEADERS_TIMEOUT_MS: `${HEADERS_MS}`,
      TOLLGATE_UPSTREAM_IDLE_TIMEOUT_MS: `${IDLE_MS}`,
      TOLLGATE_UPSTREAM_RESPONSE_TIMEOUT_MS: `${RESPONSE_MS}`,
    });
    await t.credit(50_000_000n);
  });
  afterEach(() => t.script(undefined));
  afterAll(async () => {
    t.expectSoundLedger();
    await t.close();
  });

  describe("garbage in a stream", () => {
    it.each([
      [
        "a frame without an event name",
        `data: ${JSON.stringify({ type: "content_block_delta", index: 0 })}\n\n`,
      ],
      ["data that is not JSON", "event: content_block_delta\ndata: not json at all\n\n"],
      ["data whose type is not its event's", sse("content_block_delta", { type: "message_stop" })],
      ["a line that is not server-sent events", "\u0000\u00ff<html>garbage</html>\n\n"],
      ["a second message_start", start()],
    ])(
      "after two words, %s ends the stream with an api_error event, charged input + the two words",
      async (_name, garbage) => {
        const { result: events } = await expectCharged(charge(INPUT, 2), () =>
          streamed(streamReply([start(), BLOCK, ...words(2), garbage, ...words(3).slice(2), ...ending()])),
        );
        expectErrorEnd(events, "api_error");
        expect(delivered(events)).toBe(2);
        expect(events.some((e) => e.event === "message")).toBe(false);
      },
    );

    it.each([
      ["HTML", ["<html><body>502 Bad Gateway</body></html>\n"]],
      [
        "data-only frames (no event names)",
        [start(), ...words(3)].map((frame) => frame.replace(/^event: .*\n/, "")),
      ],
      ["a JSON body", [`${message({ input_tokens: INPUT, output_tokens: 3 })}\n`]],
      ["content without message_start", [BLOCK, ...words(3), ...ending()]],
    ])("a 200 stream of %s from the start delivers nothing and charges nothing", async (_name, chunks) => {
      const { result: events } = await expectCharged(0n, () => streamed(streamReply(chunks)));
      // Nothing of the garbage reached the client: only the gateway's error event.
      expect(events.map((e) => e.event)).toEqual(["error"]);
      expectErrorEnd(events, "api_error");
    });

    it.each([
      ["closed", "close"],
      ["reset", "reset"],
      ["ended", "end"],
    ] as const)(
      "a 200 stream %s after its headers, before any event, ends in an api_error event, nothing charged",
      async (_name, ending) => {
        const { result: events } = await expectCharged(0n, () => streamed(streamReply([], ending)));
        expect(events.map((e) => e.event)).toEqual(["error"]);
        expectErrorEnd(events, "api_error");
      },
    );

    it("the SDK sees garbage as an api_error, not as a stream that ended well", async () => {
      provider(streamReply([start(), BLOCK, ...words(2), "data: {garbage\n\n", ...ending()]));
      const client = new Anthropic({ baseURL: t.baseUrl, apiKey: t.secret, maxRetries: 0 });
      await expectCharged(charge(INPUT, 2), async () => {
        const error = await client.messages
          .stream(STREAM as unknown as Anthropic.MessageStreamParams)
          .finalMessage()
          .then(
            () => undefined,
            (e: unknown) => e,
          );
        expect(error).toBeInstanceOf(Anthropic.APIError);
        expect((error as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({
          type: "error",
          error: { type: "api_error" },
        });
      });
    });

    it("a provider that keeps the connection open after message_stop is left one ping interval later", async () => {
      // Idle and response timeouts far above the ping interval: only the relay's own rule ends it.
      const lingering = await startTextGateway({
        TOLLGATE_STREAM_PING_MS: `${PING_MS}`,
        TOLLGATE_UPSTREAM_IDLE_TIMEOUT_MS: "30000",
        TOLLGATE_UPSTREAM_RESPONSE_TIMEOUT_MS: "60000",
      });
      try {
        await lingering.credit(1_000_000n);
        lingering.script(() => streamReply(whole(undefined, { output_tokens: 3 }), "hang"));
        const started = Date.now();
        const stream = await openStream(`${lingering.baseUrl}/v1/messages`, STREAM, {
          "x-api-key": lingering.secret,
        });
        const events = await stream.rest();
        expect(Date.now() - started).toBeLessThan(PING_MS + SLACK_MS);
        expectAnthropicFrames(events);
        expect(events.at(-1)?.event).toBe("message_stop");
        await expect.poll(async () => (await lingering.usage())[0]?.status).toBe(HoldStatus.SETTLED);
        expect((await lingering.usage())[0]?.amount).toBe(charge(INPUT, 3));
        expect(await lingering.available()).toBe(1_000_000n - charge(INPUT, 3));
        lingering.expectSoundLedger();
      } finally {
        await lingering.close();
      }
    });

    it("anything after message_stop is not relayed, and the answer stands", async () => {
      const { result: events } = await expectCharged(charge(INPUT, 3), () =>
        streamed(streamReply([...whole(undefined, { output_tokens: 3 }), "garbage after the end\n\n"])),
      );
      expectAnthropicFrames(events);
      expect(events.at(-1)?.event).toBe("message_stop");
    });
  });

  describe("a stream broken after some content is charged its input in full + the delivered output", () => {
    it.each([
      ["reset (TCP RST)", "reset"],
      ["closed without ending the response", "close"],
      ["ended cleanly before message_stop", "end"],
    ] as const)("%s after three words", async (_name, ending) => {
      const { result: events, row } = await expectCharged(charge(INPUT, 3), () =>
        streamed(streamReply([start(), BLOCK, ...words(3), PING], ending, 20)),
      );
      expectErrorEnd(events, "api_error");
      expect(delivered(events)).toBe(3);
      expect(row.usage?.inputTokens).toBe(BigInt(INPUT));
      expect(row.usage?.outputTokens).toBe(3n);
    });

    it("input reported as 0 in message_start is not believed: the input is counted", async () => {
      const input = await countedInput();
      await expectCharged(charge(input, 3), () =>
        streamed(
          streamReply([start({ input_tokens: 0, output_tokens: 0 }), BLOCK, ...words(3), PING], "reset", 20),
        ),
      );
    });

    it("a counter that answers nonsense too: the output is estimated at 4 characters a token", async () => {
      // The provider's count_tokens says 0 for everything: delivered text has tokens, so the
      // gateway uses its estimate (the 19 characters "alpha bravo charlie" → 5 tokens).
      const nonsense: ScriptedReply = { kind: "json", status: 200, body: { input_tokens: 0 } };
      const { result: events } = await expectCharged(
        charge(INPUT, Math.ceil("alpha bravo charlie".length / 4)),
        () => streamed(streamReply([start(), BLOCK, ...words(3), PING], "reset", 20), nonsense),
      );
      expectErrorEnd(events, "api_error");
    });

    it("a provider error event mid-stream (overloaded) is relayed as it is, charged the same way", async () => {
      const overloaded = { type: "error", error: { type: "overloaded_error", message: "Overloaded" } };
      const { result: events } = await expectCharged(charge(INPUT, 2), () =>
        streamed(streamReply([start(), BLOCK, ...words(2), sse("error", overloaded), ...words(3).slice(2)])),
      );
      expectErrorEnd(events, "overloaded_error");
      expect(delivered(events)).toBe(2);
    });
  });

  describe("usage that is missing or cannot be true is never a silent $0", () => {
    it.each([
      ["without any usage", null, null],
      ["reporting zeros", { input_tokens: 0, output_tokens: 0 }, { output_tokens: 0 }],
      ["reporting negative counts", { input_tokens: -40, output_tokens: 1 }, { output_tokens: -3 }],
      ["reporting an absurd count", { input_tokens: INPUT, output_tokens: 1 }, { output_tokens: 2e9 }],
      ["reporting fractions", { input_tokens: 40.5, output_tokens: 1 }, { output_tokens: 3 }],
    ])("a 200 stream %s is charged the gateway's own count", async (_name, startUsage, finalUsage) => {
      const before = t.gateway.app.counters!.count("missing_usage");
      const input = await countedInput();
      const { result: events } = await expectCharged(charge(input, 3), () =>
        streamed(streamReply(whole(startUsage, finalUsage))),
      );
      expectAnthropicFrames(events);
      expect(events.at(-1)?.event).toBe("message_stop");
      expect(t.gateway.app.counters!.count("missing_usage")).toBe(before + 1);
    });

    it.each([
      ["without any usage", null],
      ["reporting zeros", { input_tokens: 0, output_tokens: 0 }],
      ["reporting negative counts", { input_tokens: -40, output_tokens: -3 }],
      ["reporting an absurd count", { input_tokens: INPUT, output_tokens: 2e9 }],
    ])("a non-streaming 200 %s is delivered and charged the gateway's own count", async (_name, usage) => {
      const input = await countedInput();
      provider(jsonReply(message(usage)));
      const { result } = await expectCharged(charge(input, 3), () => post());
      expect(result.status).toBe(200);
      expect(result.body).toMatchObject({ type: "message", content: [{ text: "alpha bravo charlie" }] });
    });
  });

  describe("an answer far larger than max_tokens allows", () => {
    it("a stream reporting 5,000 output tokens for max_tokens 100 is charged 100", async () => {
      const before = t.gateway.app.counters!.count("capped_charge");
      await expectCharged(charge(INPUT, 100), () =>
        streamed(streamReply(whole(undefined, { output_tokens: 5_000 }))),
      );
      expect(t.gateway.app.counters!.count("capped_charge")).toBe(before + 1);
    });

    it("a non-streaming answer reporting 5,000 output tokens for max_tokens 100 is charged 100", async () => {
      provider(jsonReply(message({ input_tokens: INPUT, output_tokens: 5_000 })));
      const { result } = await expectCharged(charge(INPUT, 100), () => post());
      expect(result.status).toBe(200);
    });

    it("a cut stream that delivered more words than max_tokens is charged max_tokens", async () => {
      const body = { ...STREAM, max_tokens: 2 };
      provider(streamReply([start(), BLOCK, ...words(5), PING], "reset", 20));
      await expectCharged(charge(INPUT, 2), async () => {
        const stream = await open(body);
        return stream.rest();
      });
    });

    it("a call that may loop (a server tool) is charged at most its hold", async () => {
      const body = {
        ...REQUEST,
        tools: [{ type: "web_search_20250305", name: "web_search", max_uses: 1 }],
      };
      // Held pass by pass, the call goes to the provider as a stream (its boundaries show only
      // there): the provider answers in the format it was asked for.
      provider(streamReply(whole(undefined, { input_tokens: INPUT, output_tokens: 900_000_000 })));
      const response = await post(body);
      expect(response.status).toBe(200);
      const row = await resolvedRow();
      expect(row.status).toBe(HoldStatus.SETTLED);
      expect(row.heldAmount).toBeGreaterThan(charge(INPUT, 100));
      // 900M output tokens at $5/M would be $4,500: the caller pays the hold it was checked against.
      expect(row.amount).toBe(row.heldAmount);
      t.expectSoundLedger();
    });
  });

  describe("a provider that does not answer", () => {
    it("refused connections: 502 api_error, nothing charged", async () => {
      const closed = await closedPortUrl();
      const refused = await startTextGateway({ TOLLGATE_ANTHROPIC_URL: closed });
      try {
        await refused.credit(1_000_000n);
        const response = await fetch(`${refused.baseUrl}/v1/messages`, {
          method: "POST",
          headers: { "x-api-key": refused.secret, "content-type": "application/json" },
          body: JSON.stringify(STREAM),
        });
        expect(response.status).toBe(502);
        expect(response.headers.get("x-request-id")).toBeTruthy();
        expect(await response.json()).toMatchObject({ type: "error", error: { type: "api_error" } });
        const [row] = await refused.usage();
        expect(row).toMatchObject({ status: HoldStatus.RELEASED, amount: 0n });
        expect(await refused.available()).toBe(1_000_000n);
        refused.expectSoundLedger();
      } finally {
        await refused.close();
      }
    });

    it.each([
      ["reset before the headers", { kind: "reset" }],
      ["closed before the headers", { kind: "destroy" }],
    ] as const)("%s: 502 api_error, nothing charged", async (_name, reply) => {
      provider(reply);
      const { result } = await expectCharged(0n, () => post(STREAM));
      expect(result.status).toBe(502);
      expect(result.headers.get("x-request-id")).toBeTruthy();
      expect(result.body).toMatchObject({ type: "error", error: { type: "api_error" } });
    });

    it.each([false, true])(
      "slow headers (stream: %s): 504 timeout_error within the headers timeout, nothing charged",
      async (stream) => {
        provider({ kind: "hang" });
        const started = Date.now();
        const { result } = await expectCharged(0n, () => post(stream ? STREAM : REQUEST));
        expect(Date.now() - started).toBeLessThan(HEADERS_MS + SLACK_MS);
        expect(result.status).toBe(504);
        expect(result.body).toMatchObject({ type: "error", error: { type: "timeout_error" } });
      },
    );
  });

  describe("a provider that never finishes", () => {
    it("a stream silent after two words ends with timeout_error at the idle timeout, charged input + two words", async () => {
      const started = Date.now();
      const { result: events } = await expectCharged(charge(INPUT, 2), () =>
        streamed(streamReply([start(), BLOCK, ...words(2)], "hang")),
      );
      expect(Date.now() - started).toBeLessThan(IDLE_MS + SLACK_MS);
      expectErrorEnd(events, "timeout_error");
      expect(delivered(events)).toBe(2);
    });

    it("a stream that never ends (pings forever) is cut at the response timeout, charged input + two words", async () => {
      const started = Date.now();
      const { result: events } = await expectCharged(charge(INPUT, 2), () =>
        streamed(streamReply([start(), BLOCK, ...words(2)], { repeat: PING, everyMs: 50 })),
      );
      const elapsed = Date.now() - started;
      expect(elapsed).toBeGreaterThanOrEqual(RESPONSE_MS - 100);
      expect(elapsed).toBeLessThan(RESPONSE_MS + SLACK_MS);
      expectErrorEnd(events, "timeout_error");
      expect(delivered(events)).toBe(2);
    });

    it("a non-streaming body trickled forever is a 504 at the response timeout, nothing charged", async () => {
      provider({
        kind: "raw",
        headers: JSON_HEADERS,
        chunks: ['{"type":"message"'],
        ending: { repeat: " ", everyMs: 50 },
      });
      const started = Date.now();
      const { result } = await expectCharged(0n, () => post());
      expect(Date.now() - started).toBeLessThan(RESPONSE_MS + SLACK_MS);
      expect(result.status).toBe(504);
      expect(result.body).toMatchObject({ type: "error", error: { type: "timeout_error" } });
    });
  });

  describe("a non-streaming 200 that is not a message", () => {
    it.each([
      ["not JSON", jsonReply("<html>oops</html>")],
      [
        "truncated",
        {
          kind: "raw",
          headers: { ...JSON_HEADERS, "content-length": "500" },
          chunks: [message({ input_tokens: INPUT, output_tokens: 3 }).slice(0, 60)],
          ending: "close",
        },
      ],
      [
        "an error object with status 200",
        jsonReply('{"type":"error","error":{"type":"api_error","message":"x"}}'),
      ],
      ["empty", jsonReply("")],
    ] as [string, ScriptedReply][])("%s: 502 api_error, nothing charged", async (_name, reply) => {
      provider(reply);
      const { result } = await expectCharged(0n, () => post());
      expect(result.status).toBe(502);
      expect(result.headers.get("x-request-id")).toBeTruthy();
      expect(result.body).toMatchObject({ type: "error", error: { type: "api_error" } });
    });
  });

  it("the gateway is healthy afterwards: a normal call is answered and charged its usage", async () => {
    provider(streamReply(whole(undefined, { output_tokens: 3 })));
    const { result: events } = await expectCharged(charge(INPUT, 3), async () => (await open()).rest());
    expect(events.at(-1)?.event).toBe("message_stop");
  });
});

describe("a misbehaving image provider", () => {
  let t: TextGateway;

  beforeAll(async () => {
    t = await startTextGateway((upstream) => ({
      TOLLGATE_GEMINI_URL: upstream,
      TOLLGATE_OPENAI_IMAGES_URL: `${upstream}/v1`,
      TOLLGATE_IMAGE_MODELS: "image-2=openai:gpt-image-1",
      TOLLGATE_UPSTREAM_HEADERS_TIMEOUT_MS: `${HEADERS_MS}`,
      TOLLGATE_UPSTREAM_RESPONSE_TIMEOUT_MS: `${RESPONSE_MS}`,
    }));
    await t.credit(10_000_000n);
  });
  afterEach(() => t.script(undefined));
  afterAll(async () => {
    t.expectSoundLedger();
    await t.close();
  });

  const ROUTES = {
    gemini: { model: "image-pro", path: ":generateContent" },
    openai: { model: "image-2", path: "/v1/images/generations" },
  } as const;
  const truncated = (body: string): ScriptedReply => ({
    kind: "raw",
    headers: { ...JSON_HEADERS, "content-length": "1000" },
    chunks: [body],
    ending: "close",
  });
  const FAULTS: Record<keyof typeof ROUTES, [string, number, ScriptedReply][]> = {
    gemini: [
      ["garbage JSON", 502, jsonReply("{candidates: [oops")],
      ["a truncated body", 502, truncated('{"candidates":[{"content":{"parts":[{"inlineData":{"data":"iVBO')],
      [
        "a 200 without an image",
        502,
        {
          kind: "json",
          status: 200,
          body: { candidates: [{ content: { parts: [{ text: "no" }] }, finishReason: "STOP" }] },
        },
      ],
      ["a reset", 502, { kind: "reset" }],
      ["slow headers", 504, { kind: "hang" }],
      [
        "a body trickled forever",
        504,
        { kind: "raw", headers: JSON_HEADERS, chunks: ["{"], ending: { repeat: " ", everyMs: 50 } },
      ],
    ],
    openai: [
      ["garbage JSON", 502, jsonReply("<html>")],
      ["a truncated body", 502, truncated('{"data":[{"b64_json":"iVBO')],
      ["a 200 without an image", 502, { kind: "json", status: 200, body: { data: [] } }],
      ["a reset", 502, { kind: "reset" }],
      ["slow headers", 504, { kind: "hang" }],
    ],
  };

  for (const [adapter, faults] of Object.entries(FAULTS) as [
    keyof typeof ROUTES,
    (typeof FAULTS)["gemini"],
  ][]) {
    it.each(faults)(
      `${adapter}: %s is a clean %i in the OpenAI envelope, nothing charged`,
      async (_name, status, reply) => {
        const route = ROUTES[adapter];
        t.script((request) => (request.path.includes(route.path) ? reply : undefined));
        const before = await t.available();
        const started = Date.now();
        const response = await fetch(`${t.baseUrl}/v1/images/generations`, {
          method: "POST",
          headers: { authorization: `Bearer ${t.secret}`, "content-type": "application/json" },
          body: JSON.stringify({ model: route.model, prompt: "a misbehaving provider" }),
        });
        expect(Date.now() - started).toBeLessThan(RESPONSE_MS + SLACK_MS);
        expect(response.status).toBe(status);
        expect(response.headers.get("x-request-id")).toBeTruthy();
        expect(await response.json()).toEqual({
          error: {
            message: expect.stringMatching(/nothing was charged/),
            type: "server_error",
            param: null,
            code: status === 504 ? "upstream_timeout" : "upstream_error",
          },
        });
        const [row] = await t.usage();
        expect(row).toMatchObject({ model: route.model, status: HoldStatus.RELEASED, amount: 0n });
        expect(await t.available()).toBe(before);
        t.expectSoundLedger();
      },
    );
  }
});

/** A URL on which nothing listens: a port that was free a moment ago. */
async function closedPortUrl(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return `http://127.0.0.1:${port}`;
}
