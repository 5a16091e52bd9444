import Anthropic from "@anthropic-ai/sdk";
import type {
  BetaContentBlock,
  BetaIterationsUsage,
  BetaMessage,
  BetaUsage,
  MessageCreateParamsNonStreaming,
} from "@anthropic-ai/sdk/resources/beta/messages/messages.js";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { countRequestTokens, devTokenCount } from "../../src/dev/provider/dev-tokens.js";
import { DEV_TEXT_LABEL, type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { sseFrames } from "../../src/upstream/sse.js";

// The usage shapes the dev upstream speaks beyond the four token counts (server tools, speed,
// residency, advisor, compaction, fallback), checked against the counting rule of dev-tokens.ts:
// every number is recomputed here from what was sent and what came back.

const MODEL = "claude-opus-4-8";
const QUESTION = "What does tollgate charge per call?";
type Params = MessageCreateParamsNonStreaming;
type Iteration = BetaIterationsUsage[number];
/** A user message that makes the primary decline (with a fallback chain). */
const declined = [{ role: "user" as const, content: `${QUESTION} [decline]` }];

const webSearch = (max_uses?: number) =>
  ({
    type: "web_search_20250305",
    name: "web_search",
    ...(max_uses === undefined ? {} : { max_uses }),
  }) as const;
const webFetch = (max_uses?: number) =>
  ({
    type: "web_fetch_20250910",
    name: "web_fetch",
    ...(max_uses === undefined ? {} : { max_uses }),
  }) as const;
const advisor = (extra: { max_tokens?: number; max_uses?: number } = {}) =>
  ({ type: "advisor_20260301", name: "advisor", model: "claude-opus-5", ...extra }) as const;
const compact = (value?: number) => ({
  edits: [
    {
      type: "compact_20260112" as const,
      ...(value === undefined ? {} : { trigger: { type: "input_tokens" as const, value } }),
    },
  ],
});

function params(extra: Partial<Params> = {}): Params {
  return { model: MODEL, max_tokens: 1000, messages: [{ role: "user", content: QUESTION }], ...extra };
}

/** The conversation an executor pass re-reads: the request plus what the executor wrote before it. */
function grown(body: Params, written: readonly unknown[]): unknown {
  if (written.length === 0) return body;
  return { ...body, messages: [...body.messages, { role: "assistant", content: written }] };
}

const RESULT_TYPES = new Set(["web_search_tool_result", "web_fetch_tool_result", "advisor_tool_result"]);

/** Where each executor pass starts in the executor's content: at 0, and after each tool result. */
function passStarts(content: readonly BetaContentBlock[]): number[] {
  const starts = [0];
  content.forEach((block, i) => {
    if (RESULT_TYPES.has(block.type)) starts.push(i + 1);
  });
  return starts;
}

/** The input the executor's passes read together, by the counting rule (no caching involved). */
function loopInput(body: Params, content: readonly BetaContentBlock[]): number {
  return passStarts(content).reduce(
    (total, start) => total + countRequestTokens(grown(body, content.slice(0, start))),
    0,
  );
}

/** The output the executor wrote: its text, thinking and tool inputs. */
function writtenTokens(content: readonly BetaContentBlock[]): number {
  let total = 0;
  for (const block of content) {
    if (block.type === "text") total += devTokenCount(block.text);
    else if (block.type === "thinking") total += devTokenCount(block.thinking);
    else if (block.type === "tool_use" || block.type === "server_tool_use") {
      total += devTokenCount(JSON.stringify(block.input));
    }
  }
  return total;
}

const COUNTS = [
  "input_tokens",
  "output_tokens",
  "cache_creation_input_tokens",
  "cache_read_input_tokens",
] as const;

/** The passes the top-level counts describe: the serving executor's (not a declined attempt's). */
function executorIterations(iterations: readonly Iteration[]): Iteration[] {
  return iterations.filter(
    (it) => it.type === "fallback_message" || (it.type === "message" && !("model" in it)),
  );
}

/** The rules every usage must keep, whatever the request switched on. */
function expectConsistent(usage: BetaUsage, maxTokens: number): void {
  expect(usage.output_tokens).toBeLessThanOrEqual(maxTokens);
  expect(usage.cache_creation_input_tokens).toBe(
    (usage.cache_creation?.ephemeral_5m_input_tokens ?? 0) +
      (usage.cache_creation?.ephemeral_1h_input_tokens ?? 0),
  );
  expect(usage.service_tier).toBe("standard");
  expect(["standard", "fast"]).toContain(usage.speed);
  expect(typeof usage.inference_geo).toBe("string");
  if (usage.server_tool_use) {
    expect(usage.server_tool_use.web_search_requests).toBeLessThanOrEqual(3);
    expect(usage.server_tool_use.web_fetch_requests).toBeLessThanOrEqual(1);
  }
  if (!usage.iterations) return;
  const executor = executorIterations(usage.iterations);
  expect(executor.length).toBeGreaterThan(0);
  for (const field of COUNTS) {
    expect(usage[field]).toBe(executor.reduce((total, it) => total + it[field], 0));
  }
  for (const it of usage.iterations) {
    expect(it.cache_creation_input_tokens).toBe(
      (it.cache_creation?.ephemeral_5m_input_tokens ?? 0) +
        (it.cache_creation?.ephemeral_1h_input_tokens ?? 0),
    );
  }
}

/** Content with its random ids blanked, to compare two answers to the same request. */
function withoutIds(content: readonly BetaContentBlock[]): unknown {
  return JSON.parse(JSON.stringify(content), (key, value) =>
    key === "id" || key === "tool_use_id" ? "…" : value,
  );
}

/** The usage numbers alone (what a stream and a non-stream answer must agree on). */
function numbers(usage: BetaUsage): Record<string, unknown> {
  const { cache_creation: _, ...rest } = usage as BetaUsage & Record<string, unknown>;
  return rest;
}

describe("dev upstream usage shapes", () => {
  let upstream: DevUpstream;
  let client: Anthropic;

  beforeEach(async () => {
    upstream = await startDevUpstream();
    client = new Anthropic({ baseURL: upstream.url, apiKey: "dev", maxRetries: 0 });
  });
  afterEach(async () => {
    await upstream.close();
  });

  async function create(body: Params): Promise<BetaMessage> {
    const message = await client.beta.messages.create(body);
    expectConsistent(message.usage, body.max_tokens);
    return message;
  }

  /** The same request streamed through the SDK: its final message, checked like a non-stream one. */
  async function streamed(body: Params): Promise<BetaMessage> {
    const message = await client.beta.messages.stream(body).finalMessage();
    expectConsistent(message.usage, body.max_tokens);
    return message;
  }

  /** The same request streamed on the wire: each event's data, in order. */
  async function rawEvents(body: Params): Promise<{ event: string; data: Record<string, unknown> }[]> {
    const response = await fetch(`${upstream.url}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ ...body, stream: true }),
    });
    expect(response.status).toBe(200);
    const events = [];
    for await (const frame of sseFrames(response.body!)) {
      if (frame.kind === "event") events.push({ event: frame.event, data: JSON.parse(frame.data) });
    }
    return events;
  }

  async function rejected(body: Params): Promise<string> {
    const error = await client.beta.messages.create(body).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Anthropic.BadRequestError);
    const bad = error as InstanceType<typeof Anthropic.BadRequestError>;
    expect(bad.error).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
    return (bad.error as { error: { message: string } }).error.message;
  }

  describe("plain calls", () => {
    it("report speed, residency and tier, but no server tools or iterations", async () => {
      const message = await create(params());
      expect(message.usage).toMatchObject({
        speed: "standard",
        inference_geo: "global",
        service_tier: "standard",
      });
      expect(message.usage.server_tool_use).toBeUndefined();
      expect(message.usage.iterations).toBeUndefined();
      expect(message.usage.input_tokens).toBe(countRequestTokens(params()));
    });

    it("keep the final message_delta to the four counts", async () => {
      const events = await rawEvents(params());
      expect(events[0]!.data).toMatchObject({
        message: { usage: { speed: "standard", inference_geo: "global", service_tier: "standard" } },
      });
      expect(Object.keys(events.at(-2)!.data.usage as object)).toEqual([
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "output_tokens",
      ]);
    });
  });

  describe("web search", () => {
    it("searches three times, each in its own pass, and sums the passes' input", async () => {
      const body = params({ system: "Answer with sources.", tools: [webSearch(5)] });
      const message = await create(body);
      const types = message.content.map((block) => block.type);
      expect(types).toEqual([
        ...Array.from({ length: 3 }, () => ["server_tool_use", "web_search_tool_result"]).flat(),
        "text",
      ]);
      for (let i = 0; i < 3; i++) {
        const use = message.content[2 * i]!;
        const result = message.content[2 * i + 1]!;
        if (use.type !== "server_tool_use" || result.type !== "web_search_tool_result")
          throw new Error("shape");
        expect(use.name).toBe("web_search");
        expect(use.id).toMatch(/^srvtoolu_/);
        expect(result.tool_use_id).toBe(use.id);
        expect((use.input as { query: string }).query).toContain(QUESTION);
        if (!Array.isArray(result.content)) throw new Error("expected results");
        expect(result.content.length).toBeGreaterThan(0);
        for (const hit of result.content) {
          expect(hit.type).toBe("web_search_result");
          expect(hit.url).toMatch(/^https:\/\/example\.invalid\//);
          expect(hit.title).toContain("generated");
          expect(hit.page_age).toBeNull();
        }
      }
      const text = message.content.at(-1)!;
      expect(text).toEqual({ type: "text", text: `${DEV_TEXT_LABEL} You said: ${QUESTION}` });
      expect(message.stop_reason).toBe("end_turn");
      expect(message.usage.server_tool_use).toEqual({ web_search_requests: 3, web_fetch_requests: 0 });
      // Four passes: the prompt, then the prompt grown by each search and its results.
      expect(message.usage.input_tokens).toBe(loopInput(body, message.content));
      expect(message.usage.input_tokens).toBeGreaterThan(4 * countRequestTokens(body));
      expect(message.usage.output_tokens).toBe(writtenTokens(message.content));
      expect(message.usage.iterations).toBeUndefined();
    });

    it.each([
      [undefined, 3],
      [0, 0],
      [1, 1],
      [2, 2],
      [8, 3],
    ])("never searches more than max_uses (%s → %i searches)", async (maxUses, searches) => {
      const body = params({ tools: [webSearch(maxUses)] });
      const message = await create(body);
      expect(message.usage.server_tool_use).toEqual({ web_search_requests: searches, web_fetch_requests: 0 });
      expect(message.content.filter((block) => block.type === "server_tool_use")).toHaveLength(searches);
      expect(message.usage.input_tokens).toBe(loopInput(body, message.content));
    });

    it.each(["web_search_20250305", "web_search_20260209", "web_search_20260318"] as const)(
      "knows the tool type %s",
      async (type) => {
        const message = await create(params({ tools: [{ type, name: "web_search", max_uses: 1 }] }));
        expect(message.usage.server_tool_use?.web_search_requests).toBe(1);
      },
    );

    it("stops the loop at max_tokens: a search that does not fit is not made", async () => {
      const first = devTokenCount(JSON.stringify({ query: QUESTION }));
      const body = params({ max_tokens: first + 1, tools: [webSearch()] });
      const message = await create(body);
      expect(message.stop_reason).toBe("max_tokens");
      expect(message.usage.server_tool_use?.web_search_requests).toBe(1);
      expect(message.content.map((block) => block.type)).toEqual([
        "server_tool_use",
        "web_search_tool_result",
      ]);
      expect(message.usage.output_tokens).toBe(first);
      expect(message.usage.input_tokens).toBe(loopInput(body, message.content));
    });

    it("reads the cached prompt in the later passes", async () => {
      const system = "A long shared system prompt that every turn sends unchanged.";
      const body = params({
        system: [{ type: "text", text: system, cache_control: { type: "ephemeral" } }],
        tools: [webSearch(1)],
      });
      const message = await create(body);
      // The prefix up to the breakpoint: the tool, then the system block.
      const cached = devTokenCount(JSON.stringify(webSearch(1))) + devTokenCount(system);
      expect(message.usage.cache_creation_input_tokens).toBe(cached);
      expect(message.usage.cache_creation?.ephemeral_5m_input_tokens).toBe(cached);
      expect(message.usage.cache_read_input_tokens).toBe(cached);
      const { input_tokens, cache_creation_input_tokens, cache_read_input_tokens } = message.usage;
      expect(input_tokens + (cache_creation_input_tokens ?? 0) + (cache_read_input_tokens ?? 0)).toBe(
        loopInput(body, message.content),
      );
    });

    it("writes each pass's growth under automatic caching; the stream's final write split is cumulative", async () => {
      const body = {
        ...params({ tools: [webSearch(1)] }),
        cache_control: { type: "ephemeral", ttl: "1h" },
      } as Params;
      const total = countRequestTokens(body);
      const events = await rawEvents(body);
      const start = (events[0]!.data.message as { usage: Record<string, unknown> }).usage;
      expect(start).toMatchObject({
        input_tokens: 0,
        cache_creation_input_tokens: total,
        cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: total },
      });
      const delta = events.at(-2)!.data.usage as Record<string, unknown>;
      // Pass 2 reads what pass 1 wrote and writes what the search added after it.
      expect(delta.input_tokens).toBe(0);
      expect(delta.cache_read_input_tokens).toBe(total);
      const written = delta.cache_creation_input_tokens as number;
      expect(written).toBeGreaterThan(total);
      expect(delta.cache_creation).toEqual({
        ephemeral_5m_input_tokens: 0,
        ephemeral_1h_input_tokens: written,
      });
    });

    it("streams the tool input as deltas and the results whole, with the totals in message_delta", async () => {
      const body = params({ tools: [webSearch(2)] });
      const events = await rawEvents(body);
      const names = events.map((e) => e.event);
      expect(names.slice(0, 4)).toEqual([
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
      ]);
      expect(events[1]!.data.content_block).toMatchObject({
        type: "server_tool_use",
        name: "web_search",
        input: {},
      });
      const starts = events.filter((e) => e.event === "content_block_start").map((e) => e.data.content_block);
      expect(starts.map((block) => (block as { type: string }).type)).toEqual([
        "server_tool_use",
        "web_search_tool_result",
        "server_tool_use",
        "web_search_tool_result",
        "text",
      ]);
      // A result block arrives whole: start, then stop, no deltas.
      const resultAt = events.findIndex((e) => e.event === "content_block_start" && e.data.index === 1);
      expect((starts[1] as { content: unknown[] }).content.length).toBeGreaterThan(0);
      expect(events[resultAt + 1]!.data).toEqual({ type: "content_block_stop", index: 1 });
      const json = events
        .filter((e) => e.event === "content_block_delta" && e.data.index === 0)
        .map((e) => (e.data.delta as { partial_json: string }).partial_json)
        .join("");
      expect(JSON.parse(json)).toEqual({ query: QUESTION });

      const start = (events[0]!.data.message as { usage: Record<string, unknown> }).usage;
      expect(start).toMatchObject({ input_tokens: countRequestTokens(body), output_tokens: 1 });
      expect(start.server_tool_use).toBeUndefined();
      const delta = events.at(-2)!.data;
      expect(delta.delta).toEqual({ stop_reason: "end_turn", stop_sequence: null });
      const nonStreamed = await create(body);
      expect(delta.usage).toEqual({
        input_tokens: nonStreamed.usage.input_tokens,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
        output_tokens: nonStreamed.usage.output_tokens,
        cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 },
        server_tool_use: { web_search_requests: 2, web_fetch_requests: 0 },
      });

      // The SDK assembles the same message.
      const message = await streamed(body);
      expect(message.content.map((block) => block.type)).toEqual(
        nonStreamed.content.map((block) => block.type),
      );
      expect(numbers(message.usage)).toEqual(numbers(nonStreamed.usage));
    });
  });

  describe("web fetch", () => {
    it("fetches once, the URL the user gave, and reports it", async () => {
      const url = "https://example.invalid/docs/pricing";
      const body = params({
        tools: [webFetch()],
        messages: [{ role: "user", content: `Summarise ${url} for me` }],
      });
      const message = await create(body);
      expect(message.content.map((block) => block.type)).toEqual([
        "server_tool_use",
        "web_fetch_tool_result",
        "text",
      ]);
      const [use, result] = message.content;
      expect(use).toMatchObject({ type: "server_tool_use", name: "web_fetch", input: { url } });
      expect(result).toMatchObject({
        type: "web_fetch_tool_result",
        tool_use_id: (use as { id: string }).id,
        content: { type: "web_fetch_result", url, content: { type: "document", source: { type: "text" } } },
      });
      expect(JSON.stringify(result)).toContain("generated page");
      expect(message.usage.server_tool_use).toEqual({ web_search_requests: 0, web_fetch_requests: 1 });
      expect(message.usage.input_tokens).toBe(loopInput(body, message.content));
      expect(message.usage.output_tokens).toBe(writtenTokens(message.content));
    });

    it("does not fetch with max_uses 0, and searches before fetching", async () => {
      const none = await create(params({ tools: [webFetch(0)] }));
      expect(none.usage.server_tool_use).toEqual({ web_search_requests: 0, web_fetch_requests: 0 });
      expect(none.content.map((block) => block.type)).toEqual(["text"]);

      const body = params({ tools: [webFetch(), webSearch(2)] });
      const both = await create(body);
      expect(
        both.content.filter((b) => b.type === "server_tool_use").map((b) => (b as { name: string }).name),
      ).toEqual(["web_search", "web_search", "web_fetch"]);
      expect(both.usage.server_tool_use).toEqual({ web_search_requests: 2, web_fetch_requests: 1 });
      expect(both.usage.input_tokens).toBe(loopInput(body, both.content));
    });

    it("streams the fetch the same way", async () => {
      const body = params({ tools: [webFetch()] });
      const nonStreamed = await create(body);
      const message = await streamed(body);
      expect(withoutIds(message.content)).toEqual(withoutIds(nonStreamed.content));
      expect(numbers(message.usage)).toEqual(numbers(nonStreamed.usage));
    });
  });

  describe("fast mode", () => {
    it.each([
      ["claude-opus-5", "fast"],
      ["claude-opus-4-8", "fast"],
      ["claude-opus-4-6", "standard"],
    ] as const)("speed fast on %s runs %s", async (model, speed) => {
      const message = await create(params({ model, speed: "fast" }));
      expect(message.usage.speed).toBe(speed);
      const events = await rawEvents(params({ model, speed: "fast" }));
      expect((events[0]!.data.message as { usage: { speed: string } }).usage.speed).toBe(speed);
    });

    it.each(["claude-opus-4-7", "claude-sonnet-4-6", "claude-haiku-4-5-20251001"])(
      "refuses speed fast on %s",
      async (model) => {
        expect(await rejected(params({ model, speed: "fast" }))).toMatch(/^speed: /);
        expect((await create(params({ model, speed: "standard" }))).usage.speed).toBe("standard");
      },
    );

    it("refuses a speed it does not know", async () => {
      expect(await rejected(params({ speed: "warp" as never }))).toMatch(/^speed: /);
    });
  });

  describe("data residency", () => {
    it("reports the requested geo, global by default", async () => {
      expect((await create(params({ inference_geo: "us" }))).usage.inference_geo).toBe("us");
      expect((await create(params({ inference_geo: "global" }))).usage.inference_geo).toBe("global");
      expect((await create(params())).usage.inference_geo).toBe("global");
      const events = await rawEvents(params({ inference_geo: "us" }));
      expect((events[0]!.data.message as { usage: { inference_geo: string } }).usage.inference_geo).toBe(
        "us",
      );
    });

    it("refuses inference_geo on a model older than 4.6, and a geo it does not know", async () => {
      const haiku = "claude-haiku-4-5-20251001";
      expect(await rejected(params({ model: haiku, inference_geo: "us" }))).toMatch(/^inference_geo: /);
      expect((await create(params({ model: haiku }))).usage.inference_geo).toBe("global");
      expect(await rejected(params({ inference_geo: "mars" }))).toMatch(/^inference_geo: /);
      expect(
        (await create(params({ model: "claude-opus-4-6", inference_geo: "us" }))).usage.inference_geo,
      ).toBe("us");
    });
  });

  describe("advisor", () => {
    it("calls the advisor once: its pass is in iterations only, capped at the tool's max_tokens", async () => {
      const body = params({ tools: [advisor({ max_tokens: 10 })] });
      const message = await create(body);
      expect(message.content.map((block) => block.type)).toEqual([
        "server_tool_use",
        "advisor_tool_result",
        "text",
      ]);
      const [use, result] = message.content;
      expect(use).toMatchObject({ type: "server_tool_use", name: "advisor", input: {} });
      if (result?.type !== "advisor_tool_result" || result.content.type !== "advisor_result")
        throw new Error("shape");
      expect(result.tool_use_id).toBe((use as { id: string }).id);
      expect(result.content.stop_reason).toBe("max_tokens");
      expect(result.content.text).toMatch(/^\[tollgate dev-upstream: generated advice, not a model\]/);

      const iterations = message.usage.iterations!;
      expect(iterations.map((it) => it.type)).toEqual(["message", "advisor_message", "message"]);
      const advice = iterations[1] as Iteration & { model: string };
      expect(advice.model).toBe("claude-opus-5");
      expect(advice.output_tokens).toBe(10);
      expect(advice.output_tokens).toBe(devTokenCount(result.content.text));
      // The advisor reads the executor's transcript up to its call.
      expect(advice.input_tokens).toBe(countRequestTokens(grown(body, message.content.slice(0, 1))));
      expect(iterations[0]!.input_tokens).toBe(countRequestTokens(body));
      expect(iterations[2]!.input_tokens).toBe(countRequestTokens(grown(body, message.content.slice(0, 2))));
      // Top-level: the executor's passes only.
      expect(message.usage.input_tokens).toBe(iterations[0]!.input_tokens + iterations[2]!.input_tokens);
      expect(message.usage.output_tokens).toBe(writtenTokens(message.content));
      expect(message.usage.server_tool_use).toBeUndefined();
    });

    it("gives its whole advice without a cap, and is not called with max_uses 0", async () => {
      const message = await create(params({ tools: [advisor()] }));
      const result = message.content[1];
      if (result?.type !== "advisor_tool_result" || result.content.type !== "advisor_result")
        throw new Error("shape");
      expect(result.content.stop_reason).toBe("end_turn");
      expect(message.usage.iterations![1]!.output_tokens).toBe(devTokenCount(result.content.text));

      const unused = await create(params({ tools: [advisor({ max_uses: 0 })] }));
      expect(unused.content.map((block) => block.type)).toEqual(["text"]);
      expect(unused.usage.iterations).toBeUndefined();
    });

    it("streams the advisor's iterations in the final message_delta", async () => {
      const body = params({ tools: [advisor({ max_tokens: 5 })] });
      const nonStreamed = await create(body);
      const events = await rawEvents(body);
      const delta = events.at(-2)!.data.usage as { iterations: unknown[] };
      expect(delta.iterations).toEqual(nonStreamed.usage.iterations);
      const message = await streamed(body);
      expect(withoutIds(message.content)).toEqual(withoutIds(nonStreamed.content));
      expect(numbers(message.usage)).toEqual(numbers(nonStreamed.usage));
    });
  });

  describe("compaction", () => {
    it("always reports iterations: one message pass below the trigger", async () => {
      for (const management of [compact(), compact(1000)]) {
        const message = await create(params({ context_management: management }));
        expect(message.content.map((block) => block.type)).toEqual(["text"]);
        expect(message.usage.iterations).toEqual([
          {
            type: "message",
            input_tokens: message.usage.input_tokens,
            output_tokens: message.usage.output_tokens,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 0,
            cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 },
          },
        ]);
      }
    });

    it("compacts at the trigger: the summary replaces the conversation, top-level is the message pass", async () => {
      const conversation: Params["messages"] = [
        { role: "user", content: "Tell me about tolls" },
        { role: "assistant", content: "Tolls are fees for passage on roads, bridges and tunnels." },
        { role: "user", content: QUESTION },
      ];
      const base = params({ system: "Be brief.", messages: conversation });
      const total = countRequestTokens(base);
      const body = { ...base, context_management: compact(total) };
      const message = await create(body);
      const [summary, text] = message.content;
      if (summary?.type !== "compaction") throw new Error("expected a compaction block first");
      expect(summary.content).toMatch(/^\[tollgate dev-upstream: generated summary, not a model\]/);
      expect(text?.type).toBe("text");
      const iterations = message.usage.iterations!;
      expect(iterations.map((it) => it.type)).toEqual(["compaction", "message"]);
      expect(iterations[0]).toMatchObject({
        input_tokens: total,
        output_tokens: devTokenCount(summary.content!),
      });
      const compacted = { ...body, messages: [{ role: "assistant", content: [summary] }] };
      expect(iterations[1]!.input_tokens).toBe(countRequestTokens(compacted));
      expect(message.usage.input_tokens).toBe(iterations[1]!.input_tokens);
      expect(message.usage.output_tokens).toBe(writtenTokens(message.content));

      // One below the trigger: no compaction.
      const under = await create({ ...base, context_management: compact(total + 1) });
      expect(under.usage.iterations!.map((it) => it.type)).toEqual(["message"]);

      // Sent back, the compaction block cuts the conversation: what came before it is not read.
      const next: Params = {
        ...body,
        context_management: compact(100_000),
        messages: [
          ...conversation,
          { role: "assistant", content: message.content as never },
          { role: "user", content: "And per month?" },
        ],
      };
      const after = await create(next);
      const read = { ...next, messages: next.messages.slice(-2) };
      expect(after.usage.input_tokens).toBe(countRequestTokens(read));
      expect(after.usage.input_tokens).toBeLessThan(countRequestTokens(next));
      expect((await client.beta.messages.countTokens(next)).input_tokens).toBe(countRequestTokens(read));
    });

    it("streams the summary as a compaction_delta and the iterations in message_delta", async () => {
      const body = params({ context_management: compact(1) });
      const events = await rawEvents(body);
      expect(events[1]!.data).toMatchObject({
        type: "content_block_start",
        index: 0,
        content_block: { type: "compaction", content: null },
      });
      const delta = events.find((e) => e.event === "content_block_delta")!.data.delta as { content: string };
      expect(delta).toMatchObject({ type: "compaction_delta" });
      const final = events.at(-2)!.data.usage as { iterations: Iteration[] };
      expect(final.iterations.map((it) => it.type)).toEqual(["compaction", "message"]);
      expect(final.iterations[0]!.output_tokens).toBe(devTokenCount(delta.content));

      const message = await streamed(body);
      const nonStreamed = await create(body);
      expect(message.content).toEqual(nonStreamed.content);
      expect(numbers(message.usage)).toEqual(numbers(nonStreamed.usage));
    });

    it("accepts any positive trigger and refuses a malformed one", async () => {
      const bad = {
        edits: [{ type: "compact_20260112" as const, trigger: { type: "input_tokens" as const, value: 0 } }],
      };
      expect(await rejected(params({ context_management: bad }))).toMatch(/^context_management/);
    });
  });

  describe("server-side fallback", () => {
    it("serves from the default fallback when the primary declines", async () => {
      const body = params({ model: "claude-opus-5", fallbacks: "default", messages: declined });
      const message = await create(body);
      expect(message.model).toBe("claude-opus-4-8");
      expect(message.content[0]).toEqual({
        type: "fallback",
        from: { model: "claude-opus-5" },
        to: { model: "claude-opus-4-8" },
        trigger: { type: "refusal", category: null },
      });
      expect(message.content[1]?.type).toBe("text");
      const iterations = message.usage.iterations!;
      expect(iterations.map((it) => [it.type, (it as { model?: string }).model])).toEqual([
        ["message", "claude-opus-5"],
        ["fallback_message", "claude-opus-4-8"],
      ]);
      expect(iterations[0]).toMatchObject({ input_tokens: countRequestTokens(body), output_tokens: 0 });
      expect(iterations[1]!.input_tokens).toBe(countRequestTokens(body));
      expect(message.usage.output_tokens).toBe(writtenTokens(message.content));
    });

    it("ignores fallbacks when the primary does not decline", async () => {
      const message = await create(params({ model: "claude-opus-5", fallbacks: "default" }));
      expect(message.model).toBe("claude-opus-5");
      expect(message.content.map((block) => block.type)).toEqual(["text"]);
      expect(message.usage.iterations).toBeUndefined();
    });

    it("uses the first listed fallback with its own max_tokens and speed", async () => {
      const body = params({
        model: "claude-opus-5",
        speed: "fast",
        fallbacks: [{ model: "claude-sonnet-4-6", max_tokens: 4 }, { model: "claude-opus-4-8" }],
        messages: declined,
      });
      const message = await create(body);
      expect(message.model).toBe("claude-sonnet-4-6");
      expect(message.stop_reason).toBe("max_tokens");
      expect(message.usage.output_tokens).toBe(4);
      // Sonnet does not take fast mode: the inherited speed falls back to standard.
      expect(message.usage.speed).toBe("standard");
      const fast = await create({ ...body, fallbacks: [{ model: "claude-opus-4-8" }] });
      expect(fast.usage.speed).toBe("fast");
      expect(await rejected({ ...body, fallbacks: [{ model: "claude-sonnet-4-6", speed: "fast" }] })).toMatch(
        /^fallbacks\.0\.speed: /,
      );
      const four = Array.from({ length: 4 }, () => ({ model: "claude-opus-4-8" }));
      expect(await rejected({ ...body, fallbacks: four })).toMatch(/^fallbacks: /);
    });

    it("reports the fallback's tool loop as message passes ending in fallback_message", async () => {
      const body = params({
        model: "claude-opus-5",
        fallbacks: "default",
        tools: [webSearch(2)],
        messages: declined,
      });
      const message = await create(body);
      const iterations = message.usage.iterations!;
      expect(iterations.map((it) => it.type)).toEqual(["message", "message", "message", "fallback_message"]);
      expect(message.usage.server_tool_use?.web_search_requests).toBe(2);
      expect(message.usage.input_tokens).toBe(loopInput(body, message.content.slice(1)));
    });

    it("streams: message_start names the requested model, the SDK relabels from the fallback block", async () => {
      const body = params({ model: "claude-opus-5", fallbacks: "default", messages: declined });
      const events = await rawEvents(body);
      expect((events[0]!.data.message as { model: string }).model).toBe("claude-opus-5");
      expect(events[1]!.data.content_block).toMatchObject({
        type: "fallback",
        to: { model: "claude-opus-4-8" },
      });
      expect(events[2]!.event).toBe("ping");
      expect(events[3]!.event).toBe("content_block_stop");
      const message = await streamed(body);
      expect(message.model).toBe("claude-opus-4-8");
      expect(numbers(message.usage)).toEqual(numbers((await create(body)).usage));
    });
  });

  describe("everything at once", () => {
    it("keeps the rules with search, fetch, advisor, compaction, fallback, speed and geo together", async () => {
      const body = params({
        model: "claude-opus-5",
        speed: "fast",
        inference_geo: "us",
        fallbacks: "default",
        context_management: compact(1),
        thinking: { type: "enabled", budget_tokens: 1024 },
        tools: [webSearch(1), webFetch(), advisor({ max_tokens: 8 })],
        messages: declined,
      });
      const message = await create(body);
      expect(message.model).toBe("claude-opus-4-8");
      expect(message.usage).toMatchObject({ speed: "fast", inference_geo: "us" });
      expect(message.usage.server_tool_use).toEqual({ web_search_requests: 1, web_fetch_requests: 1 });
      expect(message.content.map((block) => block.type)).toEqual([
        "fallback",
        "compaction",
        "thinking",
        "server_tool_use",
        "web_search_tool_result",
        "server_tool_use",
        "web_fetch_tool_result",
        "server_tool_use",
        "advisor_tool_result",
        "text",
      ]);
      expect(message.usage.iterations!.map((it) => it.type)).toEqual([
        "message",
        "compaction",
        "message",
        "message",
        "message",
        "advisor_message",
        "fallback_message",
      ]);
      expect(message.usage.output_tokens).toBe(writtenTokens(message.content));
      const streamedMessage = await streamed(body);
      expect(numbers(streamedMessage.usage)).toEqual(numbers(message.usage));
    });
  });
});
