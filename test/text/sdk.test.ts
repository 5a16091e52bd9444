import Anthropic from "@anthropic-ai/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countRequestTokens } from "../../src/dev/provider/dev-tokens.js";
import { HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { expectedCharge, startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

// The official SDK against the gateway, with the dev upstream on a real socket behind it.

/** The composite stream of docs/protocols.md, "The message stream": thinking, text, tool call, cache. */
const TRANSCRIPT = [
  {
    event: "message_start",
    data: {
      type: "message_start",
      message: {
        id: "msg_01XYZ",
        type: "message",
        role: "assistant",
        model: "claude-opus-4-8",
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: {
          input_tokens: 472,
          cache_creation_input_tokens: 1500,
          cache_read_input_tokens: 8192,
          cache_creation: { ephemeral_5m_input_tokens: 1000, ephemeral_1h_input_tokens: 500 },
          output_tokens: 2,
          service_tier: "standard",
        },
      },
    },
  },
  {
    event: "content_block_start",
    data: {
      type: "content_block_start",
      index: 0,
      content_block: { type: "thinking", thinking: "", signature: "" },
    },
  },
  { event: "ping", data: { type: "ping" } },
  {
    event: "content_block_delta",
    data: {
      type: "content_block_delta",
      index: 0,
      delta: { type: "thinking_delta", thinking: "User wants SF weather; call the tool." },
    },
  },
  {
    event: "content_block_delta",
    data: {
      type: "content_block_delta",
      index: 0,
      delta: { type: "signature_delta", signature: "EqQBCgIYAhIM" },
    },
  },
  { event: "content_block_stop", data: { type: "content_block_stop", index: 0 } },
  {
    event: "content_block_start",
    data: { type: "content_block_start", index: 1, content_block: { type: "text", text: "" } },
  },
  {
    event: "content_block_delta",
    data: { type: "content_block_delta", index: 1, delta: { type: "text_delta", text: "Let me check" } },
  },
  {
    event: "content_block_delta",
    data: { type: "content_block_delta", index: 1, delta: { type: "text_delta", text: " the weather." } },
  },
  { event: "content_block_stop", data: { type: "content_block_stop", index: 1 } },
  {
    event: "content_block_start",
    data: {
      type: "content_block_start",
      index: 2,
      content_block: {
        type: "tool_use",
        id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
        name: "get_weather",
        input: {},
      },
    },
  },
  {
    event: "content_block_delta",
    data: { type: "content_block_delta", index: 2, delta: { type: "input_json_delta", partial_json: "" } },
  },
  {
    event: "content_block_delta",
    data: {
      type: "content_block_delta",
      index: 2,
      delta: { type: "input_json_delta", partial_json: '{"location": "San Fra' },
    },
  },
  {
    event: "content_block_delta",
    data: {
      type: "content_block_delta",
      index: 2,
      delta: { type: "input_json_delta", partial_json: 'ncisco, CA"}' },
    },
  },
  { event: "content_block_stop", data: { type: "content_block_stop", index: 2 } },
  {
    event: "message_delta",
    data: {
      type: "message_delta",
      delta: { stop_reason: "tool_use", stop_sequence: null },
      usage: {
        input_tokens: 472,
        cache_creation_input_tokens: 1500,
        cache_read_input_tokens: 8192,
        output_tokens: 89,
      },
    },
  },
  { event: "message_stop", data: { type: "message_stop" } },
];

const HELLO = { role: "user" as const, content: "Hello there, gateway" };

describe("the official Anthropic SDK through the gateway", () => {
  let t: TextGateway;
  let client: Anthropic;

  beforeAll(async () => {
    t = await startTextGateway({ TOLLGATE_RATE_LIMIT_RPM: "1000" });
    await t.credit(50_000_000n); // $50
    client = new Anthropic({ baseURL: t.baseUrl, apiKey: t.secret, maxRetries: 0 });
  });
  afterAll(async () => {
    t.expectSoundLedger();
    await t.close();
  });

  it("creates a message and bills exactly the usage the upstream reported", async () => {
    const before = await t.available();
    const { data: message, response } = await client.messages
      .create({ model: "model-haiku-4-5", max_tokens: 200, messages: [HELLO] })
      .withResponse();
    expect(message.content[0]).toMatchObject({ type: "text", text: expect.stringContaining("dev-upstream") });
    expect(response.headers.get("x-gateway-billing-chain")).toBe("base");
    expect(response.headers.get("x-request-id")).toMatch(/^req_/);
    expect(response.headers.get("x-gateway-repaired-params")).toBeNull();
    // The upstream saw its own model id, and exactly the input the dev tokenizer counts.
    const sent = t.upstream.messageRequests().at(-1)!;
    expect((sent.body as { model: string }).model).toBe("claude-haiku-4-5-20251001");
    expect(message.usage.input_tokens).toBe(countRequestTokens(sent.body));
    const charge = expectedCharge("model-haiku-4-5", {
      input: message.usage.input_tokens,
      output: message.usage.output_tokens,
    });
    const [row] = await t.usage();
    expect(row).toMatchObject({
      status: HoldStatus.SETTLED,
      model: "model-haiku-4-5",
      chain: "base",
      amount: charge,
    });
    expect(row!.requestId).toBe(response.headers.get("x-request-id"));
    expect(await t.available()).toBe(before - charge);
  });

  it("accepts the vendor's model names as aliases", async () => {
    const message = await client.messages.create({
      model: "claude-opus-4-8",
      max_tokens: 50,
      messages: [HELLO],
    });
    expect(message.content[0]?.type).toBe("text");
    expect((await t.usage())[0]?.model).toBe("model-opus-4-8");
  });

  it("bills each cache kind at its own rate", async () => {
    t.script(() => ({
      kind: "json",
      status: 200,
      body: {
        id: "msg_cache",
        type: "message",
        role: "assistant",
        model: "claude-opus-4-8",
        content: [{ type: "text", text: "cached" }],
        stop_reason: "end_turn",
        stop_sequence: null,
        usage: {
          input_tokens: 100,
          output_tokens: 50,
          cache_creation_input_tokens: 5000,
          cache_read_input_tokens: 4000,
          cache_creation: { ephemeral_5m_input_tokens: 2000, ephemeral_1h_input_tokens: 3000 },
        },
      },
    }));
    try {
      // A prompt long enough that its input bound covers the 9,100 input-side tokens reported.
      const system = "cached context ".repeat(700);
      await client.messages.create({ model: "model-opus-4-8", max_tokens: 100, system, messages: [HELLO] });
    } finally {
      t.script(undefined);
    }
    const [row] = await t.usage();
    // 100×$5 + 50×$25 + 2,000×$6.25 + 3,000×$10 + 4,000×$0.50 per million tokens = 46,250 µ$.
    expect(row!.amount).toBe(46_250n);
    expect(
      expectedCharge("model-opus-4-8", { input: 100, output: 50, w5m: 2000, w1h: 3000, read: 4000 }),
    ).toBe(46_250n);
    expect(row!.usage).toMatchObject({
      inputTokens: 100n,
      outputTokens: 50n,
      cacheWrite5mTokens: 2000n,
      cacheWrite1hTokens: 3000n,
      cacheReadTokens: 4000n,
    });
  });

  it("never charges more than the hold, even when the upstream reports more than the bound", async () => {
    t.script(() => ({
      kind: "json",
      status: 200,
      body: {
        id: "msg_huge",
        type: "message",
        role: "assistant",
        model: "claude-haiku-4-5-20251001",
        content: [{ type: "text", text: "server tools ran long" }],
        stop_reason: "end_turn",
        stop_sequence: null,
        usage: { input_tokens: 900_000, output_tokens: 10 },
      },
    }));
    try {
      await client.messages.create({ model: "model-haiku-4-5", max_tokens: 10, messages: [HELLO] });
    } finally {
      t.script(undefined);
    }
    const [row] = await t.usage();
    expect(row!.status).toBe(HoldStatus.SETTLED);
    expect(row!.amount).toBe(row!.heldAmount);
    expect(row!.amount).toBeLessThan(expectedCharge("model-haiku-4-5", { input: 900_000, output: 10 }));
  });

  it("streams thinking, text and a tool call; finalMessage() assembles them; the final usage is billed", async () => {
    t.script(() => ({ kind: "stream", events: TRANSCRIPT }));
    let final: Anthropic.Message;
    try {
      const stream = client.messages.stream({
        model: "model-opus-4-8",
        max_tokens: 1000,
        messages: [{ role: "user", content: "Weather in SF?" }],
        thinking: { type: "adaptive" },
        tools: [
          {
            name: "get_weather",
            input_schema: { type: "object", properties: { location: { type: "string" } } },
          },
        ],
      });
      final = await stream.finalMessage();
    } finally {
      t.script(undefined);
    }
    expect(final.content).toEqual([
      { type: "thinking", thinking: "User wants SF weather; call the tool.", signature: "EqQBCgIYAhIM" },
      { type: "text", text: "Let me check the weather." },
      {
        type: "tool_use",
        id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
        name: "get_weather",
        input: { location: "San Francisco, CA" },
      },
    ]);
    expect(final.stop_reason).toBe("tool_use");
    const [row] = await t.usage();
    expect(row!.amount).toBe(
      expectedCharge("model-opus-4-8", { input: 472, output: 89, w5m: 1000, w1h: 500, read: 8192 }),
    );
  });

  it("counts tokens with the upstream's counter, unbilled", async () => {
    const rows = (await t.usage()).length;
    const params = { model: "model-sonnet-4-6", messages: [HELLO], system: "Be brief." };
    const count = await client.messages.countTokens(params);
    const sent = t.upstream.requests.at(-1)!;
    expect(sent.path).toBe("/v1/messages/count_tokens");
    expect(count.input_tokens).toBe(countRequestTokens(sent.body));
    expect(count.input_tokens).toBeGreaterThan(0);
    expect((await t.usage()).length).toBe(rows);
  });

  it("lists the catalog's models in the format's list shape", async () => {
    const page = await client.models.list();
    const ids = page.data.map((m) => m.id);
    expect(ids).toContain("model-opus-4-8");
    expect(ids).toHaveLength(8);
    expect(page.data.find((m) => m.id === "model-haiku-4-5")).toMatchObject({
      type: "model",
      display_name: "Haiku 4.5",
    });
  });

  describe("each error class the SDK raises", () => {
    it("401 for an unknown key", async () => {
      const stranger = new Anthropic({ baseURL: t.baseUrl, apiKey: "sk-not-a-gateway-key", maxRetries: 0 });
      await expect(
        stranger.messages.create({ model: "model-haiku-4-5", max_tokens: 5, messages: [HELLO] }),
      ).rejects.toBeInstanceOf(Anthropic.AuthenticationError);
    });

    it("402 with the chain named, and the upstream never called", async () => {
      const calls = t.upstream.requests.length;
      const error = await client.messages
        .create(
          { model: "model-haiku-4-5", max_tokens: 5, messages: [HELLO] },
          { headers: { "x-gateway-billing-chain": "solana" } },
        )
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(Anthropic.PaymentRequiredError);
      const apiError = error as InstanceType<typeof Anthropic.APIError>;
      expect(apiError.headers?.get("x-gateway-billing-chain")).toBe("solana");
      expect(apiError.error).toMatchObject({ type: "error", error: { type: "billing_error" } });
      expect(t.upstream.requests.length).toBe(calls);
    });

    it("403 for a revoked key", async () => {
      const { key, secret } = await t.gateway.operator.createKey({ accountId: t.accountId, name: "doomed" });
      await t.gateway.operator.revokeKey({ keyId: key!.id });
      const revoked = new Anthropic({ baseURL: t.baseUrl, apiKey: secret, maxRetries: 0 });
      await expect(
        revoked.messages.create({ model: "model-haiku-4-5", max_tokens: 5, messages: [HELLO] }),
      ).rejects.toBeInstanceOf(Anthropic.PermissionDeniedError);
    });

    it("404 not_found_error for an unknown model", async () => {
      const error = await client.messages
        .create({ model: "claude-nonexistent-9", max_tokens: 5, messages: [HELLO] })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(Anthropic.NotFoundError);
      expect((error as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({
        error: { type: "not_found_error", message: expect.stringContaining("claude-nonexistent-9") },
      });
    });

    it("400 naming the field for a bad request, before any upstream call", async () => {
      const calls = t.upstream.requests.length;
      const error = await client.messages
        .create({ model: "model-haiku-4-5", max_tokens: -1, messages: [HELLO] })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(Anthropic.BadRequestError);
      expect((error as Error).message).toContain("max_tokens");
      expect(t.upstream.requests.length).toBe(calls);
    });

    it("the upstream's own 4xx goes back verbatim", async () => {
      const body = {
        type: "error",
        error: {
          type: "invalid_request_error",
          message: "messages.0: prefill is not supported on this model",
        },
        request_id: "req_upstream_1",
      };
      t.script(() => ({ kind: "json", status: 400, body }));
      try {
        const error = await client.messages
          .create({ model: "model-haiku-4-5", max_tokens: 5, messages: [HELLO] })
          .catch((e: unknown) => e);
        expect(error).toBeInstanceOf(Anthropic.BadRequestError);
        expect((error as InstanceType<typeof Anthropic.APIError>).error).toEqual(body);
      } finally {
        t.script(undefined);
      }
      expect((await t.usage())[0]?.status).toBe(HoldStatus.RELEASED);
    });

    it("5xx from the upstream → api_error, 529 → overloaded_error; neither is charged", async () => {
      const spent = await t.available();
      t.script(() => ({
        kind: "json",
        status: 500,
        body: { type: "error", error: { type: "api_error", message: "boom" } },
      }));
      const e500 = await client.messages
        .create({ model: "model-haiku-4-5", max_tokens: 5, messages: [HELLO] })
        .catch((e: unknown) => e);
      t.script(() => ({
        kind: "json",
        status: 529,
        body: { type: "error", error: { type: "overloaded_error", message: "Overloaded" } },
      }));
      const e529 = await client.messages
        .create({ model: "model-haiku-4-5", max_tokens: 5, messages: [HELLO] })
        .catch((e: unknown) => e);
      t.script(undefined);
      expect(e500).toBeInstanceOf(Anthropic.InternalServerError);
      expect((e500 as InstanceType<typeof Anthropic.APIError>).status).toBe(502);
      expect((e500 as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({
        error: { type: "api_error" },
      });
      expect(e529).toBeInstanceOf(Anthropic.OverloadedError);
      expect((e529 as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({
        error: { type: "overloaded_error" },
      });
      expect(await t.available()).toBe(spent);
      const [last, previous] = await t.usage();
      expect([last?.status, previous?.status]).toEqual([HoldStatus.RELEASED, HoldStatus.RELEASED]);
    });
  });
});

describe("rate limits through the SDK", () => {
  it("429 rate_limit_error with retry-after and the request-limit headers", async () => {
    const t = await startTextGateway({ TOLLGATE_RATE_LIMIT_RPM: "2", TOLLGATE_COUNT_TOKENS_RPM: "3" });
    try {
      await t.credit(1_000_000n);
      const client = new Anthropic({ baseURL: t.baseUrl, apiKey: t.secret, maxRetries: 0 });
      const call = () =>
        client.messages.create({ model: "model-haiku-4-5", max_tokens: 5, messages: [HELLO] }).withResponse();
      const first = await call();
      expect(first.response.headers.get("anthropic-ratelimit-requests-limit")).toBe("2");
      expect(first.response.headers.get("anthropic-ratelimit-requests-remaining")).toBe("1");
      await call();
      const calls = t.upstream.requests.length;
      const error = await call().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(Anthropic.RateLimitError);
      const headers = (error as InstanceType<typeof Anthropic.APIError>).headers!;
      expect(Number(headers.get("retry-after"))).toBeGreaterThan(0);
      expect(headers.get("anthropic-ratelimit-requests-remaining")).toBe("0");
      expect(Date.parse(headers.get("anthropic-ratelimit-requests-reset")!)).toBeGreaterThan(Date.now());
      expect(t.upstream.requests.length).toBe(calls);
      // count_tokens has its own, higher limit: still open after the billed limit is spent.
      for (let i = 0; i < 3; i++)
        await client.messages.countTokens({ model: "model-haiku-4-5", messages: [HELLO] });
      await expect(
        client.messages.countTokens({ model: "model-haiku-4-5", messages: [HELLO] }),
      ).rejects.toBeInstanceOf(Anthropic.RateLimitError);
      expect((await t.usage()).length).toBe(2);
      t.expectSoundLedger();
    } finally {
      await t.close();
    }
  });
});

describe("client policy", () => {
  it("coding-agent-only refuses other clients with 403 permission_error and admits claude-cli", async () => {
    const t = await startTextGateway({ TOLLGATE_CLIENT_POLICY: "coding-agent-only" });
    try {
      await t.credit(1_000_000n);
      const sdk = new Anthropic({ baseURL: t.baseUrl, apiKey: t.secret, maxRetries: 0 });
      const error = await sdk.messages
        .create({ model: "model-haiku-4-5", max_tokens: 5, messages: [HELLO] })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(Anthropic.PermissionDeniedError);
      expect((error as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({
        error: { type: "permission_error" },
      });
      const asCli = new Anthropic({
        baseURL: t.baseUrl,
        apiKey: t.secret,
        maxRetries: 0,
        defaultHeaders: { "user-agent": "claude-cli/2.1.197 (external, sdk-cli)" },
      });
      const message = await asCli.messages.create({
        model: "model-haiku-4-5",
        max_tokens: 5,
        messages: [HELLO],
      });
      expect(message.type).toBe("message");
      expect((await t.usage()).length).toBe(1);
    } finally {
      await t.close();
    }
  });
});

describe("an upstream that cannot answer", () => {
  it("504 timeout_error when it never answers, 502 api_error when it is unreachable; neither is charged", async () => {
    const t = await startTextGateway({ TOLLGATE_UPSTREAM_HEADERS_TIMEOUT_MS: "300" });
    const closed = await startTextGateway({ TOLLGATE_ANTHROPIC_URL: "http://127.0.0.1:1" });
    try {
      await t.credit(1_000_000n);
      await closed.credit(1_000_000n);
      t.script(() => ({ kind: "hang" }));
      const client = new Anthropic({ baseURL: t.baseUrl, apiKey: t.secret, maxRetries: 0 });
      const timeout = await client.messages
        .create({ model: "model-haiku-4-5", max_tokens: 5, messages: [HELLO] })
        .catch((e: unknown) => e);
      expect(timeout).toBeInstanceOf(Anthropic.GatewayTimeoutError);
      expect((timeout as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({
        error: { type: "timeout_error" },
      });
      expect((await t.usage())[0]?.status).toBe(HoldStatus.RELEASED);
      expect(await t.available()).toBe(1_000_000n);

      const unreachable = new Anthropic({ baseURL: closed.baseUrl, apiKey: closed.secret, maxRetries: 0 });
      const refused = await unreachable.messages
        .create({ model: "model-haiku-4-5", max_tokens: 5, messages: [HELLO], stream: true })
        .catch((e: unknown) => e);
      expect((refused as InstanceType<typeof Anthropic.APIError>).status).toBe(502);
      expect((refused as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({
        error: { type: "api_error" },
      });
      expect((await closed.usage())[0]?.status).toBe(HoldStatus.RELEASED);
      expect(await closed.available()).toBe(1_000_000n);
      t.expectSoundLedger();
      closed.expectSoundLedger();
    } finally {
      t.script(undefined);
      await t.close();
      await closed.close();
    }
  });
});
