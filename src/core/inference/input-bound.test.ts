import { describe, expect, it } from "vitest";
import { defaultPriceCatalog } from "../billing/default-catalog.js";
import {
  DOCUMENT_BLOCK_TOKENS,
  IMAGE_BLOCK_TOKENS,
  inputTokenBound,
  PROVIDER_OVERHEAD_TOKENS,
} from "./input-bound.js";
import { buildModelCatalog } from "./model-catalog.js";

const catalog = buildModelCatalog(defaultPriceCatalog());
const opus = catalog.resolve("model-opus-4-8")!;
const haiku = catalog.resolve("model-haiku-4-5")!;

/** The bound of a body given as JSON, measured in UTF-8 bytes as the gateway receives it. */
function bound(json: Record<string, unknown>, model = opus): bigint {
  return inputTokenBound(Buffer.byteLength(JSON.stringify(json)), json, model);
}

const image = { type: "image", source: { type: "url", url: "https://example.com/a.png" } };

describe("inputTokenBound", () => {
  it("is the body's bytes plus the provider's overhead for plain text", () => {
    const json = { model: "m", max_tokens: 10, messages: [{ role: "user", content: "héllo wörld ✓" }] };
    expect(bound(json)).toBe(BigInt(Buffer.byteLength(JSON.stringify(json)) + PROVIDER_OVERHEAD_TOKENS));
  });

  it("counts the text of tools and system prompts through the byte length", () => {
    const small = { messages: [{ role: "user", content: "x" }] };
    const large = {
      ...small,
      system: "s".repeat(5_000),
      tools: [{ name: "t", input_schema: { d: "d".repeat(5_000) } }],
    };
    expect(bound(large) - bound(small)).toBeGreaterThan(10_000n);
  });

  it("adds an allowance per image, in message content and inside tool results", () => {
    const json = {
      messages: [
        { role: "user", content: [image, { type: "text", text: "what is this?" }] },
        {
          role: "user",
          content: [
            {
              type: "tool_result",
              tool_use_id: "t1",
              content: [{ type: "text", text: "screenshot:" }, image],
            },
          ],
        },
      ],
    };
    const bytes = Buffer.byteLength(JSON.stringify(json));
    expect(bound(json)).toBe(BigInt(bytes + PROVIDER_OVERHEAD_TOKENS + 2 * IMAGE_BLOCK_TOKENS));
  });

  it("adds an allowance per non-text document, but not for text documents", () => {
    const pdf = { type: "document", source: { type: "base64", media_type: "application/pdf", data: "JVBE" } };
    const file = { type: "document", source: { type: "file", file_id: "file_1" } };
    const text = { type: "document", source: { type: "text", media_type: "text/plain", data: "plain" } };
    const json = { messages: [{ role: "user", content: [pdf, file, text] }] };
    const bytes = Buffer.byteLength(JSON.stringify(json));
    expect(bound(json)).toBe(BigInt(bytes + PROVIDER_OVERHEAD_TOKENS + 2 * DOCUMENT_BLOCK_TOKENS));
  });

  it("counts media nested at any depth without recursion limits", () => {
    let content: unknown[] = [image];
    for (let i = 0; i < 50_000; i++) content = [{ type: "tool_result", content }];
    const json = { messages: [{ role: "user", content }] };
    expect(inputTokenBound(100, json, opus)).toBe(
      BigInt(100 + PROVIDER_OVERHEAD_TOKENS + IMAGE_BLOCK_TOKENS),
    );
  });

  it("ignores string content and malformed shapes", () => {
    const json = {
      messages: [{ role: "user", content: "image" }, null, { role: "user", content: [null, "x"] }],
    };
    expect(inputTokenBound(10, json, opus)).toBe(BigInt(10 + PROVIDER_OVERHEAD_TOKENS));
    expect(inputTokenBound(10, {}, opus)).toBe(BigInt(10 + PROVIDER_OVERHEAD_TOKENS));
  });

  it("is capped at the model's context window", () => {
    const images = Array.from({ length: 40 }, () => image);
    const json = { messages: [{ role: "user", content: images }] };
    expect(bound(json, haiku)).toBe(200_000n);
    expect(bound(json, opus)).toBeLessThan(1_000_000n);
    expect(inputTokenBound(5_000_000, {}, opus)).toBe(1_000_000n);
  });
});
