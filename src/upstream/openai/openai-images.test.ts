import { describe, expect, it } from "vitest";
import type { ImageUpstreamRequest } from "../../core/ports/providers.js";
import { imagesOutcome, imagesRequest } from "./openai-images.js";

const request: ImageUpstreamRequest = {
  upstreamModel: "gpt-image-1",
  prompt: "a fox",
  size: "1K",
  aspectRatio: "16:9",
  width: 1376,
  height: 768,
  references: [],
};

describe("imagesRequest", () => {
  it("generates with JSON and the implied pixel size, without response_format", () => {
    const { path, contentType, body } = imagesRequest(request);
    expect([path, contentType]).toEqual(["/v1/images/generations", "application/json"]);
    expect(JSON.parse(Buffer.from(body).toString())).toEqual({
      model: "gpt-image-1",
      prompt: "a fox",
      n: 1,
      size: "1376x768",
    });
  });

  it("edits with multipart: the fields, then every reference as image[]", () => {
    const png = Uint8Array.from([0x89, 0x50, 0x4e, 0x47]);
    const jpeg = Uint8Array.from([0xff, 0xd8, 0xff]);
    const { path, contentType, body } = imagesRequest({
      ...request,
      references: [
        { data: png, mimeType: "image/png" },
        { data: jpeg, mimeType: "image/jpeg" },
      ],
    });
    expect(path).toBe("/v1/images/edits");
    const boundary = /boundary=(.+)$/.exec(contentType)?.[1] ?? "";
    const text = Buffer.from(body).toString("latin1");
    const parts = text.split(`--${boundary}`).slice(1, -1);
    expect(parts.map((part) => /name="([^"]+)"/.exec(part)?.[1])).toEqual([
      "model",
      "prompt",
      "n",
      "size",
      "image[]",
      "image[]",
    ]);
    expect(parts[3]).toContain("\r\n\r\n1376x768\r\n");
    expect(parts[4]).toContain('filename="image-1.png"\r\ncontent-type: image/png\r\n\r\n\x89PNG\r\n');
    expect(parts[5]).toContain('filename="image-2.jpg"\r\ncontent-type: image/jpeg\r\n\r\n\xff\xd8\xff\r\n');
    expect(text.endsWith(`--${boundary}--\r\n`)).toBe(true);
  });
});

describe("imagesOutcome", () => {
  it.each([
    [
      { data: [{ b64_json: "AQID" }] },
      { kind: "images", text: "", images: [{ data: Buffer.from([1, 2, 3]), mimeType: "" }] },
    ],
    [
      { data: [{ url: "https://x/y.png" }] },
      { kind: "empty", detail: "the provider returned URLs, not b64_json" },
    ],
    [{ data: [] }, { kind: "empty", detail: "no image in the response" }],
  ])("%j", (body, outcome) => {
    expect(imagesOutcome(JSON.stringify(body))).toEqual(outcome);
  });
});
