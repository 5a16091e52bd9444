import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { jpegLike, pngSize, smallPng } from "../helpers/image-fixtures.js";
import { startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

// image-2 routed by config to an OpenAI-images-compatible provider (the dev upstream on a real
// socket), image-pro left on the Gemini format: the adapter is chosen per model.

let t: TextGateway;
let client: OpenAI;
const PROVIDER_KEY = "sk-provider-test";

beforeAll(async () => {
  t = await startTextGateway((upstream) => ({
    TOLLGATE_GEMINI_URL: upstream,
    TOLLGATE_OPENAI_IMAGES_URL: `${upstream}/v1`,
    TOLLGATE_OPENAI_IMAGES_API_KEY: PROVIDER_KEY,
    TOLLGATE_IMAGE_MODELS: "image-2=openai:gpt-image-1",
  }));
  await t.credit(1_000_000n);
  client = new OpenAI({ apiKey: t.secret, baseURL: `${t.baseUrl}/v1`, maxRetries: 0 });
});
afterAll(async () => {
  await t?.close();
});

describe("an OpenAI-images-compatible provider", () => {
  it("generates through /v1/images/generations with the pixel size, the gateway's own key", async () => {
    const response = await client.images.generate({
      model: "image-2",
      prompt: "a kite",
      ...({ aspect_ratio: "3:4" } as object),
    });
    expect(pngSize(Buffer.from(response.data?.[0]?.b64_json ?? "", "base64"))).toEqual({
      width: 896,
      height: 1200,
    });
    const sent = t.upstream.requests.at(-1);
    expect(sent?.path).toBe("/v1/images/generations");
    expect(sent?.headers.authorization).toBe(`Bearer ${PROVIDER_KEY}`);
    expect(sent?.rawBody).not.toContain(t.secret);
    expect(sent?.body).toEqual({ model: "gpt-image-1", prompt: "a kite", n: 1, size: "896x1200" });
    expect((await t.usage())[0]).toMatchObject({
      model: "image-2",
      status: HoldStatus.SETTLED,
      amount: 39_000n,
    });
    t.expectSoundLedger();
  });

  it("edits through /v1/images/edits with every reference as image[]", async () => {
    const response = await client.images.edit({
      model: "image-2",
      prompt: "merge",
      image: [await toFile(smallPng(), "a.png"), await toFile(jpegLike(), "b.jpg")],
    });
    expect(pngSize(Buffer.from(response.data?.[0]?.b64_json ?? "", "base64"))).toEqual({
      width: 1024,
      height: 1024,
    });
    const sent = t.upstream.requests.at(-1);
    expect(sent?.path).toBe("/v1/images/edits");
    expect(String(sent?.headers["content-type"])).toMatch(/^multipart\/form-data; boundary=/);
    expect(sent?.rawBody).toContain('name="model"\r\n\r\ngpt-image-1\r\n');
    expect(sent?.rawBody).toContain('name="size"\r\n\r\n1024x1024\r\n');
    expect(sent?.rawBody.match(/name="image\[\]"; filename="image-\d\.(png|jpg)"/g)).toEqual([
      'name="image[]"; filename="image-1.png"',
      'name="image[]"; filename="image-2.jpg"',
    ]);
    t.expectSoundLedger();
  });

  it("keeps image-pro on the Gemini format", async () => {
    await client.images.generate({ model: "image-pro", prompt: "still gemini" });
    expect(t.upstream.requests.at(-1)?.path).toBe(
      "/v1beta/models/gemini-3-pro-image-preview:generateContent",
    );
  });
});
