import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

// Each rule of the repair table, end to end: the headers the client gets and the body the
// upstream receives.

const USER = [{ role: "user", content: "Repair me" }];

interface Case {
  readonly name: string;
  readonly request: Record<string, unknown>;
  readonly repaired: string | null;
  readonly clamped?: string;
  /** Fields of the body the upstream must have received (undefined = absent). */
  readonly upstream: Record<string, unknown>;
}

const CASES: Case[] = [
  {
    name: "strict sampling: temperature and top_k are dropped on Opus 4.8",
    request: { model: "model-opus-4-8", max_tokens: 100, temperature: 0.5, top_k: 5, messages: USER },
    repaired: "temperature,top_k",
    upstream: { model: "claude-opus-4-8", temperature: undefined, top_k: undefined },
  },
  {
    name: "strict sampling keeps the defaults (temperature 1, top_p 0.99)",
    request: { model: "model-sonnet-5", max_tokens: 100, temperature: 1, top_p: 0.99, messages: USER },
    repaired: null,
    upstream: { temperature: 1, top_p: 0.99 },
  },
  {
    name: "a legacy budget becomes adaptive thinking with an effort on Opus 4.8",
    request: {
      model: "model-opus-4-8",
      max_tokens: 20_000,
      thinking: { type: "enabled", budget_tokens: 8000 },
      messages: USER,
    },
    repaired: "thinking.budget_tokens->output_config.effort",
    upstream: { thinking: { type: "adaptive" }, output_config: { effort: "medium" } },
  },
  {
    name: "adaptive thinking becomes a budget on Haiku 4.5, which takes no effort",
    request: {
      model: "claude-haiku-4-5",
      max_tokens: 32_000,
      thinking: { type: "adaptive" },
      output_config: { effort: "high" },
      messages: USER,
    },
    repaired: "thinking.adaptive->thinking.budget_tokens,output_config.effort",
    upstream: {
      model: "claude-haiku-4-5-20251001",
      thinking: { type: "enabled", budget_tokens: 16_384 },
      output_config: undefined,
    },
  },
  {
    name: "thinking cannot be disabled on Fable 5",
    request: { model: "model-fable-5", max_tokens: 100, thinking: { type: "disabled" }, messages: USER },
    repaired: "thinking",
    upstream: { thinking: undefined },
  },
  {
    name: "temperature and top_p together: top_p goes on Sonnet 4.6",
    request: { model: "model-sonnet-4-6", max_tokens: 100, temperature: 0.3, top_p: 0.8, messages: USER },
    repaired: "top_p",
    upstream: { temperature: 0.3, top_p: undefined },
  },
  {
    name: "with thinking on, Sonnet 4.6 drops temperature and top_k",
    request: {
      model: "model-sonnet-4-6",
      max_tokens: 4000,
      temperature: 0.2,
      top_k: 10,
      thinking: { type: "enabled", budget_tokens: 2000 },
      messages: USER,
    },
    repaired: "temperature,top_k",
    upstream: {
      temperature: undefined,
      top_k: undefined,
      thinking: { type: "enabled", budget_tokens: 2000 },
    },
  },
  {
    name: "max_tokens above the ceiling is clamped, with the original in its own header",
    request: { model: "model-haiku-4-5", max_tokens: 100_000, messages: USER },
    repaired: null,
    clamped: "100000",
    upstream: { max_tokens: 64_000 },
  },
  {
    name: "a request that needs nothing passes untouched, unknown fields included",
    request: {
      model: "model-opus-4-8",
      max_tokens: 64_000,
      thinking: { type: "adaptive" },
      output_config: { effort: "high" },
      context_management: { edits: [] },
      some_future_field: { keep: ["me", 1] },
      messages: USER,
    },
    repaired: null,
    upstream: {
      thinking: { type: "adaptive" },
      output_config: { effort: "high" },
      context_management: { edits: [] },
      some_future_field: { keep: ["me", 1] },
      max_tokens: 64_000,
    },
  },
];

