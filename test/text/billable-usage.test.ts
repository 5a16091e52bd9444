import Anthropic from "@anthropic-ai/sdk";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { RecordedRequest, ScriptedReply } from "../../src/dev/provider/dev-upstream.js";
import { HoldStatus, type UsageRow } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

// Everything the provider bills beyond the four token counts, priced to the micro-dollar through
// the official SDK, streaming and not. The provider's answers are scripted so that each usage
// object is exactly the documented shape; every expected charge is computed by hand in the
// comments (list prices per million tokens: Opus 4.8 and Opus 5 $5 in / $25 out, 5-minute write
// $6.25, 1-hour write $10, read $0.50, fast mode $10 / $50 (writes $12.50 / $20, read $1);
// Sonnet 4.6 $3 / $15 / read $0.30; US-only ×1.1; web search $10 per 1,000).

type Usage = Record<string, unknown>;

/**
 * The provider's answer carrying `usage` (top-level `model` as given), as JSON or as a stream.
 * The format is the one the request asked for: the gateway asks for a stream for a call held
 * pass by pass whatever its client asked (docs/billing.md, "Holding pass by pass").
 */
function answer(usage: Usage, stream: boolean, model = "claude-opus-4-8"): ScriptedReply {
  const message = {
    id: "msg_priced",
    type: "message",
    role: "assistant",
    model,
    content: [{ type: "text", text: "priced answer" }],
    stop_reason: "end_turn",
    stop_sequence: null,
    usage,
  };
  if (!stream) return { kind: "json", status: 200, body: message };
  // message_start carries the input side; the final message_delta carries the cumulative totals,
  // including server_tool_use and iterations (docs/protocols.md, "Usage").
  const { output_tokens: _output, server_tool_use: _tools, iterations: _passes, ...start } = usage;
  return {
    kind: "stream",
    events: [
      {
        event: "message_start",
        data: {
          type: "message_start",
          message: { ...message, content: [], stop_reason: null, usage: { ...start, output_tokens: 1 } },
        },
      },
      {
        event: "content_block_start",
        data: { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
      },
      {
        event: "content_block_delta",
        data: { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "priced answer" } },
      },
      { event: "content_block_stop", data: { type: "content_block_stop", index: 0 } },
      {
        event: "message_delta",
        data: { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage },
      },
      { event: "message_stop", data: { type: "message_stop" } },
    ],
  };
}

/** Whether a request to the provider asks for a stream. */
function asksStream(request: RecordedRequest): boolean {
  return (request.body as { stream?: unknown }).stream === true;
}

/** Long enough that the prompt's input bound covers the input-side tokens the answers report. */
const LONG_SYSTEM = "context for the hold bound ".repeat(800);

