/**
 * Image routes with a providers file (docs/providers.md, "Images"), through the gateway with the
 * official OpenAI SDK: two Gemini-format endpoints (dev providers on real sockets); the first
 * answers 503 → the image comes from the second, charged once, its row naming it; a refusal on
 * the first is the caller's answer, never retried, nothing charged.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type DevUpstream,
  type ScriptedReply,
  startDevUpstream,
} from "../../src/dev/provider/dev-upstream.js";
import { HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { tempDir } from "../helpers/process.js";
import { startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

describe("image routes over a providers file", () => {
  let t: TextGateway;
  let first: DevUpstream;
  let reply: ScriptedReply | undefined;
  let client: OpenAI;
  const dir = tempDir();

  beforeAll(async () => {
    first = await startDevUpstream({
      script: (request) => (request.path.includes(":generateContent") ? reply : undefined),
    });
    const file = join(dir.path, "providers.json");
    t = await startTextGateway((secondUrl) => {
      writeFileSync(
        file,
        JSON.stringify({
          endpoints: [
            { name: "anthropic", kind: "anthropic", baseUrl: secondUrl, apiKey: { env: "TEST_KEY" } },
            {
              name: "gemini-1",
              kind: "gemini",
              baseUrl: first.url,
              apiKey: { env: "TEST_KEY" },
              models: { "image-pro": "gemini-3-pro-image-preview" },
            },
            {
              name: "gemini-2",
              kind: "gemini",
              baseUrl: secondUrl,
              apiKey: { env: "TEST_KEY" },
              models: { "image-pro": "gemini-3-pro-image-preview" },
            },
          ],
          text: { "*": ["anthropic"] },
          images: { "image-pro": ["gemini-1", "gemini-2"] },
        }),
      );
      return { TOLLGATE_PROVIDERS: file, TEST_KEY: "k" };
    });
    await t.credit(10_000_000n);
    client = new OpenAI({ apiKey: t.secret, baseURL: `${t.baseUrl}/v1`, maxRetries: 0 });
  });
  afterAll(async () => {
    t.expectSoundLedger();
    await t.close();
    await first.close();
    dir.cleanup();
  });

  function endpointOf(requestId: string): string | undefined {
    const row = t.gateway.db
      .prepare(
        "SELECT r.endpoint FROM holds h JOIN hold_resolutions r ON r.hold_id = h.id WHERE h.request_id = ?",
      )
      .get(requestId) as { endpoint: string } | undefined;
    return row?.endpoint;
  }

  it("a 503 on the first endpoint: the image comes from the second, charged once, named", async () => {
    reply = {
      kind: "json",
      status: 503,
      body: { error: { code: 503, message: "busy", status: "UNAVAILABLE" } },
    };
    const secondBefore = t.upstream.requests.length;
    const response = await client.images.generate({
      model: "image-pro",
      prompt: "a fox",
      response_format: "b64_json",
    });
    expect(response.data?.[0]?.b64_json).toBeTruthy();
    expect(first.requests).toHaveLength(1);
    expect(t.upstream.requests.length - secondBefore).toBe(1);
    const rows = await t.usage();
    expect(rows).toHaveLength(1);
    expect(rows[0]!.status).toBe(HoldStatus.SETTLED);
    expect(endpointOf(rows[0]!.requestId)).toBe("gemini-2");
  });

  it("a refusal on the first endpoint is not retried and charges nothing", async () => {
    reply = {
      kind: "json",
      status: 200,
      body: { candidates: [{ content: { parts: [{ text: "No." }] }, finishReason: "IMAGE_SAFETY" }] },
    };
    const secondBefore = t.upstream.requests.length;
    await expect(
      client.images.generate({ model: "image-pro", prompt: "something refused" }),
    ).rejects.toBeInstanceOf(OpenAI.APIError);
    expect(t.upstream.requests.length).toBe(secondBefore);
    const [row] = await t.usage();
    expect(row!.status).toBe(HoldStatus.RELEASED);
  });
});
