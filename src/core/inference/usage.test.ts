import { describe, expect, it } from "vitest";
import { UpstreamFailure } from "../ports/providers.js";
import { billedUsage, readMessage, StreamMeter, usageProblem } from "./usage.js";

const same = (name: string) => name;

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
    expect(billedUsage(JSON.parse(start).message.usage, "claude-opus-4-8", same)).toMatchObject({
      inputTokens: 472n,
      outputTokens: 2n,
      cacheWrite5mTokens: 1000n,
      cacheWrite1hTokens: 500n,
      cacheReadTokens: 8192n,
      images: 0,
      model: "claude-opus-4-8",
      passes: [],
      unpriced: [],
    });
  });

  it("bills a cache-write total without a TTL breakdown at the 5-minute rate", () => {
    expect(
      billedUsage({ input_tokens: 1, output_tokens: 1, cache_creation_input_tokens: 300 }, "", same),
    ).toMatchObject({
      cacheWrite5mTokens: 300n,
      cacheWrite1hTokens: 0n,
    });
  });

  it("ignores nulls, negatives and non-numbers", () => {
    expect(
      billedUsage({ input_tokens: null, output_tokens: -3, cache_read_input_tokens: Number.NaN }, "", same),
    ).toMatchObject({
      inputTokens: 0n,
      outputTokens: 0n,
      cacheReadTokens: 0n,
    });
  });

  it("reads a non-streaming message, and tells a body without usage", () => {
    const message = readMessage(
      '{"type":"message","model":"m","content":[],"usage":{"input_tokens":3,"output_tokens":4}}',
    );
    expect(usageProblem(message.usage, false)).toBeUndefined();
    expect(billedUsage(message.usage!, message.model, same)).toMatchObject({
      inputTokens: 3n,
      outputTokens: 4n,
    });
    expect(usageProblem(readMessage('{"type":"message","content":[]}').usage, false)).toBe("no usage");
    expect(usageProblem(readMessage('{"type":"message","content":[],"usage":{}}').usage, false)).toBe(
      "no input_tokens and output_tokens",
    );
  });

  it.each([
    ["not json", "<html>"],
    ["an array", "[]"],
    ["an error object sent with a 200", '{"type":"error","error":{"type":"api_error","message":"x"}}'],
    ["a message without content", '{"type":"message","usage":{"input_tokens":1,"output_tokens":1}}'],
  ])("refuses a 200 body that is %s as malformed", (_name, body) => {
    let thrown: unknown;
    try {
      readMessage(body);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(UpstreamFailure);
    expect((thrown as UpstreamFailure).kind).toBe("malformed");
  });
});

