import { setTimeout as sleep } from "node:timers/promises";
import Anthropic from "@anthropic-ai/sdk";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { countRequestTokens, DevPromptCache, devTokenCount } from "../../src/dev/provider/dev-tokens.js";
import { DEV_TEXT_LABEL, type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { sseFrames } from "../../src/upstream/sse.js";

const MODEL = "model-haiku-4-5";
const WEATHER_TOOL = {
  name: "get_weather",
  description: "Current weather for a city",
  input_schema: {
    type: "object" as const,
    properties: { city: { type: "string" }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
    required: ["city", "unit"],
  },
};

/** The last body the upstream received, as sent. */
function lastBody(upstream: DevUpstream): Record<string, unknown> {
  return upstream.messageRequests().at(-1)!.body as Record<string, unknown>;
}

/** The input-side usage must add up to the tokenizer's count of what was sent. */
function expectInputSums(upstream: DevUpstream, usage: Anthropic.Usage): void {
  expect(
    usage.input_tokens + (usage.cache_creation_input_tokens ?? 0) + (usage.cache_read_input_tokens ?? 0),
  ).toBe(countRequestTokens(lastBody(upstream)));
  expect(usage.cache_creation_input_tokens).toBe(
    (usage.cache_creation?.ephemeral_5m_input_tokens ?? 0) +
      (usage.cache_creation?.ephemeral_1h_input_tokens ?? 0),
  );
}

describe("dev upstream through the official SDK", () => {
  let upstream: DevUpstream;
  let client: Anthropic;

  beforeEach(async () => {
    upstream = await startDevUpstream();
    client = new Anthropic({ baseURL: upstream.url, apiKey: "dev", maxRetries: 0 });
  });
  afterEach(async () => {
    await upstream.close();
  });

  it("answers messages.create with labelled text and usage that adds up", async () => {
    const message = await client.messages.create({
      model: MODEL,
      max_tokens: 100,
      system: "You are terse.",
      messages: [{ role: "user", content: "What is the capital of France?" }],
    });
    expect(message.id).toMatch(/^msg_dev_/);
    expect(message.model).toBe(MODEL);
    expect(message.stop_reason).toBe("end_turn");
    expect(message.stop_sequence).toBeNull();
    const [block] = message.content;
    expect(block?.type).toBe("text");
    const text = block?.type === "text" ? block.text : "";
    expect(text).toBe(`${DEV_TEXT_LABEL} You said: What is the capital of France?`);
    expect(message.usage.output_tokens).toBe(devTokenCount(text));
    expect(message.usage.input_tokens).toBe(countRequestTokens(lastBody(upstream)));
    expect(message.usage.cache_read_input_tokens).toBe(0);
    expect(message.usage.cache_creation_input_tokens).toBe(0);
    expect(message.usage.service_tier).toBe("standard");
    // Every answer says how it ran; server tools and iterations only when they happened.
    expect(message.usage).toMatchObject({ speed: "standard", inference_geo: "global" });
    expect(message.usage.server_tool_use).toBeUndefined();
    expectInputSums(upstream, message.usage);
    // 3 per message + "You are terse." + the question.
    expect(message.usage.input_tokens).toBe(3 + 3 + 6);
    expect(upstream.requests).toHaveLength(1);
    // SDK 1.x sends its key as a bearer token.
    expect(upstream.requests[0]!.headers.authorization).toBe("Bearer dev");
  });

  it("authenticates the SDK's bearer key against a configured key", async () => {
    const guarded = await startDevUpstream({ apiKey: "sk-dev" });
    try {
      const ok = new Anthropic({ baseURL: guarded.url, apiKey: "sk-dev", maxRetries: 0 });
      const params = { model: MODEL, max_tokens: 5, messages: [{ role: "user" as const, content: "hi" }] };
      expect((await ok.messages.create(params)).type).toBe("message");
      const wrong = new Anthropic({ baseURL: guarded.url, apiKey: "sk-other", maxRetries: 0 });
      await expect(wrong.messages.create(params)).rejects.toBeInstanceOf(Anthropic.AuthenticationError);
    } finally {
      await guarded.close();
    }
  });

  it("cuts the answer at max_tokens words", async () => {
    const message = await client.messages.create({
      model: MODEL,
      max_tokens: 3,
      messages: [{ role: "user", content: "Tell me a long story about a lighthouse keeper" }],
    });
    expect(message.stop_reason).toBe("max_tokens");
    expect(message.content).toEqual([{ type: "text", text: "[tollgate dev-upstream: generated" }]);
    expect(message.usage.output_tokens).toBe(3);
  });

  it("streams thinking with a signature, then text, one word per delta", async () => {
    const stream = client.messages.stream({
      model: MODEL,
      max_tokens: 2048,
      thinking: { type: "enabled", budget_tokens: 1024 },
      messages: [{ role: "user", content: [{ type: "text", text: "Plan a picnic for four people" }] }],
    });
    const deltas: string[] = [];
    stream.on("text", (delta) => deltas.push(delta));
    const message = await stream.finalMessage();
    const [thinking, text] = message.content;
    expect(thinking?.type).toBe("thinking");
    expect(text?.type).toBe("text");
    if (thinking?.type !== "thinking" || text?.type !== "text") return;
    expect(thinking.thinking).toMatch(/^\[tollgate dev-upstream: generated thinking, not a model\]/);
    expect(thinking.signature).toMatch(/^[A-Za-z0-9+/]{43}=$/);
    expect(text.text).toBe(`${DEV_TEXT_LABEL} You said: Plan a picnic for four people`);
    expect(deltas.join("")).toBe(text.text);
    expect(deltas).toHaveLength(devTokenCount(text.text));
    expect(message.stop_reason).toBe("end_turn");
    expect(message.usage.output_tokens).toBe(devTokenCount(thinking.thinking) + devTokenCount(text.text));
    expectInputSums(upstream, message.usage);
  });

  it("streams a forced tool call whose input the SDK parses", async () => {
    const message = await client.messages
      .stream({
        model: MODEL,
        max_tokens: 500,
        tools: [{ name: "noop", input_schema: { type: "object" } }, WEATHER_TOOL],
        tool_choice: { type: "tool", name: "get_weather" },
        messages: [{ role: "user", content: "Weather in Lisbon?" }],
      })
      .finalMessage();
    expect(message.stop_reason).toBe("tool_use");
    expect(message.content).toHaveLength(1);
    const [block] = message.content;
    expect(block?.type).toBe("tool_use");
    if (block?.type !== "tool_use") return;
    expect(block.id).toMatch(/^toolu_/);
    expect(block.name).toBe("get_weather");
    expect(block.input).toEqual({ city: "dev-upstream", unit: "celsius" });
    expect(message.usage.output_tokens).toBe(devTokenCount(JSON.stringify(block.input)));
    expectInputSums(upstream, message.usage);
  });

  it("answers tool_choice any with the first tool", async () => {
    const message = await client.messages.create({
      model: MODEL,
      max_tokens: 500,
      tools: [WEATHER_TOOL],
      tool_choice: { type: "any" },
      messages: [{ role: "user", content: "Anything" }],
    });
    expect(message.stop_reason).toBe("tool_use");
    expect(message.content[0]).toMatchObject({ type: "tool_use", name: "get_weather" });
  });

  it("runs server tools in its loop even when tool_choice any picks the first client tool", async () => {
    const message = await client.messages.create({
      model: MODEL,
      max_tokens: 500,
      tools: [{ type: "web_search_20250305", name: "web_search", max_uses: 1 }, WEATHER_TOOL],
      tool_choice: { type: "any" },
      messages: [{ role: "user", content: "Weather in Lisbon?" }],
    });
    expect(message.content.map((block) => block.type)).toEqual([
      "server_tool_use",
      "web_search_tool_result",
      "tool_use",
    ]);
    expect(message.content[2]).toMatchObject({ name: "get_weather" });
    expect(message.stop_reason).toBe("tool_use");
    expect(message.usage.server_tool_use).toEqual({ web_search_requests: 1, web_fetch_requests: 0 });
  });

  it("counts tokens exactly as countRequestTokens", async () => {
    const params = {
      model: MODEL,
      system: [{ type: "text" as const, text: "You are a careful assistant." }],
      tools: [WEATHER_TOOL],
      messages: [
        { role: "user" as const, content: "Hello there, friend" },
        {
          role: "assistant" as const,
          content: [
            { type: "text" as const, text: "Let me check." },
            { type: "tool_use" as const, id: "toolu_1", name: "get_weather", input: { city: "Oslo" } },
          ],
        },
        {
          role: "user" as const,
          content: [
            { type: "tool_result" as const, tool_use_id: "toolu_1", content: "Sunny and 21 degrees" },
          ],
        },
      ],
    };
    const count = await client.messages.countTokens(params);
    expect(count.input_tokens).toBe(countRequestTokens(params));
    expect(count.input_tokens).toBe(
      devTokenCount(JSON.stringify(WEATHER_TOOL)) + 5 + 3 * 3 + 3 + 3 + devTokenCount('{"city":"Oslo"}') + 4,
    );
    expect(upstream.requests.at(-1)!.path).toBe("/v1/messages/count_tokens");
    expect(upstream.messageRequests()).toHaveLength(0);
  });

  it("writes a 5m cache entry, then reads it; a 1h breakpoint writes under ephemeral_1h", async () => {
    const system = "Long shared instructions for every turn of this session.";
    const request = (ttl?: "5m" | "1h") =>
      client.messages.create({
        model: MODEL,
        max_tokens: 50,
        system: [
          {
            type: "text",
            text: ttl === "1h" ? `${system} Hourly.` : system,
            cache_control: ttl === "1h" ? { type: "ephemeral", ttl: "1h" } : { type: "ephemeral" },
          },
        ],
        messages: [{ role: "user", content: "First question" }],
      });
    const first = await request();
    expect(first.usage.cache_creation).toEqual({
      ephemeral_5m_input_tokens: devTokenCount(system),
      ephemeral_1h_input_tokens: 0,
    });
    expect(first.usage.cache_creation_input_tokens).toBe(devTokenCount(system));
    expect(first.usage.cache_read_input_tokens).toBe(0);
    expect(first.usage.input_tokens).toBe(3 + 2);
    expectInputSums(upstream, first.usage);

    const second = await request();
    expect(second.usage.cache_read_input_tokens).toBe(devTokenCount(system));
    expect(second.usage.cache_creation_input_tokens).toBe(0);
    expect(second.usage.input_tokens).toBe(5);
    expectInputSums(upstream, second.usage);

    const hourly = await request("1h");
    expect(hourly.usage.cache_creation).toEqual({
      ephemeral_5m_input_tokens: 0,
      ephemeral_1h_input_tokens: devTokenCount(system) + 1,
    });
    expect(hourly.usage.cache_read_input_tokens).toBe(0);
    expectInputSums(upstream, hourly.usage);
  });

  it("reads the longest cached prefix and writes only the new segment", async () => {
    const turn = (extra: string[]) =>
      client.messages.create({
        model: MODEL,
        max_tokens: 50,
        messages: [
          {
            role: "user",
            content: [
              { type: "text", text: "one two three" },
              ...extra.map((text, i) => ({
                type: "text" as const,
                text,
                ...(i === extra.length - 1 ? { cache_control: { type: "ephemeral" as const } } : {}),
              })),
            ],
          },
        ],
      });
    const first = await turn(["four five"]);
    expect(first.usage.cache_creation_input_tokens).toBe(3 + 3 + 2);
    // The breakpoint moved forward, as a conversation's does each turn: the look-back still finds
    // the prefix the first turn cached, and only the new block is written.
    const second = await turn(["four five", "six seven eight"]);
    expect(second.usage.cache_read_input_tokens).toBe(3 + 3 + 2);
    expect(second.usage.cache_creation_input_tokens).toBe(3);
    expect(second.usage.input_tokens).toBe(0);
    expectInputSums(upstream, second.usage);
  });

  it("counts sent-back server tool blocks as the loop that wrote them read them", () => {
    const results = [
      { type: "web_search_result", url: "https://example.invalid/a", title: "A b c", encrypted_content: "x" },
    ];
    const base = { model: MODEL, messages: [{ role: "user", content: "q" }] };
    const turn = (content: unknown[]) => ({
      ...base,
      messages: [...base.messages, { role: "assistant", content }],
    });
    const empty = countRequestTokens(turn([]));
    const blocks = {
      server_tool_use: [{ type: "server_tool_use", id: "s", name: "web_search", input: { query: "a b" } }],
      web_search_tool_result: [{ type: "web_search_tool_result", tool_use_id: "s", content: results }],
      compaction: [{ type: "compaction", content: "three word summary", encrypted_content: null }],
      fallback: [{ type: "fallback", from: { model: "a" }, to: { model: "b" } }],
    };
    expect(countRequestTokens(turn(blocks.server_tool_use)) - empty).toBe(devTokenCount('{"query":"a b"}'));
    expect(countRequestTokens(turn(blocks.web_search_tool_result)) - empty).toBe(
      devTokenCount(JSON.stringify(results)),
    );
    expect(countRequestTokens(turn(blocks.compaction)) - empty).toBe(3);
    // Markers, not prompt text.
    expect(countRequestTokens(turn(blocks.fallback)) - empty).toBe(0);
  });

  it("keeps the tokenizer's promise: one more text block adds exactly its words", async () => {
    const base = {
      model: MODEL,
      system: "Be brief.",
      messages: [
        { role: "user" as const, content: [{ type: "text" as const, text: "Hello  world\n again" }] },
        { role: "assistant" as const, content: [{ type: "text" as const, text: "Hi." }] },
        { role: "user" as const, content: [{ type: "text" as const, text: "Next" }] },
      ],
    };
    const extra = "  an appended block,\twith\nodd   spacing  ";
    const grown = structuredClone(base);
    grown.messages[1]!.content.push({ type: "text", text: extra });
    expect(devTokenCount(extra)).toBe(6);
    expect(countRequestTokens(grown) - countRequestTokens(base)).toBe(devTokenCount(extra));
    const before = await client.messages.countTokens(base);
    const after = await client.messages.countTokens(grown);
    expect(after.input_tokens - before.input_tokens).toBe(devTokenCount(extra));
  });

  it("rejects an invalid request with the Anthropic error envelope", async () => {
    const error = await client.messages
      .create({ model: MODEL, messages: [{ role: "user", content: "hi" }] } as never)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Anthropic.BadRequestError);
    const bad = error as InstanceType<typeof Anthropic.BadRequestError>;
    expect(bad.error).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
    expect(bad.requestID).toMatch(/^req_dev_/);
    expect(upstream.messageRequests()).toHaveLength(1);
  });
});

describe("dev upstream on the wire", () => {
  let upstream: DevUpstream | undefined;

  afterEach(async () => {
    await upstream?.close();
    upstream = undefined;
  });

  async function post(path: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
    return fetch(`${upstream!.url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify(body),
    });
  }

  it("streams the exact Anthropic event sequence", async () => {
    upstream = await startDevUpstream();
    const response = await post("/v1/messages?beta=true", {
      model: MODEL,
      max_tokens: 100,
      stream: true,
      messages: [{ role: "user", content: "one two" }],
    });
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/);
    expect(response.headers.get("request-id")).toMatch(/^req_dev_/);
    const frames = [];
    for await (const frame of sseFrames(response.body!)) frames.push(frame);
    const events = frames.map((f) => (f.kind === "event" ? f.event : "comment"));
    const words = devTokenCount(`${DEV_TEXT_LABEL} You said: one two`);
    expect(events).toEqual([
      "message_start",
      "content_block_start",
      "ping",
      ...Array.from({ length: words }, () => "content_block_delta"),
      "content_block_stop",
      "message_delta",
      "message_stop",
    ]);
    const data = frames.map((f) =>
      f.kind === "event" ? (JSON.parse(f.data) as Record<string, unknown>) : {},
    );
    for (const [i, d] of data.entries()) expect(d.type).toBe(events[i]);
    expect(data[0]).toMatchObject({
      message: { content: [], stop_reason: null, usage: { input_tokens: 5, output_tokens: 1 } },
    });
    expect(data.at(-2)).toEqual({
      type: "message_delta",
      delta: { stop_reason: "end_turn", stop_sequence: null },
      usage: {
        input_tokens: 5,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
        output_tokens: words,
      },
    });
    expect(upstream.messageRequests()).toHaveLength(1);
    expect(upstream.requests[0]!.path).toBe("/v1/messages?beta=true");
  });

  it("answers 401 without the configured key, 404 elsewhere, and lists models", async () => {
    upstream = await startDevUpstream({ apiKey: "sk-dev" });
    const body = { model: MODEL, max_tokens: 5, messages: [{ role: "user", content: "x" }] };
    const denied = await post("/v1/messages", body, { "x-api-key": "wrong" });
    expect(denied.status).toBe(401);
    expect(await denied.json()).toMatchObject({ type: "error", error: { type: "authentication_error" } });
    expect((await post("/v1/messages", body, { "x-api-key": "sk-dev" })).status).toBe(200);
    const missing = await post("/v1/complete", body, { "x-api-key": "sk-dev" });
    expect(missing.status).toBe(404);
    const envelope = (await missing.json()) as { error: { type: string }; request_id: string };
    expect(envelope.error.type).toBe("not_found_error");
    expect(envelope.request_id).toMatch(/^req_dev_/);
    const models = await fetch(`${upstream.url}/v1/models`, { headers: { "x-api-key": "sk-dev" } });
    expect(((await models.json()) as { data: unknown[] }).data.length).toBeGreaterThan(0);
    expect(upstream.requests.map((r) => r.method)).toEqual(["POST", "POST", "POST", "GET"]);
  });

  it("lets a script answer first and still records the request", async () => {
    upstream = await startDevUpstream({
      script: (request) =>
        (request.body as { model?: string } | undefined)?.model === "overloaded"
          ? {
              kind: "json",
              status: 529,
              body: { type: "error", error: { type: "overloaded_error", message: "busy" } },
            }
          : undefined,
    });
    const overloaded = await post("/v1/messages", { model: "overloaded" });
    expect(overloaded.status).toBe(529);
    const normal = await post("/v1/messages", {
      model: MODEL,
      max_tokens: 5,
      messages: [{ role: "user", content: "x" }],
    });
    expect(normal.status).toBe(200);
    expect(upstream.messageRequests().map((r) => (r.body as { model: string }).model)).toEqual([
      "overloaded",
      MODEL,
    ]);
    expect(upstream.requests[0]!.rawBody).toBe('{"model":"overloaded"}');
  });

  it("caches automatically on the last block with a top-level cache_control", async () => {
    upstream = await startDevUpstream();
    const body = {
      model: MODEL,
      max_tokens: 5,
      cache_control: { type: "ephemeral", ttl: "1h" },
      messages: [{ role: "user", content: "alpha beta gamma" }],
    };
    const first = ((await (await post("/v1/messages", body)).json()) as { usage: Record<string, unknown> })
      .usage;
    expect(first).toMatchObject({
      input_tokens: 0,
      cache_creation_input_tokens: 6,
      cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 6 },
    });
    const second = ((await (await post("/v1/messages", body)).json()) as { usage: Record<string, unknown> })
      .usage;
    expect(second).toMatchObject({
      input_tokens: 0,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 6,
    });
  });

  it("counts a stream whose client went away", async () => {
    upstream = await startDevUpstream({ eventDelayMs: 20 });
    const response = await post("/v1/messages", {
      model: MODEL,
      max_tokens: 100,
      stream: true,
      messages: [{ role: "user", content: "a fairly long question to stream slowly" }],
    });
    const reader = response.body!.getReader();
    await reader.read();
    expect(upstream.abortedStreams).toBe(0);
    // Going away mid-stream closes the connection under the server's feet.
    await reader.cancel();
    for (let i = 0; i < 40 && upstream.abortedStreams === 0; i++) await sleep(10);
    expect(upstream.abortedStreams).toBe(1);
  });
});

describe("DevPromptCache", () => {
  it("expires entries after their ttl", () => {
    const cache = new DevPromptCache();
    const body = {
      model: MODEL,
      messages: [
        { role: "user", content: [{ type: "text", text: "a b", cache_control: { type: "ephemeral" } }] },
      ],
    };
    expect(cache.account(body, 0).cache_creation_input_tokens).toBe(5);
    expect(cache.account(body, 299_000).cache_read_input_tokens).toBe(5);
    // The read refreshed it: still there 5 minutes after the first write.
    expect(cache.account(body, 590_000).cache_read_input_tokens).toBe(5);
    expect(cache.account(body, 900_000).cache_creation_input_tokens).toBe(5);
    expect(cache.account({ ...body, model: "other" }, 900_001).cache_read_input_tokens).toBe(0);
  });
});
