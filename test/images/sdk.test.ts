import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { DEV_IMAGE_LABEL } from "../../src/dev/provider/dev-images.js";
import { HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { jpegLike, pngPixels, pngSize, pngText, smallPng, webpLike } from "../helpers/image-fixtures.js";
import { startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

// The official openai SDK against the gateway, with the dev upstream answering the Gemini image
// format on a real socket behind it.

/** Listed prices in µ$ per image (the shipped catalog). */
const PRICE = {
  "image-pro": { "1K": 134_000n, "2K": 134_000n, "4K": 240_000n },
  "image-2": { "1K": 39_000n },
};
const MAX_FILE_BYTES = 256 * 1024;

let t: TextGateway;
let client: OpenAI;

/** Extra fields the gateway reads that the SDK's types do not list. */
type Extra = { aspect_ratio?: string; size?: string };

beforeAll(async () => {
  t = await startTextGateway((upstream) => ({
    TOLLGATE_GEMINI_URL: upstream,
    TOLLGATE_IMAGE_URL_TTL_S: "1",
    TOLLGATE_IMAGE_MAX_FILE_BYTES: `${MAX_FILE_BYTES}`,
  }));
  await t.credit(5_000_000n);
  client = new OpenAI({ apiKey: t.secret, baseURL: `${t.baseUrl}/v1`, maxRetries: 0 });
});
afterAll(async () => {
  await t?.close();
});
beforeEach(() => {
  t.script(undefined);
});

function geminiRequests() {
  return t.upstream.requests.filter((r) => r.path.includes(":generateContent"));
}

/** The body of the last Gemini request the upstream received. */
interface GeminiBody {
  contents: { parts: { text?: string; inlineData?: { mimeType: string; data: string } }[] }[];
  generationConfig: unknown;
}
function lastGeminiBody(): GeminiBody {
  const request = geminiRequests().at(-1);
  if (request === undefined) throw new Error("no Gemini request was received");
  return request.body as GeminiBody;
}

/** The ledger rows of image calls, newest first. */
async function imageRows() {
  return (await t.usage()).filter((row) => row.imageSize !== "");
}

describe("images.generate", () => {
  it("returns b64_json: a labelled PNG at the ratio's pixel size, billed at the listed price", async () => {
    const before = await t.available();
    const { data: response, response: raw } = await client.images
      .generate({
        model: "image-pro",
        prompt: "a lighthouse at dusk",
        ...({ aspect_ratio: "16:9" } as Extra),
      })
      .withResponse();
    expect(raw.status).toBe(200);
    expect(raw.headers.get("x-request-id")).toMatch(/^req_/);
    expect(raw.headers.get("x-gateway-billing-chain")).toBe("base");
    expect(response.created).toBeGreaterThan(1_700_000_000);
    expect(Number.isInteger(response.created)).toBe(true);
    const png = Buffer.from(response.data?.[0]?.b64_json ?? "", "base64");
    expect(pngSize(png)).toEqual({ width: 1376, height: 768 });
    expect(pngText(png).Comment).toBe(DEV_IMAGE_LABEL);
    expect(pngPixels(png).rgb.length).toBe(1376 * 768 * 3);

    const sent = geminiRequests().at(-1);
    expect(sent?.path).toBe("/v1beta/models/gemini-3-pro-image-preview:generateContent");
    expect(lastGeminiBody().generationConfig).toEqual({
      responseModalities: ["TEXT", "IMAGE"],
      imageConfig: { aspectRatio: "16:9", imageSize: "1K" },
    });
    const [row] = await imageRows();
    expect(row).toMatchObject({
      requestId: raw.headers.get("x-request-id"),
      model: "image-pro",
      imageSize: "1K",
      chain: "base",
      status: HoldStatus.SETTLED,
      amount: PRICE["image-pro"]["1K"],
    });
    expect(row?.usage?.images).toBe(1);
    expect(await t.available()).toBe(before - PRICE["image-pro"]["1K"]);
    t.expectSoundLedger();
  });

  it("returns a url that serves the image until it expires, then 404", async () => {
    const response = await client.images.generate({
      model: "image-2",
      prompt: "a red bicycle",
      response_format: "url",
    });
    const url = response.data?.[0]?.url ?? "";
    expect(url).toMatch(new RegExp(`^${t.baseUrl}/v1/images/files/[A-Za-z0-9_-]{43}$`));
    expect(response.data?.[0]?.b64_json).toBeUndefined();
    const first = await fetch(url);
    expect(first.status).toBe(200);
    expect(first.headers.get("content-type")).toBe("image/png");
    const png = Buffer.from(await first.arrayBuffer());
    expect(pngSize(png)).toEqual({ width: 1024, height: 1024 });
    expect(pngText(png).Comment).toBe(DEV_IMAGE_LABEL);
    // image-2 renders only 1K: the gateway leaves imageSize out for it.
    expect(lastGeminiBody().generationConfig).toEqual({
      responseModalities: ["TEXT", "IMAGE"],
      imageConfig: { aspectRatio: "1:1" },
    });
    expect((await imageRows())[0]).toMatchObject({ model: "image-2", amount: PRICE["image-2"]["1K"] });

    await new Promise((resolve) => setTimeout(resolve, 1_100));
    const expired = await fetch(url);
    expect(expired.status).toBe(404);
    expect(await expired.json()).toMatchObject({
      error: { type: "not_found_error", code: "image_not_found" },
    });
    const unknown = await fetch(`${t.baseUrl}/v1/images/files/${"A".repeat(43)}`);
    expect(unknown.status).toBe(404);
    t.expectSoundLedger();
  });

  it.each([
    [{ n: 2 }, "n"],
    [{ n: 0 }, "n"],
    [{ n: 1e12 }, "n"],
    [{ n: 1.5 }, "n"],
    [{ size: "1024x1024" }, "size"],
    [{ size: "8K" }, "size"],
    [{ aspect_ratio: "7:3" }, "aspect_ratio"],
    [{ model: "image-2", size: "2K" }, "size"],
    [{ model: "dall-e-3" }, "model"],
    [{ prompt: "" }, "prompt"],
    [{ response_format: "png" }, "response_format"],
    [{ quality: "high" }, "quality"],
  ])("refuses %j with 400 naming %s, charging nothing and calling no upstream", async (fields, param) => {
    const calls = geminiRequests().length;
    const rows = (await t.usage()).length;
    const body = { model: "image-pro", prompt: "a cat", ...fields } as Parameters<
      typeof client.images.generate
    >[0];
    const error = await client.images.generate(body).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    const bad = error as InstanceType<typeof OpenAI.BadRequestError>;
    expect(bad.status).toBe(400);
    expect(bad.param).toBe(param);
    expect(bad.type).toBe("invalid_request_error");
    expect(bad.message).toContain(param);
    expect(geminiRequests().length).toBe(calls);
    expect((await t.usage()).length).toBe(rows);
  });
});

describe("images.edit", () => {
  it("sends one file as `image` and bills it", async () => {
    const { data: response, response: raw } = await client.images
      .edit({ model: "image-pro", prompt: "make it blue", image: await toFile(smallPng(), "a.png") })
      .withResponse();
    expect(raw.headers.get("x-gateway-billing-chain")).toBe("base");
    const png = Buffer.from(response.data?.[0]?.b64_json ?? "", "base64");
    expect(pngSize(png)).toEqual({ width: 1024, height: 1024 });
    const parts = lastGeminiBody().contents[0]?.parts;
    expect(parts).toEqual([
      { text: "make it blue" },
      { inlineData: { mimeType: "image/png", data: smallPng().toString("base64") } },
    ]);
    expect((await imageRows())[0]).toMatchObject({ model: "image-pro", amount: PRICE["image-pro"]["1K"] });
    t.expectSoundLedger();
  });

  it("sends three files as `image[]`, typed by content, in order", async () => {
    const files = [
      await toFile(smallPng(32, 32, "one"), "one.png"),
      // Named .png but a JPEG: the type comes from the bytes.
      await toFile(jpegLike(), "two.png"),
      await toFile(webpLike(), "three"),
    ];
    const response = await client.images.edit({
      model: "image-pro",
      prompt: "combine them",
      image: files,
      size: "2K" as "1024x1024",
      ...({ aspect_ratio: "3:2" } as Extra),
    });
    expect(pngSize(Buffer.from(response.data?.[0]?.b64_json ?? "", "base64"))).toEqual({
      width: 2464,
      height: 1632,
    });
    const body = lastGeminiBody();
    const inline = body.contents[0]?.parts.flatMap((p) => (p.inlineData ? [p.inlineData] : []));
    expect(inline?.map((p) => p.mimeType)).toEqual(["image/png", "image/jpeg", "image/webp"]);
    expect(inline?.[1]?.data).toBe(jpegLike().toString("base64"));
    expect(body.generationConfig).toEqual({
      responseModalities: ["TEXT", "IMAGE"],
      imageConfig: { aspectRatio: "3:2", imageSize: "2K" },
    });
    expect((await imageRows())[0]).toMatchObject({ imageSize: "2K", amount: PRICE["image-pro"]["2K"] });
    t.expectSoundLedger();
  });

  it("refuses 15 files with 400 naming image", async () => {
    const calls = geminiRequests().length;
    const files = await Promise.all(
      Array.from({ length: 15 }, (_, i) => toFile(smallPng(16, 16, `${i}`), `${i}.png`)),
    );
    const error = (await client.images
      .edit({ model: "image-pro", prompt: "x", image: files })
      .catch((e) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(error.status).toBe(400);
    expect(error.param).toBe("image");
    expect(error.message).toContain("at most 14");
    expect(geminiRequests().length).toBe(calls);
  });

  it("accepts exactly 14 files", async () => {
    const files = await Promise.all(
      Array.from({ length: 14 }, (_, i) => toFile(smallPng(16, 16, `${i}`), `${i}.png`)),
    );
    const response = await client.images.edit({ model: "image-2", prompt: "collage", image: files });
    expect(response.data).toHaveLength(1);
    const parts = lastGeminiBody().contents[0]?.parts;
    expect(parts).toHaveLength(15);
  });

  it("refuses an oversize file with 413 and a clear message", async () => {
    const big = Buffer.concat([smallPng(), Buffer.alloc(MAX_FILE_BYTES)]);
    const error = (await client.images
      .edit({ model: "image-pro", prompt: "x", image: await toFile(big, "big.png") })
      .catch((e) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(error.status).toBe(413);
    expect(error.type).toBe("request_too_large");
    expect(error.message).toContain('Image "big.png" exceeds the limit of 256 KiB per file');
  });

  it("refuses a body declared above the request limit before reading it, closing the connection", async () => {
    const { request } = await import("node:http");
    const url = new URL(`${t.baseUrl}/v1/images/edits`);
    const answer = await new Promise<{ status: number; connection: string | undefined; body: string }>(
      (resolve, reject) => {
        const req = request(
          {
            host: url.hostname,
            port: url.port,
            path: url.pathname,
            method: "POST",
            headers: {
              authorization: `Bearer ${t.secret}`,
              "content-type": "multipart/form-data; boundary=x",
              "content-length": String(60 * 1024 * 1024),
            },
          },
          (res) => {
            let body = "";
            res.on("data", (chunk) => {
              body += chunk;
            });
            res.on("end", () =>
              resolve({ status: res.statusCode ?? 0, connection: res.headers.connection, body }),
            );
          },
        );
        req.on("error", reject);
        // Only the start of the body is ever sent.
        req.write("--x\r\n");
      },
    );
    expect(answer.status).toBe(413);
    expect(answer.connection).toBe("close");
    expect(JSON.parse(answer.body)).toMatchObject({
      error: {
        type: "request_too_large",
        message: "The request body exceeds the limit of 50 MiB per request.",
      },
    });
  });

  it("refuses a non-image file with 400, whatever its name", async () => {
    const calls = geminiRequests().length;
    const error = (await client.images
      .edit({
        model: "image-pro",
        prompt: "x",
        image: await toFile(Buffer.from("hello, not an image"), "photo.png"),
      })
      .catch((e) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(error.status).toBe(400);
    expect(error.param).toBe("image");
    expect(error.message).toContain("not a PNG, JPEG or WebP");
    expect(geminiRequests().length).toBe(calls);
  });

  it("refuses n: 2 and a mask by name", async () => {
    const image = await toFile(smallPng(), "a.png");
    const n = (await client.images
      .edit({ model: "image-pro", prompt: "x", image, n: 2 })
      .catch((e) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect([n.status, n.param]).toEqual([400, "n"]);
    const mask = (await client.images
      .edit({ model: "image-pro", prompt: "x", image, mask: await toFile(smallPng(), "m.png") })
      .catch((e) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect([mask.status, mask.param]).toEqual([400, "mask"]);
  });
});
