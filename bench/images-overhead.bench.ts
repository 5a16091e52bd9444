// What the gateway adds to an image call: the same 1K generation sent straight to the stand-in
// provider, and through the gateway (key check, validation, a durable hold and settle, the
// Gemini translation, base64 both ways). The provider answers at once with a small real PNG, so
// the difference is the gateway's own cost. Run: npx vitest bench --run bench/images-overhead.bench.ts
import { afterAll, beforeAll, bench, describe } from "vitest";
import { smallPng } from "../test/helpers/image-fixtures.js";
import { startTextGateway, type TextGateway } from "../test/helpers/text-gateway.js";

let t: TextGateway;
const PNG_B64 = smallPng(256, 256).toString("base64");
const GEMINI_BODY = JSON.stringify({
  contents: [{ role: "user", parts: [{ text: "a lighthouse" }] }],
  generationConfig: {
    responseModalities: ["TEXT", "IMAGE"],
    imageConfig: { aspectRatio: "1:1", imageSize: "1K" },
  },
});

beforeAll(async () => {
  t = await startTextGateway((upstream) => ({
    TOLLGATE_GEMINI_URL: upstream,
    TOLLGATE_RATE_LIMIT_RPM: "1000000",
  }));
  await t.credit(1_000_000_000_000n);
  t.script((request) =>
    request.path.includes(":generateContent")
      ? {
          kind: "json",
          status: 200,
          body: {
            candidates: [{ content: { parts: [{ inlineData: { mimeType: "image/png", data: PNG_B64 } }] } }],
          },
        }
      : undefined,
  );
});
afterAll(async () => {
  await t?.close();
});

describe("one 1K image, provider answering at once", () => {
  bench(
    "straight to the provider (generateContent)",
    async () => {
      const response = await fetch(
        `${t.upstream.url}/v1beta/models/gemini-3-pro-image-preview:generateContent`,
        {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: GEMINI_BODY,
        },
      );
      await response.arrayBuffer();
    },
    { time: 3_000, warmupTime: 500 },
  );

  bench(
    "through the gateway (POST /v1/images/generations, billed)",
    async () => {
      const response = await fetch(`${t.baseUrl}/v1/images/generations`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${t.secret}` },
        body: JSON.stringify({ model: "image-pro", prompt: "a lighthouse" }),
      });
      if (response.status !== 200) throw new Error(`status ${response.status}`);
      await response.arrayBuffer();
    },
    { time: 3_000, warmupTime: 500 },
  );
});
