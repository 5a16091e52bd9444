import { describe, expect, it } from "vitest";
import type { ImageUpstreamRequest } from "../../core/ports/providers.js";
import { generateContentBody, generateContentOutcome } from "./gemini-images.js";

const request: ImageUpstreamRequest = {
  upstreamModel: "gemini-3-pro-image-preview",
  prompt: "a fox",
  size: "2K",
  aspectRatio: "4:5",
  width: 1792,
  height: 2272,
  references: [
    { data: Uint8Array.from([1, 2, 3]), mimeType: "image/png" },
    { data: Uint8Array.from([4, 5]), mimeType: "image/webp" },
  ],
};

describe("generateContentBody", () => {
  it("sends the prompt, the references as inlineData in order, and imageConfig", () => {
    expect(JSON.parse(generateContentBody(request, { sendImageSize: true }))).toEqual({
      contents: [
        {
          role: "user",
          parts: [
            { text: "a fox" },
            { inlineData: { mimeType: "image/png", data: "AQID" } },
            { inlineData: { mimeType: "image/webp", data: "BAU=" } },
          ],
        },
      ],
      generationConfig: {
        responseModalities: ["TEXT", "IMAGE"],
        imageConfig: { aspectRatio: "4:5", imageSize: "2K" },
      },
    });
  });

  it("leaves imageSize out for models that take none", () => {
    const body = JSON.parse(generateContentBody({ ...request, references: [] }, { sendImageSize: false }));
    expect(body.generationConfig.imageConfig).toEqual({ aspectRatio: "4:5" });
    expect(body.contents[0].parts).toEqual([{ text: "a fox" }]);
  });
});

describe("generateContentOutcome", () => {
  const candidate = (parts: unknown[], finishReason = "STOP") =>
    JSON.stringify({ candidates: [{ content: { parts }, finishReason }] });

  it("returns the images and the text, skipping thought drafts", () => {
    const outcome = generateContentOutcome(
      candidate([
        { text: "draft", thought: true },
        { inlineData: { mimeType: "image/png", data: "AAAA" }, thought: true },
        { text: "Here it is." },
        { inlineData: { mimeType: "image/png", data: "AQID" } },
        { inline_data: { mime_type: "image/jpeg", data: "BAU=" } },
      ]),
    );
    expect(outcome).toEqual({
      kind: "images",
      text: "Here it is.",
      images: [
        { mimeType: "image/png", data: Buffer.from([1, 2, 3]) },
        { mimeType: "image/jpeg", data: Buffer.from([4, 5]) },
      ],
    });
  });

  it.each([
    [
      JSON.stringify({ promptFeedback: { blockReason: "PROHIBITED_CONTENT" } }),
      "refused",
      "prompt blocked: PROHIBITED_CONTENT",
    ],
    [
      candidate([{ text: "I can't draw that." }], "IMAGE_SAFETY"),
      "refused",
      "finish reason IMAGE_SAFETY; the model said: I can't draw that.",
    ],
    [
      candidate([{ text: "Sure!" }]),
      "empty",
      "no image in the response (finish reason STOP); the model said: Sure!",
    ],
    [JSON.stringify({ candidates: [] }), "empty", "no image in the response (no candidates)"],
    ["not json", "empty", "the response is not JSON"],
  ])("%s → %s", (text, kind, detail) => {
    expect(generateContentOutcome(text)).toEqual({ kind, detail });
  });
});
