import OpenAI from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { ASPECT_RATIOS, pixelSize } from "../../src/core/images/image-models.js";
import type { ScriptedReply } from "../../src/dev/provider/dev-upstream.js";
import { HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { accountWithKey } from "../helpers/app.js";
import { smallPng } from "../helpers/image-fixtures.js";
import { startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

// Billing of image calls through the official SDK, with the dev upstream (Gemini format) on a
// real socket: exactly the listed price per delivered image, on the chosen chain; nothing for
// what was not delivered; and a call the wallet cannot cover never reaches the provider.

let t: TextGateway;
let client: OpenAI;
type Extra = { aspect_ratio?: string; size?: string };

beforeAll(async () => {
  t = await startTextGateway((upstream) => ({ TOLLGATE_GEMINI_URL: upstream }));
  await t.credit(20_000_000n, "base");
  await t.credit(1_000_000n, "arbitrum");
  client = new OpenAI({ apiKey: t.secret, baseURL: `${t.baseUrl}/v1`, maxRetries: 0 });
});
afterAll(async () => {
  await t?.close();
});
beforeEach(() => {
  t.script(undefined);
});

function geminiCalls(): number {
  return t.upstream.requests.filter((r) => r.path.includes(":generateContent")).length;
}

/** A fast scripted Gemini answer carrying a small real PNG. */
const TINY_IMAGE: ScriptedReply = {
  kind: "json",
  status: 200,
  body: {
    candidates: [
      {
        content: {
          role: "model",
          parts: [{ inlineData: { mimeType: "image/png", data: smallPng().toString("base64") } }],
        },
        finishReason: "STOP",
      },
    ],
  },
};

describe("the upstream request", () => {
  it("carries the imageConfig of every size and ratio of image-pro", async () => {
    t.script((request) => (request.path.includes(":generateContent") ? TINY_IMAGE : undefined));
    for (const size of ["1K", "2K", "4K"] as const) {
      for (const ratio of ASPECT_RATIOS) {
        await client.images.generate({
          model: "image-pro",
          prompt: "grid",
          ...({ size, aspect_ratio: ratio } as Extra),
        });
        const body = t.upstream.requests.at(-1)!.body as { generationConfig: unknown };
        expect(body.generationConfig, `${size} ${ratio}`).toEqual({
          responseModalities: ["TEXT", "IMAGE"],
          imageConfig: { aspectRatio: ratio, imageSize: size },
        });
      }
    }
    // Defaults: 1K and 1:1.
    await client.images.generate({ model: "image-pro", prompt: "defaults" });
    expect((t.upstream.requests.at(-1)!.body as { generationConfig: unknown }).generationConfig).toEqual({
      responseModalities: ["TEXT", "IMAGE"],
      imageConfig: { aspectRatio: "1:1", imageSize: "1K" },
    });
    t.expectSoundLedger();
  });

  it("gets a real image at the implied pixel size from the dev upstream for 4K 21:9", async () => {
    const response = await client.images.generate({
      model: "image-pro",
      prompt: "wide",
      ...({ size: "4K", aspect_ratio: "21:9" } as Extra),
    });
    const png = Buffer.from(response.data?.[0]?.b64_json ?? "", "base64");
    expect([png.readUInt32BE(16), png.readUInt32BE(20)]).toEqual([
      pixelSize("4K", "21:9").width,
      pixelSize("4K", "21:9").height,
    ]);
    expect(pixelSize("4K", "21:9")).toEqual({ width: 6336, height: 2688 });
  });
});

describe("charges", () => {
  it("bills exactly the listed price per size, on the chosen chain", async () => {
    const cases = [
      { model: "image-pro", size: "1K", chain: "base", price: 134_000n },
      { model: "image-pro", size: "2K", chain: "base", price: 134_000n },
      { model: "image-pro", size: "4K", chain: "arbitrum", price: 240_000n },
      { model: "image-2", size: "1K", chain: "arbitrum", price: 39_000n },
    ] as const;
    t.script((request) => (request.path.includes(":generateContent") ? TINY_IMAGE : undefined));
    for (const c of cases) {
      const before = { base: await t.available("base"), arbitrum: await t.available("arbitrum") };
      const { response } = await client.images
        .generate(
          { model: c.model, prompt: "priced", ...({ size: c.size } as Extra) },
          { headers: { "x-gateway-billing-chain": c.chain } },
        )
        .withResponse();
      expect(response.headers.get("x-gateway-billing-chain")).toBe(c.chain);
      const [row] = await t.usage();
      expect(row).toMatchObject({
        requestId: response.headers.get("x-request-id"),
        model: c.model,
        imageSize: c.size,
        chain: c.chain,
        status: HoldStatus.SETTLED,
        heldAmount: c.price,
        amount: c.price,
      });
      const other = c.chain === "base" ? "arbitrum" : "base";
      expect(await t.available(c.chain)).toBe(before[c.chain] - c.price);
      expect(await t.available(other)).toBe(before[other]);
    }
    t.expectSoundLedger();
  });

  const failures: [string, ScriptedReply, number, string][] = [
    [
      "a provider 500",
      { kind: "json", status: 500, body: { error: { code: 500, message: "boom", status: "INTERNAL" } } },
      502,
      "upstream_error",
    ],
    [
      "a provider 503",
      { kind: "json", status: 503, body: { error: { code: 503, message: "busy", status: "UNAVAILABLE" } } },
      502,
      "upstream_error",
    ],
    [
      "a provider 429",
      {
        kind: "json",
        status: 429,
        body: { error: { code: 429, message: "quota", status: "RESOURCE_EXHAUSTED" } },
      },
      429,
      "upstream_rejected",
    ],
    [
      "a provider 400",
      {
        kind: "json",
        status: 400,
        body: { error: { code: 400, message: "bad prompt", status: "INVALID_ARGUMENT" } },
      },
      400,
      "upstream_rejected",
    ],
    [
      "a blocked prompt",
      { kind: "json", status: 200, body: { promptFeedback: { blockReason: "SAFETY" } } },
      400,
      "image_refused",
    ],
    [
      "an image refused for safety",
      {
        kind: "json",
        status: 200,
        body: { candidates: [{ content: { parts: [] }, finishReason: "IMAGE_SAFETY" }] },
      },
      400,
      "image_refused",
    ],
    [
      "an empty result (text only)",
      {
        kind: "json",
        status: 200,
        body: { candidates: [{ content: { parts: [{ text: "I drew nothing." }] }, finishReason: "STOP" }] },
      },
      502,
      "upstream_error",
    ],
    [
      "bytes that are not an image",
      {
        kind: "json",
        status: 200,
        body: {
          candidates: [{ content: { parts: [{ inlineData: { mimeType: "image/png", data: "aGVsbG8=" } }] } }],
        },
      },
      502,
      "upstream_error",
    ],
    ["a connection cut before answering", { kind: "destroy" }, 502, "upstream_error"],
  ];

  it.each(failures)("charges nothing for %s and says so", async (_name, reply, status, code) => {
    t.script((request) => (request.path.includes(":generateContent") ? reply : undefined));
    const before = await t.available();
    const calls = geminiCalls();
    const error = (await client.images
      .generate({ model: "image-pro", prompt: "fails" })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect(error.status).toBe(status);
    expect(error.code).toBe(code);
    expect(error.message).toMatch(/nothing was charged|quota|bad prompt/);
    expect(geminiCalls()).toBe(calls + 1);
    const [row] = await t.usage();
    expect(row).toMatchObject({ model: "image-pro", status: HoldStatus.RELEASED, amount: 0n });
    expect(await t.available()).toBe(before);
    t.expectSoundLedger();
  });

  it("charges nothing and aborts the provider's request when the client goes away", async () => {
    t.script((request) => (request.path.includes(":generateContent") ? { kind: "hang" } : undefined));
    const before = await t.available();
    const calls = geminiCalls();
    const error = await client.images
      .generate({ model: "image-pro", prompt: "never finishes" }, { signal: AbortSignal.timeout(300) })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.APIUserAbortError);
    expect(geminiCalls()).toBe(calls + 1);
    // The core sees the cancellation, aborts the provider's request and releases the hold.
    await expect.poll(async () => (await t.usage())[0]?.status, { timeout: 5_000 }).toBe(HoldStatus.RELEASED);
    expect((await t.usage())[0]?.amount).toBe(0n);
    expect(await t.available()).toBe(before);
    t.expectSoundLedger();
  });

  it("answers 402 without reaching the provider when the wallet cannot cover the image", async () => {
    const poor = await accountWithKey(t.gateway.operator, "poor");
    const poorClient = new OpenAI({ apiKey: poor.secret, baseURL: `${t.baseUrl}/v1`, maxRetries: 0 });
    const calls = geminiCalls();
    const error = (await poorClient.images
      .generate({ model: "image-2", prompt: "free?" })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(error.status).toBe(402);
    expect(error.code).toBe("insufficient_funds");
    expect(error.headers?.get("x-gateway-billing-chain")).toBe("base");
    // Enough on base, none on solana: the named chain is not silently switched.
    await t.credit(1_000_000n, "base", poor.accountId);
    const named = (await poorClient.images
      .edit(
        { model: "image-pro", prompt: "edit", image: new File([smallPng()], "a.png", { type: "image/png" }) },
        { headers: { "x-gateway-billing-chain": "solana" } },
      )
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(named.status).toBe(402);
    expect(named.headers?.get("x-gateway-billing-chain")).toBe("solana");
    expect(geminiCalls()).toBe(calls);
    expect(await t.usage(poor.accountId)).toEqual([]);
    t.expectSoundLedger();
  });
});