describe("parameter repair and clamping", () => {
  let t: TextGateway;
  beforeAll(async () => {
    t = await startTextGateway({ TOLLGATE_RATE_LIMIT_RPM: "1000" });
    await t.credit(100_000_000n);
  });
  afterAll(async () => {
    t.expectSoundLedger();
    await t.close();
  });

  it.each(CASES)("$name", async ({ request, repaired, clamped, upstream }) => {
    const response = await fetch(`${t.baseUrl}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${t.secret}` },
      body: JSON.stringify(request),
    });
    expect(response.status).toBe(200);
    expect(response.headers.get("x-gateway-repaired-params")).toBe(repaired);
    expect(response.headers.get("x-gateway-clamped-max-tokens")).toBe(clamped ?? null);
    const sent = t.upstream.messageRequests().at(-1)!.body as Record<string, unknown>;
    for (const [field, value] of Object.entries(upstream)) expect(sent[field], field).toEqual(value);
  });

  it("repairs count_tokens bodies by the same table", async () => {
    const response = await fetch(`${t.baseUrl}/v1/messages/count_tokens`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": t.secret },
      body: JSON.stringify({
        model: "model-opus-4-8",
        thinking: { type: "enabled", budget_tokens: 20_000 },
        messages: USER,
      }),
    });
    expect(response.status).toBe(200);
    expect(response.headers.get("x-gateway-repaired-params")).toBe(
      "thinking.budget_tokens->output_config.effort",
    );
    const sent = t.upstream.requests.at(-1)!;
    expect(sent.path).toBe("/v1/messages/count_tokens");
    expect(sent.body).toMatchObject({ thinking: { type: "adaptive" }, output_config: { effort: "high" } });
  });

  it("anthropic-version and anthropic-beta reach the upstream verbatim, with no allow-list", async () => {
    const beta = "claude-code-20250219,some-future-beta-2027-01-01";
    await fetch(`${t.baseUrl}/v1/messages?beta=true`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-api-key": t.secret,
        "anthropic-version": "2023-06-01",
        "anthropic-beta": beta,
      },
      body: JSON.stringify({ model: "model-opus-4-8", max_tokens: 10, messages: USER }),
    });
    const sent = t.upstream.messageRequests().at(-1)!;
    expect(sent.headers["anthropic-beta"]).toBe(beta);
    expect(sent.headers["anthropic-version"]).toBe("2023-06-01");
    // The caller's own key never reaches the provider.
    expect(JSON.stringify(sent.headers)).not.toContain(t.secret);
  });

  it.each([
    [{ max_tokens: 10, messages: USER }, "model"],
    [{ model: "model-opus-4-8", messages: USER }, "max_tokens"],
    [{ model: "model-opus-4-8", max_tokens: 10, messages: "hi" }, "messages"],
    [{ model: "model-opus-4-8", max_tokens: 10, messages: USER, temperature: 3 }, "temperature"],
    [
      { model: "model-opus-4-8", max_tokens: 10, messages: USER, thinking: { type: "sometimes" } },
      "thinking.type",
    ],
  ])("400 invalid_request_error naming the field: %j", async (request, field) => {
    const calls = t.upstream.requests.length;
    const rows = (await t.usage()).length;
    const response = await fetch(`${t.baseUrl}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": t.secret },
      body: JSON.stringify(request),
    });
    expect(response.status).toBe(400);
    const body = (await response.json()) as { type: string; error: { type: string; message: string } };
    expect(body.type).toBe("error");
    expect(body.error.type).toBe("invalid_request_error");
    expect(body.error.message.startsWith(field)).toBe(true);
    expect(t.upstream.requests.length).toBe(calls);
    expect((await t.usage()).length).toBe(rows);
  });

  it("a body with nothing to repair reaches the provider byte for byte; one with a repair is re-encoded", async () => {
    const send = (body: string) =>
      fetch(`${t.baseUrl}/v1/messages`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": t.secret },
        body,
      });
    // The vendor's own model name, odd spacing and key order, an unknown field: nothing to change.
    const untouched = `{ "messages" : [ {"role":"user","content":"Byte for byte"} ],\n  "max_tokens":16,"model":"claude-opus-4-8", "x_future_field": {"a": 1} }`;
    expect((await send(untouched)).status).toBe(200);
    expect(t.upstream.messageRequests().at(-1)!.rawBody).toBe(untouched);
    // The gateway's id must become the provider's: re-encoded, the rest kept.
    const renamed = untouched.replace('"claude-opus-4-8"', '"model-opus-4-8"');
    expect((await send(renamed)).status).toBe(200);
    const sent = t.upstream.messageRequests().at(-1)!;
    expect(sent.rawBody).not.toBe(renamed);
    expect(sent.body).toEqual({ ...(JSON.parse(renamed) as object), model: "claude-opus-4-8" });
    // A repair (a sampling knob the model refuses) re-encodes too.
    const repaired = untouched.replace('"max_tokens":16', '"max_tokens":16,"top_k":5');
    expect((await send(repaired)).status).toBe(200);
    expect(t.upstream.messageRequests().at(-1)!.rawBody).not.toBe(repaired);
    expect(t.upstream.messageRequests().at(-1)!.body).not.toHaveProperty("top_k");
  });

  it("a malformed JSON body is a 400, not a 500", async () => {
    const response = await fetch(`${t.baseUrl}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": t.secret },
      body: "{not json",
    });
    expect(response.status).toBe(400);
    expect(((await response.json()) as { error: { type: string } }).error.type).toBe("invalid_request_error");
  });

  it.each(["/v1/messages", "/v1/messages/count_tokens"])(
    "a body nested 10,000 levels deep is a 400 naming the limit on %s, never a 500, and nothing is forwarded or held",
    async (path) => {
      const calls = t.upstream.requests.length;
      const rows = (await t.usage()).length;
      const deep = `${'{"a":'.repeat(10_000)}1${"}".repeat(10_000)}`;
      const tool = `{"name":"deep","input_schema":${deep}}`;
      const response = await fetch(`${t.baseUrl}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": t.secret },
        body: `{"model":"model-opus-4-8","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"tools":[${tool}]}`,
      });
      expect(response.status).toBe(400);
      const body = (await response.json()) as { error: { type: string; message: string } };
      expect(body.error.type).toBe("invalid_request_error");
      expect(body.error.message).toBe("body: nested deeper than 256 levels of objects and arrays");
      expect(t.upstream.requests.length).toBe(calls);
      expect((await t.usage()).length).toBe(rows);
      // 256 levels are still a request like any other.
      const ok = `${"[".repeat(250)}1${"]".repeat(250)}`;
      const allowed = await fetch(`${t.baseUrl}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": t.secret },
        body: `{"model":"model-opus-4-8","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"metadata":{"x":${ok}}}`,
      });
      expect(allowed.status).not.toBe(500);
      expect((await allowed.text()).includes("nested deeper")).toBe(false);
    },
  );

  it("answers Claude Code's warm-up HEAD / at once", async () => {
    const response = await fetch(`${t.baseUrl}/`, { method: "HEAD" });
    expect(response.status).toBe(200);
  });
});
