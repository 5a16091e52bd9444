import { describe, expect, it } from "vitest";
import { billedUsage, messageUsage, StreamMeter } from "./usage.js";

const start = JSON.stringify({
  type: "message_start",
  message: {
    usage: {
      input_tokens: 472,
      cache_creation_input_tokens: 1500,
      cache_read_input_tokens: 8192,
      cache_creation: { ephemeral_5m_input_tokens: 1000, ephemeral_1h_input_tokens: 500 },
      output_tokens: 2,
    },
  },
});
const delta = (index: number, delta: Record<string, unknown>) =>
  JSON.stringify({ type: "content_block_delta", index, delta });

describe("billedUsage", () => {
  it("bills each cache TTL at its own rate and reads", () => {
    expect(billedUsage(JSON.parse(start).message.usage)).toEqual({
      inputTokens: 472n,
      outputTokens: 2n,
      cacheWrite5mTokens: 1000n,
      cacheWrite1hTokens: 500n,
      cacheReadTokens: 8192n,
      images: 0,
    });
  });

  it("bills a cache-write total without a TTL breakdown at the 5-minute rate", () => {
    expect(
      billedUsage({ input_tokens: 1, output_tokens: 1, cache_creation_input_tokens: 300 }),
    ).toMatchObject({
      cacheWrite5mTokens: 300n,
      cacheWrite1hTokens: 0n,
    });
  });

  it("ignores nulls, negatives and non-numbers", () => {
    expect(
      billedUsage({ input_tokens: null, output_tokens: -3, cache_read_input_tokens: Number.NaN }),
    ).toMatchObject({
      inputTokens: 0n,
      outputTokens: 0n,
      cacheReadTokens: 0n,
    });
  });

  it("reads a non-streaming message, and refuses a body without usage", () => {
    expect(messageUsage('{"type":"message","usage":{"input_tokens":3,"output_tokens":4}}')).toMatchObject({
      inputTokens: 3n,
      outputTokens: 4n,
    });
    expect(() => messageUsage('{"type":"message"}')).toThrow();
  });
});

describe("StreamMeter", () => {
  it("overwrites usage field by field from cumulative message_delta events, never adding", () => {
    const meter = new StreamMeter();
    meter.delivered("message_start", start);
    meter.delivered(
      "message_delta",
      JSON.stringify({ type: "message_delta", delta: {}, usage: { output_tokens: 40 } }),
    );
    meter.delivered(
      "message_delta",
      JSON.stringify({
        type: "message_delta",
        delta: { stop_reason: "end_turn" },
        usage: { output_tokens: 89, input_tokens: null },
      }),
    );
    expect(meter.finished).toBe(true);
    expect(meter.reported()).toMatchObject({ inputTokens: 472n, outputTokens: 89n, cacheReadTokens: 8192n });
  });

  it("knows the delivered text per block, signatures left out", () => {
    const meter = new StreamMeter();
    meter.delivered("message_start", start);
    meter.delivered("content_block_delta", delta(0, { type: "thinking_delta", thinking: "Hmm, weather." }));
    meter.delivered("content_block_delta", delta(0, { type: "signature_delta", signature: "EqQB" }));
    meter.delivered("content_block_delta", delta(1, { type: "text_delta", text: "Let me" }));
    meter.delivered("content_block_delta", delta(2, { type: "input_json_delta", partial_json: "" }));
    meter.delivered("content_block_delta", delta(1, { type: "text_delta", text: " check" }));
    meter.delivered("content_block_delta", delta(2, { type: "input_json_delta", partial_json: '{"a":' }));
    expect(meter.started).toBe(true);
    expect(meter.finished).toBe(false);
    expect(meter.deliveredContent).toBe(true);
    expect(meter.deliveredBlocks()).toEqual(["Hmm, weather.", "Let me check", '{"a":']);
  });

  it("notes an upstream error event", () => {
    const meter = new StreamMeter();
    meter.delivered("error", '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}');
    expect(meter.failed).toBe(true);
    expect(meter.started).toBe(false);
    expect(meter.deliveredContent).toBe(false);
  });
});