describe.each([false, true])("billable usage through the SDK (stream: %s)", (stream) => {
  let t: TextGateway;
  let client: Anthropic;

  beforeAll(async () => {
    t = await startTextGateway();
    await t.credit(2_000_000_000n); // $2,000: server-tool loops hold a context window per iteration.
    client = new Anthropic({ baseURL: t.baseUrl, apiKey: t.secret, maxRetries: 0 });
  });
  afterEach(() => t.script(undefined));
  afterAll(async () => {
    // Every call here stayed within the provider's documented limits: none was capped.
    expect(t.gateway.app.counters?.count("capped_charge")).toBe(0);
    t.expectSoundLedger();
    await t.close();
  });

  /** Sends one call whose provider answer reports `usage`; returns its usage row and what reached the provider. */
  async function call(
    params: Record<string, unknown>,
    usage: Usage,
    model?: string,
    headers: Record<string, string> = {},
  ): Promise<{ row: UsageRow; sent: RecordedRequest }> {
    t.script((request) => answer(usage, asksStream(request), model));
    const body = {
      model: "model-opus-4-8",
      max_tokens: 4000,
      system: LONG_SYSTEM,
      messages: [{ role: "user", content: "price this" }],
      ...params,
    } as unknown as Anthropic.MessageCreateParamsNonStreaming;
    if (stream) await client.messages.stream(body, { headers }).finalMessage();
    else await client.messages.create(body, { headers });
    const [row] = await t.usage();
    expect(row!.status).toBe(HoldStatus.SETTLED);
    expect(row!.amount).toBeLessThanOrEqual(row!.heldAmount);
    return { row: row!, sent: t.upstream.messageRequests().at(-1)! };
  }

  it("fast mode + US-only inference + cache writes: fast rates, then ×1.1, caching on top", async () => {
    const { row } = await call(
      { speed: "fast", inference_geo: "us" },
      {
        input_tokens: 1000,
        output_tokens: 2000,
        cache_creation_input_tokens: 5000,
        cache_creation: { ephemeral_5m_input_tokens: 4000, ephemeral_1h_input_tokens: 1000 },
        cache_read_input_tokens: 8000,
        speed: "fast",
        inference_geo: "us",
      },
    );
    // 1,000×$10 + 2,000×$50 + 4,000×$12.50 + 1,000×$20 + 8,000×$1 per MTok = 188,000 µ$; ×1.1.
    expect(row.amount).toBe(206_800n);
    expect(row.charges).toHaveLength(1);
    expect(row.charges[0]).toMatchObject({
      kind: "tokens",
      pass: "message",
      speed: "fast",
      multiplierBp: 11_000,
    });
    expect(row.charges[0]!.description).toBe("model-opus-4-8 · tokens · fast mode ×2 · US-only ×1.1");
    expect(row.usage).toMatchObject({
      inputTokens: 1000n,
      cacheWrite5mTokens: 4000n,
      cacheWrite1hTokens: 1000n,
    });
  });

  it("fast mode on its own doubles every rate; US-only on its own is ×1.1", async () => {
    const fast = await call({ speed: "fast" }, { input_tokens: 1000, output_tokens: 100, speed: "fast" });
    // 1,000×$10 + 100×$50 = 15,000 µ$.
    expect(fast.row.amount).toBe(15_000n);
    const us = await call(
      { inference_geo: "us" },
      { input_tokens: 1000, output_tokens: 100, inference_geo: "us" },
    );
    // (1,000×$5 + 100×$25) × 1.1 = 8,250 µ$.
    expect(us.row.amount).toBe(8_250n);
    // A workspace default can apply US-only without the field: billed as reported.
    const unnamed = await call({}, { input_tokens: 1000, output_tokens: 100, inference_geo: "us" });
    expect(unnamed.row.amount).toBe(8_250n);
  });

  it("web search + compaction: every pass at its rates, plus $0.01 per search", async () => {
    const { row, sent } = await call(
      {
        tools: [{ type: "web_search_20250305", name: "web_search", max_uses: 5 }],
        context_management: { edits: [{ type: "compact_20260112" }] },
      },
      {
        input_tokens: 23000,
        output_tokens: 1000,
        server_tool_use: { web_search_requests: 3, web_fetch_requests: 0 },
        iterations: [
          { type: "compaction", input_tokens: 180000, output_tokens: 3500 },
          { type: "message", input_tokens: 23000, output_tokens: 1000 },
        ],
      },
    );
    // compaction 180,000×$5 + 3,500×$25 = 987,500; message 23,000×$5 + 1,000×$25 = 140,000;
    // 3 searches = 30,000 µ$.
    expect(row.amount).toBe(1_157_500n);
    expect(row.charges.map((c) => [c.kind, c.pass, c.amountPico / 1_000_000n])).toEqual([
      ["tokens", "compaction", 987_500n],
      ["tokens", "message", 140_000n],
      ["web_search", "", 30_000n],
    ]);
    expect(row.charges[2]!.description).toBe("3 web searches");
    expect(row.usage).toMatchObject({ inputTokens: 203_000n, outputTokens: 4_500n });
    expect((sent.body as { tools: unknown[] }).tools[0]).toMatchObject({ max_uses: 5 });
  });

  it("a web search tool without max_uses is sent with the default cap, listed as repaired", async () => {
    t.script((request) =>
      answer(
        { input_tokens: 10, output_tokens: 10, server_tool_use: { web_search_requests: 1 } },
        asksStream(request),
      ),
    );
    const body = {
      model: "model-opus-4-8",
      max_tokens: 100,
      messages: [{ role: "user", content: "search" }],
      tools: [{ type: "web_search_20250305", name: "web_search" }],
    } as unknown as Anthropic.MessageCreateParamsNonStreaming;
    const response = stream
      ? await client.messages.stream(body).withResponse()
      : await client.messages.create(body).withResponse();
    expect(response.response.headers.get("x-gateway-repaired-params")).toBe("tools.0.max_uses");
    const sent = t.upstream.messageRequests().at(-1)!;
    expect((sent.body as { tools: unknown[] }).tools[0]).toMatchObject({ max_uses: 5 });
  });

  it("a fallback with one declined attempt: the declined attempt is listed, not charged", async () => {
    const { row, sent } = await call(
      { model: "model-fable-5", fallbacks: [{ model: "model-opus-4-8" }] },
      {
        input_tokens: 412,
        output_tokens: 264,
        iterations: [
          { type: "message", model: "claude-fable-5", input_tokens: 535, output_tokens: 0 },
          { type: "fallback_message", model: "claude-opus-4-8", input_tokens: 412, output_tokens: 264 },
        ],
      },
      "claude-opus-4-8",
    );
    // 412×$5 + 264×$25 = 8,660 µ$ (Opus 4.8 served); Fable's declined 535 input tokens are free.
    expect(row.amount).toBe(8_660n);
    expect(row.charges.map((c) => [c.pass, c.model, c.amountPico])).toEqual([
      ["declined", "model-fable-5", 0n],
      ["fallback", "model-opus-4-8", 8_660_000_000n],
    ]);
    // The provider got its own model names.
    expect(sent.body).toMatchObject({ model: "claude-fable-5", fallbacks: [{ model: "claude-opus-4-8" }] });
  });

  it("advisor calls at the advisor model's rates, outside the top-level totals", async () => {
    const { row, sent } = await call(
      {
        model: "model-sonnet-4-6",
        tools: [{ type: "advisor_20260301", name: "advisor", model: "model-opus-5", max_tokens: 2000 }],
      },
      {
        input_tokens: 1760,
        output_tokens: 531,
        cache_read_input_tokens: 412,
        iterations: [
          { type: "message", input_tokens: 412, output_tokens: 89 },
          { type: "advisor_message", model: "claude-opus-5", input_tokens: 823, output_tokens: 1612 },
          { type: "message", input_tokens: 1348, output_tokens: 442, cache_read_input_tokens: 412 },
        ],
      },
      "claude-sonnet-4-6",
    );
    // Sonnet 4.6: 412×$3 + 89×$15 = 2,571; Opus 5 advisor: 823×$5 + 1,612×$25 = 44,415;
    // Sonnet 4.6: 1,348×$3 + 442×$15 + 412×$0.30 = 10,797.6 → 57,783.6 µ$, rounded up once.
    expect(row.amount).toBe(57_784n);
    expect(row.charges.map((c) => c.pass)).toEqual(["message", "advisor", "message"]);
    expect(row.charges[1]!.description).toBe("model-opus-5 · advisor call");
    expect((sent.body as { tools: { model: string }[] }).tools[0]!.model).toBe("claude-opus-5");
  });

  it("usage it does not know is logged, counted, and the known part is charged", async () => {
    const before = t.gateway.app.counters!.count("unpriced_usage");
    const { row } = await call(
      {},
      {
        input_tokens: 1000,
        output_tokens: 100,
        server_tool_use: { web_search_requests: 1, code_execution_requests: 2 },
        container_seconds: 42,
      },
    );
    // 1,000×$5 + 100×$25 + 1 search = 17,500 µ$; the unknown fields add nothing.
    expect(row.amount).toBe(17_500n);
    expect(row.unpriced).toEqual([
      "usage.container_seconds",
      "usage.server_tool_use.code_execution_requests",
    ]);
    expect(t.gateway.app.counters!.count("unpriced_usage")).toBe(before + 1);
  });

  it("a 200 without usage is charged the gateway's own count, never $0, and counted", async () => {
    const before = t.gateway.app.counters!.count("missing_usage");
    t.script((request) => {
      if (request.path.startsWith("/v1/messages/count_tokens")) return undefined; // the dev counter answers
      const reply = answer({}, stream);
      if (reply.kind === "json") return { ...reply, body: { ...(reply.body as object), usage: undefined } };
      return reply;
    });
    const body = {
      model: "model-opus-4-8",
      max_tokens: 100,
      messages: [{ role: "user", content: "no usage here" }],
    } as unknown as Anthropic.MessageCreateParamsNonStreaming;
    if (stream) await client.messages.stream(body).finalMessage();
    else await client.messages.create(body);
    const [row] = await t.usage();
    expect(row!.status).toBe(HoldStatus.SETTLED);
    expect(row!.usage!.inputTokens).toBeGreaterThan(0n);
    expect(row!.usage!.outputTokens).toBeGreaterThan(0n);
    expect(row!.amount).toBeGreaterThan(0n);
    expect(t.gateway.app.counters!.count("missing_usage")).toBe(before + 1);
  });
});

