import { describe, expect, it } from "vitest";
import { defaultPriceCatalog } from "../billing/default-catalog.js";
import { parsePriceCatalog } from "../billing/price-catalog.js";
import { buildModelCatalog, DEFAULT_MODEL_TABLE, EFFORTS, type ModelTableEntry } from "./model-catalog.js";

const SHIPPED_IDS = [
  "model-opus-5",
  "model-opus-4-8",
  "model-opus-4-7",
  "model-opus-4-6",
  "model-sonnet-5",
  "model-sonnet-4-6",
  "model-haiku-4-5",
  "model-fable-5",
];

describe("buildModelCatalog", () => {
  const catalog = buildModelCatalog(defaultPriceCatalog());

  it("serves every shipped text model, in table order", () => {
    expect(catalog.models.map((m) => m.id)).toEqual(SHIPPED_IDS);
  });

  it("takes each output ceiling from the price catalog", () => {
    const prices = defaultPriceCatalog();
    for (const model of catalog.models) {
      expect(model.maxOutputTokens).toBe(prices.text.get(model.id)?.maxOutputTokens);
    }
    expect(catalog.resolve("model-haiku-4-5")?.maxOutputTokens).toBe(64_000);
    expect(catalog.resolve("model-opus-4-8")?.maxOutputTokens).toBe(128_000);
  });

  it("resolves gateway ids and vendor aliases, case-insensitively", () => {
    expect(catalog.resolve("model-opus-4-8")?.id).toBe("model-opus-4-8");
    expect(catalog.resolve("claude-opus-4-8")?.id).toBe("model-opus-4-8");
    expect(catalog.resolve("Claude-Opus-4-8")?.id).toBe("model-opus-4-8");
    expect(catalog.resolve("MODEL-FABLE-5")?.id).toBe("model-fable-5");
    expect(catalog.resolve("claude-haiku-4-5")?.upstreamId).toBe("claude-haiku-4-5-20251001");
    expect(catalog.resolve("claude-haiku-4-5-20251001")?.id).toBe("model-haiku-4-5");
  });

  it("resolves unknown names to undefined", () => {
    expect(catalog.resolve("claude-opus-4-1")).toBeUndefined();
    expect(catalog.resolve("")).toBeUndefined();
    expect(catalog.resolve("image-pro")).toBeUndefined();
  });

  it("serves only the models the price catalog prices", () => {
    const prices = parsePriceCatalog({
      text: { "model-haiku-4-5": { input: 4, output: 5, cache_read: 1, max_output_tokens: 8_000 } },
    });
    const small = buildModelCatalog(prices);
    expect(small.models.map((m) => m.id)).toEqual(["model-haiku-4-5"]);
    expect(small.models[0]?.maxOutputTokens).toBe(8_000);
    expect(small.resolve("claude-opus-4-8")).toBeUndefined();
  });

  it("refuses a table where two entries share a name", () => {
    const haiku = DEFAULT_MODEL_TABLE.find((m) => m.id === "model-haiku-4-5")!;
    const clash: ModelTableEntry = { ...haiku, id: "model-other", aliases: ["Claude-Haiku-4-5"] };
    expect(() => buildModelCatalog(defaultPriceCatalog(), [haiku, clash])).toThrow(/claude-haiku-4-5/);
    const sameId: ModelTableEntry = { ...haiku, aliases: [] };
    expect(() => buildModelCatalog(defaultPriceCatalog(), [haiku, sameId])).toThrow(/model-haiku-4-5/);
  });

  it("holds the documented capabilities", () => {
    const caps = (id: string) => catalog.resolve(id)!.capabilities;
    expect(caps("model-opus-5")).toEqual({
      thinkingTypes: ["adaptive", "disabled"],
      sampling: "strict",
      exclusiveTemperatureTopP: false,
      efforts: EFFORTS,
      disabledThinkingMaxEffort: "high",
    });
    for (const id of ["model-opus-4-8", "model-opus-4-7", "model-sonnet-5"]) {
      expect(caps(id)).toEqual({
        thinkingTypes: ["adaptive", "disabled"],
        sampling: "strict",
        exclusiveTemperatureTopP: false,
        efforts: ["low", "medium", "high", "xhigh", "max"],
      });
    }
    for (const id of ["model-opus-4-6", "model-sonnet-4-6"]) {
      expect(caps(id)).toEqual({
        thinkingTypes: ["adaptive", "enabled", "disabled"],
        sampling: "legacy",
        exclusiveTemperatureTopP: true,
        efforts: ["low", "medium", "high", "max"],
      });
    }
    expect(caps("model-haiku-4-5")).toEqual({
      thinkingTypes: ["enabled", "disabled"],
      sampling: "legacy",
      exclusiveTemperatureTopP: true,
      efforts: [],
    });
    expect(caps("model-fable-5")).toMatchObject({ thinkingTypes: ["adaptive"], sampling: "strict" });
  });

  it("gives every model a display name, an RFC 3339 date and a context window", () => {
    for (const model of catalog.models) {
      expect(model.displayName).not.toBe("");
      expect(Number.isNaN(Date.parse(model.createdAt))).toBe(false);
      expect(model.createdAt).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/);
      expect(model.contextWindow).toBe(model.id === "model-haiku-4-5" ? 200_000 : 1_000_000);
    }
    expect(catalog.models.map((m) => m.displayName)).toEqual([
      "Opus 5",
      "Opus 4.8",
      "Opus 4.7",
      "Opus 4.6",
      "Sonnet 5",
      "Sonnet 4.6",
      "Haiku 4.5",
      "Fable 5",
    ]);
  });
});
