/**
 * Hostile input the fuzzer (fuzz.test.ts) found, each kept fixed by a test of its own: a path
 * Fastify cannot decode, a content type the dashboard's Connect handlers do not take, and
 * requests the provider would refuse that the gateway must refuse itself, before any hold.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

let t: TextGateway;
beforeAll(async () => {
  t = await startTextGateway((upstream) => ({ TOLLGATE_GEMINI_URL: upstream }));
  await t.credit(10_000_000n);
});
afterAll(async () => {
  await t?.close();
});

describe("hostile input", () => {
  it("answers a path that cannot be decoded with a 400 in the scope's envelope and a request id", async () => {
    const anthropic = await fetch(`${t.baseUrl}/v1/models%`, { headers: { "x-api-key": t.secret } });
    expect(anthropic.status).toBe(400);
    expect(anthropic.headers.get("x-request-id")).toMatch(/^req_/);
    const body = (await anthropic.json()) as { type: string; error: { type: string; message: string } };
    expect(body.type).toBe("error");
    expect(body.error.type).toBe("invalid_request_error");
    expect(body.error.message).toMatch(/^The request path is not valid/);

    const openai = await fetch(`${t.baseUrl}/v1/images/files/%zz`);
    expect(openai.status).toBe(400);
    expect(openai.headers.get("x-request-id")).toMatch(/^req_/);
    expect(((await openai.json()) as { error: { type: string } }).error.type).toBe("invalid_request_error");
  });

  it("refuses a content type the dashboard's Connect handlers do not take, in Connect's error shape", async () => {
    const response = await fetch(`${t.baseUrl}/dashboard/rpc/tollgate.billing.v1.BillingService/GetPricing`, {
      method: "POST",
      headers: { "content-type": "application/json; charset=latin1" },
      body: "{}",
    });
    expect(response.status).toBe(415);
    expect(response.headers.get("x-request-id")).toMatch(/^req_/);
    const body = (await response.json()) as { code: string; message: string };
    expect(body.code).toBe("invalid_argument");
    expect(body.message).toContain("application/json");
    // The right one still works.
    const ok = await fetch(`${t.baseUrl}/dashboard/rpc/tollgate.billing.v1.BillingService/GetPricing`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(ok.status).toBe(200);
  });

  it.each([
    [{ messages: [] }, "messages: at least one message is required"],
    [{ tool_choice: { type: "any" } }, "tool_choice: type any needs tools"],
    [
      { tools: [{ name: "a", input_schema: { type: "object" } }], tool_choice: { type: "tool", name: "b" } },
      'tool_choice.name: no tool named "b" in tools',
    ],
  ])("refuses %j itself: no hold, nothing forwarded", async (fields, message) => {
    const calls = t.upstream.requests.length;
    const rows = (await t.usage()).length;
    const response = await fetch(`${t.baseUrl}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": t.secret },
      body: JSON.stringify({
        model: "model-haiku-4-5",
        max_tokens: 16,
        messages: [{ role: "user", content: "hi" }],
        ...fields,
      }),
    });
    expect(response.status).toBe(400);
    expect(((await response.json()) as { error: { message: string } }).error.message).toBe(message);
    expect(t.upstream.requests.length).toBe(calls);
    expect((await t.usage()).length).toBe(rows);
    t.expectSoundLedger();
  });

  // Issue 29: a fuzzer found calls with these max_tokens forwarded and charged. The body is sent
  // as raw JSON text: JSON.stringify cannot write `-0` or `1e-999`.
  it.each(["0", "-0", "1e-999", "0.5", "-1"])(
    "refuses max_tokens %s with a 400 naming the field, streamed or not: no hold, nothing forwarded",
    async (raw) => {
      for (const stream of [false, true]) {
        const calls = t.upstream.requests.length;
        const before = await t.available();
        const rows = (await t.usage()).length;
        const response = await fetch(`${t.baseUrl}/v1/messages`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-api-key": t.secret },
          body: `{"model":"model-haiku-4-5","max_tokens":${raw},"stream":${stream},"messages":[{"role":"user","content":"hi"}]}`,
        });
        expect(response.status).toBe(400);
        expect(response.headers.get("x-request-id")).toMatch(/^req_/);
        const body = (await response.json()) as { type: string; error: { type: string; message: string } };
        expect(body.error).toEqual({
          type: "invalid_request_error",
          message: "max_tokens: must be an integer >= 1",
        });
        expect(t.upstream.requests.length).toBe(calls);
        expect((await t.usage()).length).toBe(rows);
        expect(await t.available()).toBe(before);
      }
      t.expectSoundLedger();
    },
  );

  it("takes max_tokens written as 1e1 or 16.0 as the integer it denotes, and sends that integer on", async () => {
    for (const [raw, value] of [
      ["1e1", 10],
      ["16.0", 16],
    ] as const) {
      const response = await fetch(`${t.baseUrl}/v1/messages`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": t.secret },
        body: `{"model":"model-haiku-4-5","max_tokens":${raw},"messages":[{"role":"user","content":"hi"}]}`,
      });
      expect(response.status).toBe(200);
      expect(t.upstream.requests.at(-1)!.rawBody).toContain(`"max_tokens":${value},`);
    }
    t.expectSoundLedger();
  });
});