describe("a 402 that helps, as the SDK sees it", () => {
  let t: TextGateway;
  let client: Anthropic;

  beforeAll(async () => {
    t = await startTextGateway();
    // $2.85: enough for the prompt and about 110,000 output tokens of Opus 4.8, not 128,000.
    await t.credit(2_850_000n);
    client = new Anthropic({ baseURL: t.baseUrl, apiKey: t.secret, maxRetries: 2 });
  });
  afterAll(async () => {
    t.expectSoundLedger();
    await t.close();
  });

  // An explicit timeout: the SDK refuses large non-streaming max_tokens without one.
  const LONG = { timeout: 60_000 };
  const request = (maxTokens: number) =>
    ({
      model: "model-opus-4-8",
      max_tokens: maxTokens,
      inference_geo: "global",
      messages: [{ role: "user", content: "how much can I afford?" }],
    }) as unknown as Anthropic.MessageCreateParamsNonStreaming;

  it("names the chain, the need, the balance, the largest max_tokens that fits and the Wallet page; not retried", async () => {
    const sent = t.upstream.requests.length;
    const error = (await client.messages
      .create(request(128_000), LONG)
      .catch((e: unknown) => e)) as InstanceType<typeof Anthropic.APIError>;
    expect(error.status).toBe(402);
    expect(error.headers?.get("x-should-retry")).toBe("false");
    expect(error.headers?.get("x-gateway-billing-chain")).toBe("base");
    const message = (error.error as { error: { type: string; message: string } }).error;
    expect(message.type).toBe("billing_error");
    expect(message.message).toMatch(
      /^Insufficient funds on base: this call needs up to \d+\.\d{6} USDC, 2\.850000 USDC is available\. This request would fit with max_tokens up to \d{6}\. Add funds on the Wallet page: http:\/\/127\.0\.0\.1:\d+\/dashboard#\/wallet$/,
    );
    // Nothing reached the provider (and x-should-retry: false kept the SDK from retrying).
    expect(t.upstream.requests.length).toBe(sent);
    const affordable = Number(/max_tokens up to (\d+)/.exec(message.message)![1]);

    // The figure is exact: max_tokens N is held, N + 1 is not.
    await expect(client.messages.create(request(affordable + 1), LONG)).rejects.toMatchObject({
      status: 402,
    });
    t.script(() => answer({ input_tokens: 10, output_tokens: 10 }, false));
    try {
      await client.messages.create(request(affordable), LONG);
    } finally {
      t.script(undefined);
    }
    const [row] = await t.usage();
    expect(row!.status).toBe(HoldStatus.SETTLED);
    expect(row!.heldAmount).toBeLessThanOrEqual(2_850_000n);
  });
});

