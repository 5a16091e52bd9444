import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ScriptedEvent } from "../../src/dev/provider/dev-upstream.js";
import { HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { type OpenStream, openStream } from "../helpers/sse-client.js";
import { expectedCharge, startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

// Streaming over real sockets: what reaches the client is what is billed.

const INPUT_TOKENS = 40;
const WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"];

/** A paced text stream of one word per delta, `delayMs` apart. */
function pacedStream(delayMs: number, tail: ScriptedEvent[] = finishing(WORDS.length)): ScriptedEvent[] {
  return [
    messageStart(),
    {
      event: "content_block_start",
      data: { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
    },
    ...WORDS.map((word, i) => ({
      event: "content_block_delta",
      data: {
        type: "content_block_delta",
        index: 0,
        delta: { type: "text_delta", text: i === 0 ? word : ` ${word}` },
      },
      delayMs,
    })),
    ...tail,
  ];
}

function messageStart(): ScriptedEvent {
  return {
    event: "message_start",
    data: {
      type: "message_start",
      message: {
        id: "msg_paced",
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
}

function finishing(outputTokens: number): ScriptedEvent[] {
  return [
    { event: "content_block_stop", data: { type: "content_block_stop", index: 0 } },
    {
      event: "message_delta",
      data: {
        type: "message_delta",
        delta: { stop_reason: "end_turn", stop_sequence: null },
        usage: { output_tokens: outputTokens },
      },
    },
    { event: "message_stop", data: { type: "message_stop" } },
  ];
}

const REQUEST = {
  model: "model-haiku-4-5",
  max_tokens: 100,
  stream: true,
  messages: [{ role: "user", content: "Go" }],
};

describe("streaming", () => {
  let t: TextGateway;
  const open = (body: unknown = REQUEST, headers: Record<string, string> = {}): Promise<OpenStream> =>
    openStream(`${t.baseUrl}/v1/messages?beta=true`, body, { "x-api-key": t.secret, ...headers });

  /** The newest call's row once it is no longer pending. */
  async function resolvedRow() {
    for (let i = 0; i < 200; i++) {
      const [row] = await t.usage();
      if (row !== undefined && row.status !== HoldStatus.PENDING) return row;
      await sleep(25);
    }
    throw new Error("the call was never settled");
  }

  beforeAll(async () => {
    t = await startTextGateway({ TOLLGATE_STREAM_PING_MS: "60" });
    await t.credit(10_000_000n);
  });
  afterAll(async () => {
    t.expectSoundLedger();
    await t.close();
  });

  it("relays every event as the upstream framed it and bills the final usage", async () => {
    t.script(() => ({ kind: "stream", events: pacedStream(0) }));
    const stream = await open();
    t.script(undefined);
    expect(stream.status).toBe(200);
    expect(stream.headers["content-type"]).toMatch(/^text\/event-stream/);
    expect(stream.headers["x-gateway-billing-chain"]).toBe("base");
    const events = await stream.rest();
    expect(events.map((e) => e.event)).toEqual([
      "message_start",
      "content_block_start",
      ...WORDS.map(() => "content_block_delta"),
      "content_block_stop",
      "message_delta",
      "message_stop",
    ]);
    // Data is passed through as the upstream wrote it, not re-serialised.
    expect(events[2]!.data).toBe(JSON.stringify((pacedStream(0)[2] as { data: unknown }).data));
    const row = await resolvedRow();
    expect(row.status).toBe(HoldStatus.SETTLED);
    expect(row.amount).toBe(expectedCharge("model-haiku-4-5", { input: INPUT_TOKENS, output: WORDS.length }));
  });

  it("holds the funds before the first byte goes out", async () => {
    t.script(() => ({ kind: "stream", events: pacedStream(100) }));
    const stream = await open();
    t.script(undefined);
    expect(stream.status).toBe(200);
    const [row] = await t.usage();
    expect(row?.status).toBe(HoldStatus.PENDING);
    expect(row?.heldAmount).toBeGreaterThan(0n);
    await stream.rest();
    expect((await resolvedRow()).status).toBe(HoldStatus.SETTLED);
  });

  it.each([1, 3, 6])(
    "a client that leaves after %i words pays the input and exactly the words it received",
    async (words) => {
      const aborted = t.upstream.abortedStreams;
      t.script(() => ({ kind: "stream", events: pacedStream(80) }));
      const stream = await open();
      t.script(undefined);
      const received: string[] = [];
      for (;;) {
        const event = await stream.next();
        if (event?.event === "content_block_delta") received.push(JSON.parse(event.data).delta.text);
        if (received.length === words) break;
      }
      stream.cut();
      const row = await resolvedRow();
      expect(row.status).toBe(HoldStatus.SETTLED);
      expect(row.usage?.outputTokens).toBe(BigInt(words));
      expect(row.usage?.inputTokens).toBe(BigInt(INPUT_TOKENS));
      expect(row.amount).toBe(expectedCharge("model-haiku-4-5", { input: INPUT_TOKENS, output: words }));
      // The upstream request was aborted rather than left to run on.
      for (let i = 0; i < 40 && t.upstream.abortedStreams === aborted; i++) await sleep(25);
      expect(t.upstream.abortedStreams).toBe(aborted + 1);
    },
  );

  it("an upstream error event mid-stream is relayed, and only what was delivered is billed", async () => {
    const overloaded = { type: "error", error: { type: "overloaded_error", message: "Overloaded" } };
    t.script(() => ({
      kind: "stream",
      events: [...pacedStream(0, []).slice(0, 5), { event: "error", data: overloaded }],
    }));
    const stream = await open();
    t.script(undefined);
    const events = await stream.rest();
    expect(events.at(-1)).toEqual({ event: "error", data: JSON.stringify(overloaded) });
    const row = await resolvedRow();
    expect(row.usage?.outputTokens).toBe(3n);
    expect(row.amount).toBe(expectedCharge("model-haiku-4-5", { input: INPUT_TOKENS, output: 3 }));
  });

  it("an upstream connection lost mid-stream becomes the gateway's own error event", async () => {
    // The pause lets the two words reach the gateway before the connection drops.
    const pause: ScriptedEvent = { event: "ping", data: { type: "ping" }, delayMs: 50 };
    t.script(() => ({
      kind: "stream",
      events: [...pacedStream(0, []).slice(0, 4), pause, { destroy: true }],
    }));
    const stream = await open();
    t.script(undefined);
    const events = await stream.rest();
    expect(events.filter((e) => e.event === "content_block_delta")).toHaveLength(2);
    const last = events.at(-1)!;
    expect(last.event).toBe("error");
    expect(JSON.parse(last.data)).toMatchObject({ type: "error", error: { type: "api_error" } });
    const row = await resolvedRow();
    expect(row.amount).toBe(expectedCharge("model-haiku-4-5", { input: INPUT_TOKENS, output: 2 }));
  });

  it("an upstream failure before any output charges nothing", async () => {
    const before = await t.available();
    // An error event right after message_start: no content was delivered.
    t.script(() => ({
      kind: "stream",
      events: [
        messageStart(),
        { event: "error", data: { type: "error", error: { type: "api_error", message: "x" } } },
      ],
    }));
    const failedStream = await open();
    await failedStream.rest();
    expect((await resolvedRow()).status).toBe(HoldStatus.RELEASED);
    // The upstream hangs up before answering: a 502 before any byte of a stream.
    t.script(() => ({ kind: "destroy" }));
    const refused = await open();
    t.script(undefined);
    expect(refused.status).toBe(502);
    expect(JSON.parse(await refused.text())).toMatchObject({ type: "error", error: { type: "api_error" } });
    expect((await resolvedRow()).status).toBe(HoldStatus.RELEASED);
    expect(await t.available()).toBe(before);
  });

  it("sends the gateway's own pings while the upstream is silent", async () => {
    const silence: ScriptedEvent[] = [
      messageStart(),
      {
        event: "content_block_start",
        data: { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
      },
      {
        event: "content_block_delta",
        data: { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "late" } },
        delayMs: 400,
      },
      ...finishing(1),
    ];
    t.script(() => ({ kind: "stream", events: silence }));
    const stream = await open();
    t.script(undefined);
    const events = await stream.rest();
    const names = events.map((e) => e.event);
    const pings = names.slice(2, names.indexOf("content_block_delta"));
    expect(pings.length).toBeGreaterThanOrEqual(2);
    expect(new Set(pings)).toEqual(new Set(["ping"]));
    expect(events.find((e) => e.event === "ping")!.data).toBe('{"type":"ping"}');
    expect((await resolvedRow()).amount).toBe(
      expectedCharge("model-haiku-4-5", { input: INPUT_TOKENS, output: 1 }),
    );
  });
});