describe("usageProblem", () => {
  it.each([
    [{ input_tokens: -40, output_tokens: 3 }, "usage.input_tokens is -40"],
    [{ input_tokens: 40, output_tokens: 2.5 }, "usage.output_tokens is 2.5"],
    [{ input_tokens: 40, output_tokens: "3" }, "no input_tokens and output_tokens"],
    [
      { input_tokens: 40, output_tokens: 3, cache_read_input_tokens: -1 },
      "usage.cache_read_input_tokens is -1",
    ],
    [
      { input_tokens: 40, output_tokens: 3, cache_creation: { ephemeral_5m_input_tokens: 1e300 } },
      "usage.cache_creation.ephemeral_5m_input_tokens is 1e+300",
    ],
    [
      { input_tokens: 40, output_tokens: 3, server_tool_use: { web_search_requests: -2 } },
      "usage.server_tool_use.web_search_requests is -2",
    ],
    [
      { input_tokens: 40, output_tokens: 3, iterations: [{ type: "message", input_tokens: -1 }] },
      "usage.iterations.0.input_tokens is -1",
    ],
    [
      { input_tokens: 40, output_tokens: 2_000_000_000 },
      "usage.output_tokens must be between 0 and 1000000000.",
    ],
    [
      { input_tokens: 40, output_tokens: 3, server_tool_use: { web_search_requests: 5000 } },
      "usage.web_search_requests must be between 0 and 1000.",
    ],
    [{ input_tokens: 0, output_tokens: 3 }, "no input tokens read"],
  ])("does not believe %j", (usage, problem) => {
    expect(usageProblem(usage, false)).toBe(problem);
  });

  it("wants output for delivered content, and any input kind counts as read", () => {
    expect(usageProblem({ input_tokens: 4, output_tokens: 0 }, true)).toBe(
      "no output tokens for delivered content",
    );
    expect(usageProblem({ input_tokens: 4, output_tokens: 0 }, false)).toBeUndefined();
    expect(
      usageProblem({ input_tokens: 0, cache_read_input_tokens: 9, output_tokens: 1 }, true),
    ).toBeUndefined();
    expect(
      usageProblem({ input_tokens: 3, output_tokens: 1, cache_read_input_tokens: null }, true),
    ).toBeUndefined();
  });

  it("reads every pass, the server tools, speed and residency, mapping models to gateway ids", () => {
    const usage = billedUsage(
      {
        input_tokens: 1348,
        output_tokens: 531,
        cache_read_input_tokens: 412,
        server_tool_use: { web_search_requests: 3, web_fetch_requests: 1 },
        speed: "fast",
        inference_geo: "us",
        service_tier: "standard",
        output_tokens_details: { thinking_tokens: 10 },
        iterations: [
          { type: "compaction", input_tokens: 180000, output_tokens: 3500 },
          { type: "advisor_message", model: "claude-opus-5", input_tokens: 823, output_tokens: 1612 },
          {
            type: "message",
            input_tokens: 1348,
            output_tokens: 531,
            cache_creation_input_tokens: 100,
            cache_creation: { ephemeral_5m_input_tokens: 40, ephemeral_1h_input_tokens: 60 },
          },
        ],
      },
      "claude-opus-4-8",
      (name) =>
        name === "claude-opus-5" ? "model-opus-5" : name === "claude-opus-4-8" ? "model-opus-4-8" : name,
    );
    expect(usage).toMatchObject({
      model: "model-opus-4-8",
      speed: "fast",
      inferenceGeo: "us",
      webSearchRequests: 3n,
      webFetchRequests: 1n,
      unpriced: [],
    });
    expect(usage.passes).toMatchObject([
      { kind: "compaction", model: "", inputTokens: 180000n, outputTokens: 3500n },
      { kind: "advisor", model: "model-opus-5", inputTokens: 823n, outputTokens: 1612n },
      { kind: "message", model: "", cacheWrite5mTokens: 40n, cacheWrite1hTokens: 60n },
    ]);
  });

  it("lists what it does not know, and ignores unknown fields that carry nothing", () => {
    const usage = billedUsage(
      {
        input_tokens: 1,
        output_tokens: 1,
        server_tool_use: { web_search_requests: 1, code_execution_requests: 2, image_requests: 0 },
        container_seconds: 30,
        future_field: null,
        speed: "ludicrous",
        iterations: [{ type: "planner_message", input_tokens: 5, output_tokens: 5, surprise: 1 }],
      },
      "m",
      same,
    );
    expect(usage.unpriced).toEqual([
      "usage.container_seconds",
      "usage.server_tool_use.code_execution_requests",
      "usage.speed",
      "usage.iterations.0.surprise",
    ]);
    expect(usage.passes![0]).toMatchObject({ kind: "unknown", inputTokens: 5n });
    expect(usage.speed).toBe("standard");
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
    expect(meter.usageProblem).toBeUndefined();
    expect(meter.reported(same)).toMatchObject({
      inputTokens: 472n,
      outputTokens: 89n,
      cacheReadTokens: 8192n,
    });
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

  it("counts text a provider put in a content_block_start as delivered", () => {
    const meter = new StreamMeter();
    meter.delivered("message_start", start);
    const blockStart = (index: number, text: string) =>
      JSON.stringify({ type: "content_block_start", index, content_block: { type: "text", text } });
    meter.delivered("content_block_start", blockStart(0, ""));
    expect(meter.deliveredContent).toBe(false);
    meter.delivered("content_block_start", blockStart(1, "Early"));
    meter.delivered("content_block_delta", delta(1, { type: "text_delta", text: " words" }));
    expect(meter.deliveredBlocks()).toEqual(["Early words"]);
  });

  it("notes an upstream error event", () => {
    const meter = new StreamMeter();
    meter.delivered("error", '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}');
    expect(meter.failed).toBe(true);
    expect(meter.started).toBe(false);
    expect(meter.deliveredContent).toBe(false);
  });
});