describe("features that cannot be priced per call, or are not offered, are refused", () => {
  let t: TextGateway;
  let client: Anthropic;

  beforeAll(async () => {
    t = await startTextGateway();
    await t.credit(100_000_000n);
    client = new Anthropic({ baseURL: t.baseUrl, apiKey: t.secret, maxRetries: 0 });
  });
  afterAll(async () => {
    t.expectSoundLedger();
    await t.close();
  });

  it.each([
    [
      "tools.0.type",
      { tools: [{ type: "code_execution_20250825", name: "code_execution" }] },
      /container time/,
    ],
    ["container", { container: "container_011CR" }, /container time/],
    [
      "tools.1.type",
      {
        tools: [
          { name: "mine", input_schema: { type: "object" } },
          { type: "gizmo_20991231", name: "g" },
        ],
      },
      /does not know the tool type/,
    ],
    ["speed", { model: "model-opus-4-7", speed: "fast" }, /does not offer fast mode/],
    ["speed", { speed: "ludicrous" }, /must be one of/],
    ["inference_geo", { model: "model-haiku-4-5", inference_geo: "us" }, /does not take inference_geo/],
    ["inference_geo", { inference_geo: "mars" }, /must be one of global, us/],
    ["fallbacks.0.model", { fallbacks: [{ model: "gpt-9" }] }, /unknown model/],
    [
      "tools.0.model",
      { tools: [{ type: "advisor_20260301", name: "advisor", model: "nope" }] },
      /unknown model/,
    ],
  ])("%s → 400 naming it; nothing forwarded, nothing held", async (field, params, message) => {
    const sent = t.upstream.requests.length;
    const rows = (await t.usage()).length;
    const error = await client.messages
      .create({
        model: "model-opus-4-8",
        max_tokens: 100,
        messages: [{ role: "user", content: "refuse me" }],
        ...params,
      } as unknown as Anthropic.MessageCreateParamsNonStreaming)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Anthropic.BadRequestError);
    const body = (error as InstanceType<typeof Anthropic.BadRequestError>).error as {
      error: { message: string };
    };
    expect(body.error.message).toMatch(message);
    expect(body.error.message).toContain(field);
    expect(t.upstream.requests.length).toBe(sent);
    expect((await t.usage()).length).toBe(rows);
  });

  it.each([
    ["POST", "/v1/messages/batches"],
    ["GET", "/v1/messages/batches"],
    ["POST", "/v1/complete"],
    ["GET", "/v1/files"],
    ["POST", "/v1/messages/count_tokens/extra"],
  ])("%s %s answers 404 in the envelope; nothing forwarded, nothing charged", async (method, path) => {
    const sent = t.upstream.requests.length;
    const rows = (await t.usage()).length;
    const response = await fetch(`${t.baseUrl}${path}`, {
      method,
      headers: {
        "x-api-key": t.secret,
        "content-type": "application/json",
        "anthropic-version": "2023-06-01",
      },
      body: method === "POST" ? JSON.stringify({ requests: [] }) : undefined,
    });
    expect(response.status).toBe(404);
    expect(response.headers.get("x-request-id")).toMatch(/^req_/);
    expect(await response.json()).toMatchObject({ type: "error", error: { type: "not_found_error" } });
    expect(t.upstream.requests.length).toBe(sent);
    expect((await t.usage()).length).toBe(rows);
  });
});

