import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEV_IMAGE_LABEL } from "../../src/dev/provider/dev-images.js";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { pngPixels, pngText } from "../helpers/image-fixtures.js";

// The dev upstream's image formats over a real socket: what `tollgate dev-upstream` serves.

let upstream: DevUpstream;
beforeAll(async () => {
  upstream = await startDevUpstream({ apiKey: "dev-key" });
});
afterAll(async () => {
  await upstream?.close();
});

async function post(
  path: string,
  body: unknown,
  headers: Record<string, string> = { "x-goog-api-key": "dev-key" },
) {
  const response = await fetch(upstream.url + path, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  return { status: response.status, json: (await response.json()) as Record<string, unknown> };
}

const gemini = "/v1beta/models/gemini-3-pro-image-preview:generateContent";
const request = (imageConfig: unknown) => ({
  contents: [{ role: "user", parts: [{ text: "a fox" }] }],
  generationConfig: { responseModalities: ["TEXT", "IMAGE"], imageConfig },
});

function imageOf(json: Record<string, unknown>): Buffer {
  const parts = (json as { candidates: { content: { parts: { inlineData?: { data: string } }[] } }[] })
    .candidates[0]!.content.parts;
  return Buffer.from(parts.find((p) => p.inlineData)!.inlineData!.data, "base64");
}

describe("dev upstream, Gemini image format", () => {
  it("answers a deterministic labelled PNG at the implied pixel size, with a label text part", async () => {
    const first = await post(gemini, request({ aspectRatio: "9:16", imageSize: "1K" }));
    expect(first.status).toBe(200);
    const png = imageOf(first.json);
    const { width, height, rgb } = pngPixels(png);
    expect([width, height]).toEqual([768, 1376]);
    expect(pngText(png)).toMatchObject({ Comment: DEV_IMAGE_LABEL, Software: "tollgate dev-upstream" });
    // The label band is white text on a dark band across the middle.
    const middle = rgb.subarray(Math.floor(height / 2) * width * 3, (Math.floor(height / 2) + 1) * width * 3);
    expect(middle.includes(Buffer.from([20, 20, 20]))).toBe(true);
    const again = await post(gemini, request({ aspectRatio: "9:16", imageSize: "1K" }));
    expect(imageOf(again.json).equals(png)).toBe(true);
    const text = (first.json as { candidates: { content: { parts: { text?: string }[] } }[] }).candidates[0]!
      .content.parts[0]!.text;
    expect(text).toBe(DEV_IMAGE_LABEL);
  });

  it.each([
    [{ aspectRatio: "2:1" }, "aspectRatio"],
    [{ imageSize: "2k" }, "imageSize"],
  ])("refuses %j in the Gemini error envelope", async (imageConfig, field) => {
    const { status, json } = await post(gemini, request(imageConfig));
    expect(status).toBe(400);
    expect(json).toMatchObject({ error: { code: 400, status: "INVALID_ARGUMENT" } });
    expect((json.error as { message: string }).message).toContain(field);
  });

  it("refuses a wrong key", async () => {
    const { status } = await post(gemini, request({}), { "x-goog-api-key": "wrong" });
    expect(status).toBe(401);
  });
});

describe("dev upstream, OpenAI images format", () => {
  it("generates at the requested pixel size", async () => {
    const { status, json } = await post(
      "/v1/images/generations",
      { model: "gpt-image-1", prompt: "a fox", size: "1536x1024" },
      { authorization: "Bearer dev-key" },
    );
    expect(status).toBe(200);
    const png = Buffer.from((json as { data: { b64_json: string }[] }).data[0]!.b64_json, "base64");
    expect([png.readUInt32BE(16), png.readUInt32BE(20)]).toEqual([1536, 1024]);
  });
});
