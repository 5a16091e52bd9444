import { describe, expect, it } from "vitest";
import { defaultPriceCatalog } from "../billing/default-catalog.js";
import { readBillableFeatures } from "./billable-features.js";
import { parseMessagesRequest } from "./messages-request.js";
import { buildModelCatalog } from "./model-catalog.js";

const catalog = buildModelCatalog(defaultPriceCatalog());
const MESSAGES = [{ role: "user", content: "Hi" }];

/** The rest fields of a create body with `fields`, frozen all the way down. */
function frozenRest(fields: Record<string, unknown>) {
  const body = { model: "model-opus-4-8", max_tokens: 100, messages: MESSAGES, ...fields };
  return deepFreeze(parseMessagesRequest(JSON.stringify(body), "create").rest);
}

function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}

describe("readBillableFeatures", () => {
  it("hands back the very fields it was given when nothing changes", () => {
    const rest = frozenRest({
      tools: [
        { name: "t", input_schema: {} },
        { type: "web_search_20250305", max_uses: 2 },
      ],
    });
    const read = readBillableFeatures(rest, catalog, 5);
    expect(read.rest).toBe(rest);
    expect(read.repaired).toEqual([]);
    expect(read.features.webSearchMaxUses).toBe(2n);
  });

  it("inserts a web search cap in a copy, leaving the caller's tools alone", () => {
    const rest = frozenRest({ tools: [{ name: "t" }, { type: "web_search_20250305", name: "web_search" }] });
    const before = structuredClone(rest);
    const read = readBillableFeatures(rest, catalog, 5);
    expect(read.repaired).toEqual(["tools.1.max_uses"]);
    expect(read.features.webSearchMaxUses).toBe(5n);
    expect(read.rest.tools).toEqual([
      { name: "t" },
      { type: "web_search_20250305", name: "web_search", max_uses: 5 },
    ]);
    // Unchanged tools are shared, not copied.
    expect((read.rest.tools as unknown[])[0]).toBe((rest.tools as unknown[])[0]);
    expect(rest).toEqual(before);
  });

  it("renames advisor and fallback models to the provider's in a copy", () => {
    const rest = frozenRest({
      tools: [{ type: "advisor_20260301", name: "advisor", model: "model-opus-4-8" }],
      fallbacks: [{ model: "model-haiku-4-5" }, { model: "claude-sonnet-4-6" }],
    });
    const before = structuredClone(rest);
    const read = readBillableFeatures(rest, catalog, 5);
    expect(read.repaired).toEqual([]);
    expect(read.rest).not.toBe(rest);
    expect(read.rest.tools).toEqual([
      { type: "advisor_20260301", name: "advisor", model: "claude-opus-4-8" },
    ]);
    expect(read.rest.fallbacks).toEqual([
      { model: "claude-haiku-4-5-20251001" },
      { model: "claude-sonnet-4-6" },
    ]);
    expect(read.features.advisor?.model).toBe("model-opus-4-8");
    expect(read.features.fallbacks?.map((f) => f.model)).toEqual(["model-haiku-4-5", "model-sonnet-4-6"]);
    expect(rest).toEqual(before);
  });
});