describe("every feature at once, against the dev upstream's own answers", () => {
  let t: TextGateway;
  let client: Anthropic;

  beforeAll(async () => {
    t = await startTextGateway();
    await t.credit(2_000_000_000n);
    client = new Anthropic({ baseURL: t.baseUrl, apiKey: t.secret, maxRetries: 0 });
  });
  afterAll(async () => {
    expect(t.gateway.app.counters?.count("capped_charge")).toBe(0);
    expect(t.gateway.app.counters?.count("unpriced_usage")).toBe(0);
    t.expectSoundLedger();
    await t.close();
  });

  /** List prices in µ$ per MTok of the provider models these calls use; fast where offered. */
  const PRICES: Record<
    string,
    { in: bigint; out: bigint; w5m: bigint; w1h: bigint; read: bigint; fast: boolean }
  > = {
    "claude-opus-4-8": {
      in: 5_000_000n,
      out: 25_000_000n,
      w5m: 6_250_000n,
      w1h: 10_000_000n,
      read: 500_000n,
      fast: true,
    },
    "claude-opus-5": {
      in: 5_000_000n,
      out: 25_000_000n,
      w5m: 6_250_000n,
      w1h: 10_000_000n,
      read: 500_000n,
      fast: true,
    },
    "claude-fable-5": {
      in: 10_000_000n,
      out: 50_000_000n,
      w5m: 12_500_000n,
      w1h: 20_000_000n,
      read: 1_000_000n,
      fast: false,
    },
  };

  /**
   * The price of a provider usage object, recomputed here from the documented rule, independently
   * of the gateway's code: each iteration at its model (declined attempts free), fast ×2,
   * US-only ×1.1, $0.01 per search; in µ$, rounded up once.
   */
  function listPrice(usage: Record<string, unknown>, servedBy: string, requested: string): bigint {
    type Pass = Record<string, unknown> & { type?: string; model?: string };
    const iterations = (usage.iterations as Pass[] | undefined) ?? [
      { ...usage, type: "message", model: servedBy },
    ];
    const lastFallback = iterations.map((p) => p.type).lastIndexOf("fallback_message");
    let tenthsOfPico = 0n;
    iterations.forEach((pass, i) => {
      if (pass.type === "message" && i < lastFallback && pass.output_tokens === 0) return; // declined
      const p = PRICES[pass.model ?? requested]!;
      const x = usage.speed === "fast" && p.fast ? 2n : 1n;
      const creation = (pass.cache_creation ?? {}) as Record<string, number>;
      const w1h = BigInt(creation.ephemeral_1h_input_tokens ?? 0);
      const w5m = BigInt(Number(pass.cache_creation_input_tokens ?? 0)) - w1h;
      const pico =
        BigInt(Number(pass.input_tokens ?? 0)) * p.in * x +
        BigInt(Number(pass.output_tokens ?? 0)) * p.out * x +
        w5m * p.w5m * x +
        w1h * p.w1h * x +
        BigInt(Number(pass.cache_read_input_tokens ?? 0)) * p.read * x;
      tenthsOfPico += pico * (usage.inference_geo === "us" ? 11n : 10n);
    });
    const searches = BigInt(
      Number((usage.server_tool_use as Record<string, number> | undefined)?.web_search_requests ?? 0),
    );
    const micro = tenthsOfPico + searches * 10_000n * 1_000_000n * 10n;
    return (micro + 10_000_000n - 1n) / 10_000_000n;
  }

  /** One call both ways; returns the usage object the provider reported, as the client saw it. */
  async function send(
    body: Record<string, unknown>,
    stream: boolean,
  ): Promise<{ usage: Record<string, unknown>; model: string }> {
    const params = { max_tokens: 300, ...body } as unknown as Anthropic.MessageCreateParamsNonStreaming;
    if (!stream) {
      const message = await client.messages.create(params);
      return { usage: message.usage as unknown as Record<string, unknown>, model: message.model };
    }
    // The raw final message_delta carries the cumulative usage with its iterations.
    const s = client.messages.stream(params);
    let usage: Record<string, unknown> = {};
    s.on("streamEvent", (event) => {
      if (event.type === "message_delta") usage = { ...usage, ...(event.usage as object) };
      if (event.type === "message_start") usage = { ...(event.message.usage as object) };
    });
    const final = await s.finalMessage();
    return { usage, model: final.model };
  }

  it.each([false, true])(
    "fast + US-only + web search + web fetch + advisor + compaction: charged the list price of the reported usage (stream: %s)",
    async (stream) => {
      const { usage, model } = await send(
        {
          model: "model-opus-4-8",
          speed: "fast",
          inference_geo: "us",
          system: "You are a careful researcher. ".repeat(30),
          messages: [
            { role: "user", content: `Look up https://example.invalid/gateways and compare (${stream}).` },
          ],
          tools: [
            { type: "web_search_20250305", name: "web_search", max_uses: 3 },
            { type: "web_fetch_20250910", name: "web_fetch", max_uses: 1 },
            { type: "advisor_20260301", name: "advisor", model: "model-opus-5", max_tokens: 1500 },
          ],
          context_management: {
            edits: [{ type: "compact_20260112", trigger: { type: "input_tokens", value: 100 } }],
          },
        },
        stream,
      );
      const kinds = (usage.iterations as { type: string }[]).map((i) => i.type);
      expect(kinds).toEqual(expect.arrayContaining(["compaction", "advisor_message", "message"]));
      expect(usage).toMatchObject({
        speed: "fast",
        inference_geo: "us",
        server_tool_use: { web_search_requests: 3, web_fetch_requests: 1 },
      });
      const [row] = await t.usage();
      expect(row!.status).toBe(HoldStatus.SETTLED);
      expect(row!.amount).toBe(listPrice(usage, model, "claude-opus-4-8"));
      expect(row!.charges.map((c) => c.description)).toEqual(
        expect.arrayContaining([
          "3 web searches",
          "1 web fetch (tokens only)",
          "model-opus-5 · advisor call · fast mode ×2 · US-only ×1.1",
        ]),
      );
      expect(row!.amount).toBeLessThanOrEqual(row!.heldAmount);
    },
  );

  it.each([false, true])(
    "a declined primary and its fallback, with web search: the declined attempt is free (stream: %s)",
    async (stream) => {
      const { usage, model } = await send(
        {
          model: "model-fable-5",
          fallbacks: [{ model: "model-opus-4-8" }],
          messages: [{ role: "user", content: `Search for gateway news [decline] (${stream})` }],
          tools: [{ type: "web_search_20250305", name: "web_search", max_uses: 2 }],
        },
        stream,
      );
      const [row] = await t.usage();
      expect(row!.amount).toBe(listPrice(usage, model, "claude-fable-5"));
      expect(row!.charges.map((c) => c.pass)).toEqual(expect.arrayContaining(["declined", "fallback"]));
      expect(row!.charges.find((c) => c.pass === "declined")!.amountPico).toBe(0n);
      expect(row!.charges.find((c) => c.kind === "web_search")!.quantity).toBe(2n);
    },
  );
});
