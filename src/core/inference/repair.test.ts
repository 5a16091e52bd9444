import { describe, expect, it } from "vitest";
import { defaultPriceCatalog } from "../billing/default-catalog.js";
import { type MessagesCall, messagesBody, parseMessagesRequest } from "./messages-request.js";
import { buildModelCatalog, type TextModel, type TextModelCapabilities } from "./model-catalog.js";
import { budgetForEffort, effortForBudget, repairView } from "./repair.js";

const catalog = buildModelCatalog(defaultPriceCatalog());
const MESSAGES = [{ role: "user", content: "Hi" }];

function model(id: string): TextModel {
  const found = catalog.resolve(id);
  if (found === undefined) throw new Error(`no model ${id}`);
  return found;
}

/** A model outside the shipped table, to reach rules no shipped model triggers. */
function customModel(capabilities: Partial<TextModelCapabilities>): TextModel {
  return {
    ...model("model-opus-4-8"),
    capabilities: { ...model("model-opus-4-8").capabilities, ...capabilities },
  };
}

/**
 * Parses `fields` (plus model and messages, and max_tokens unless given) and repairs it; `json`
 * is the body as it would go upstream.
 */
function repair(target: string | TextModel, fields: Record<string, unknown>, call: MessagesCall = "create") {
  const base = call === "create" ? { max_tokens: 4096 } : {};
  const body = { model: "client-name", messages: MESSAGES, ...base, ...fields };
  const request = parseMessagesRequest(JSON.stringify(body), call);
  const result = repairView(request.view, typeof target === "string" ? model(target) : target, call);
  return { ...result, json: messagesBody({ ...request, view: result.view }) };
}

/** Freezes a value and everything it holds. */
function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}

describe("repairView: model and max_tokens", () => {
  it("sends the provider's model id, without recording it", () => {
    const { json, repaired } = repair("model-haiku-4-5", {});
    expect(json.model).toBe("claude-haiku-4-5-20251001");
    expect(repaired).toEqual([]);
  });

  it("leaves a request that needs nothing untouched but for the model", () => {
    const body = {
      model: "claude-opus-4-8",
      max_tokens: 128_000,
      messages: MESSAGES,
      system: "be brief",
      temperature: 1,
      top_p: 0.99,
      thinking: { type: "adaptive", display: "omitted" },
      output_config: { effort: "xhigh", format: { type: "json_schema", schema: {} } },
      context_management: { edits: [] },
      unknown_field: [1, null],
    };
    const request = parseMessagesRequest(JSON.stringify(body), "create");
    const { view, ...result } = repairView(request.view, model("model-opus-4-8"), "create");
    expect(result).toEqual({ repaired: [], clampedFrom: undefined, maxTokens: 128_000 });
    // Nothing changed: the very view it was given, so the caller can send the bytes it received.
    expect(view).toBe(request.view);
    expect(messagesBody({ ...request, view })).toEqual(body);
  });

  it("clamps max_tokens to the model's ceiling, reporting the original apart", () => {
    const { json, repaired, clampedFrom, maxTokens } = repair("model-opus-4-8", { max_tokens: 200_000 });
    expect(json.max_tokens).toBe(128_000);
    expect(maxTokens).toBe(128_000);
    expect(clampedFrom).toBe(200_000);
    expect(repaired).toEqual([]);
  });

  it("does not clamp max_tokens at or under the ceiling, 1 included", () => {
    expect(repair("model-haiku-4-5", { max_tokens: 64_000 })).toMatchObject({
      clampedFrom: undefined,
      maxTokens: 64_000,
    });
    // Issue 29: 0 is refused before repair (parseMessagesRequest); 1 is the least a call sends.
    expect(repair("model-haiku-4-5", { max_tokens: 1 })).toMatchObject({
      clampedFrom: undefined,
      maxTokens: 1,
    });
  });

  it("reports 0 and clamps nothing for count_tokens", () => {
    const { json, clampedFrom, maxTokens } = repair(
      "model-haiku-4-5",
      { max_tokens: 500_000 },
      "count_tokens",
    );
    expect(maxTokens).toBe(0);
    expect(clampedFrom).toBeUndefined();
    expect(json.max_tokens).toBe(500_000);
  });
});

describe("repairView: thinking", () => {
  it("(a) turns a budget into adaptive thinking and an effort for models without budgets", () => {
    const { json, repaired } = repair("model-opus-4-8", {
      thinking: { type: "enabled", budget_tokens: 10_000, display: "summarized" },
    });
    expect(json.thinking).toEqual({ type: "adaptive", display: "summarized" });
    expect(json.output_config).toEqual({ effort: "medium" });
    expect(repaired).toEqual(["thinking.budget_tokens->output_config.effort"]);
  });

  it("(a) keeps the other output_config fields, and applies to every adaptive-only model", () => {
    for (const id of ["model-opus-5", "model-opus-4-7", "model-sonnet-5", "model-fable-5"]) {
      const format = { type: "json_schema", schema: {} };
      const { json, repaired } = repair(id, {
        thinking: { type: "enabled", budget_tokens: 2_000 },
        output_config: { format },
      });
      expect(json.thinking).toEqual({ type: "adaptive" });
      expect(json.output_config).toEqual({ format, effort: "low" });
      expect(repaired).toEqual(["thinking.budget_tokens->output_config.effort"]);
    }
  });

  it("(a) keeps the client's own effort over the budget's", () => {
    const { json, repaired } = repair("model-opus-4-8", {
      thinking: { type: "enabled", budget_tokens: 2_000 },
      output_config: { effort: "max" },
    });
    expect(json.thinking).toEqual({ type: "adaptive" });
    expect(json.output_config).toEqual({ effort: "max" });
    expect(repaired).toEqual(["thinking.budget_tokens"]);
  });

  it("(a) fills an effort given as null", () => {
    const { json, repaired } = repair("model-opus-4-8", {
      thinking: { type: "enabled", budget_tokens: 50_000 },
      output_config: { effort: null },
    });
    expect(json.output_config).toEqual({ effort: "high" });
    expect(repaired).toEqual(["thinking.budget_tokens->output_config.effort"]);
  });

  it("(b) turns adaptive thinking into a budget for Haiku 4.5, from the effort", () => {
    const { json, repaired } = repair("model-haiku-4-5", {
      max_tokens: 32_000,
      thinking: { type: "adaptive", display: "omitted" },
    });
    expect(json.thinking).toEqual({ type: "enabled", budget_tokens: 16_384, display: "omitted" });
    expect(repaired).toEqual(["thinking.adaptive->thinking.budget_tokens"]);

    const low = repair("model-haiku-4-5", {
      thinking: { type: "adaptive" },
      output_config: { effort: "low", format: { type: "json_schema", schema: {} } },
    });
    expect(low.json.thinking).toEqual({ type: "enabled", budget_tokens: 1_024 });
    expect(low.json.output_config).toEqual({ format: { type: "json_schema", schema: {} } });
    expect(low.repaired).toEqual(["thinking.adaptive->thinking.budget_tokens", "output_config.effort"]);
  });

  it("(b) keeps the budget under max_tokens", () => {
    const { json, repaired } = repair("model-haiku-4-5", {
      max_tokens: 8_000,
      thinking: { type: "adaptive" },
    });
    expect(json.thinking).toEqual({ type: "enabled", budget_tokens: 7_999 });
    expect(repaired).toEqual(["thinking.adaptive->thinking.budget_tokens"]);
  });

  it("(b) drops thinking when max_tokens leaves less than the minimum budget", () => {
    const { json, repaired } = repair("model-haiku-4-5", {
      max_tokens: 1_024,
      thinking: { type: "adaptive" },
    });
    expect(json.thinking).toBeUndefined();
    expect(repaired).toEqual(["thinking"]);
  });

  it("(b) has no max_tokens bound for count_tokens", () => {
    const { json, repaired } = repair(
      "model-haiku-4-5",
      { thinking: { type: "adaptive" }, output_config: { effort: "xhigh" } },
      "count_tokens",
    );
    expect(json.thinking).toEqual({ type: "enabled", budget_tokens: 32_768 });
    expect(json.output_config).toBeUndefined();
    expect(repaired).toEqual(["thinking.adaptive->thinking.budget_tokens", "output_config.effort"]);
  });

  it("(c) drops thinking: disabled on an always-thinking model", () => {
    const { json, repaired } = repair("model-fable-5", { thinking: { type: "disabled" } });
    expect(json.thinking).toBeUndefined();
    expect(repaired).toEqual(["thinking"]);
  });

  it("(c) keeps thinking: disabled where it is accepted", () => {
    for (const id of ["model-opus-4-8", "model-opus-4-6", "model-haiku-4-5"]) {
      const { json, repaired } = repair(id, { thinking: { type: "disabled" } });
      expect(json.thinking).toEqual({ type: "disabled" });
      expect(repaired).toEqual([]);
    }
  });

  it("(d) lowers the effort to the ceiling Opus 5 allows with thinking off", () => {
    for (const effort of ["xhigh", "max"]) {
      const { json, repaired } = repair("model-opus-5", {
        thinking: { type: "disabled" },
        output_config: { effort },
      });
      expect(json.output_config).toEqual({ effort: "high" });
      expect(json.thinking).toEqual({ type: "disabled" });
      expect(repaired).toEqual(["output_config.effort"]);
    }
  });

  it("(d) leaves efforts at or under the ceiling, and other models, alone", () => {
    expect(
      repair("model-opus-5", { thinking: { type: "disabled" }, output_config: { effort: "high" } }).repaired,
    ).toEqual([]);
    expect(
      repair("model-opus-4-8", { thinking: { type: "disabled" }, output_config: { effort: "max" } }).repaired,
    ).toEqual([]);
    expect(
      repair("model-opus-5", { thinking: { type: "adaptive" }, output_config: { effort: "max" } }).repaired,
    ).toEqual([]);
  });

  it("(e) keeps a budget under max_tokens", () => {
    const { json, repaired } = repair("model-sonnet-4-6", {
      max_tokens: 8_000,
      thinking: { type: "enabled", budget_tokens: 8_000 },
    });
    expect(json.thinking).toEqual({ type: "enabled", budget_tokens: 7_999 });
    expect(repaired).toEqual(["thinking.budget_tokens"]);
  });

  it("(e) bounds the budget by the clamped max_tokens", () => {
    const { json, repaired, clampedFrom } = repair("model-haiku-4-5", {
      max_tokens: 100_000,
      thinking: { type: "enabled", budget_tokens: 80_000 },
    });
    expect(clampedFrom).toBe(100_000);
    expect(json.max_tokens).toBe(64_000);
    expect(json.thinking).toEqual({ type: "enabled", budget_tokens: 63_999 });
    expect(repaired).toEqual(["thinking.budget_tokens"]);
  });

  it("(e) drops thinking when max_tokens leaves less than the minimum budget", () => {
    const { json, repaired } = repair("model-opus-4-6", {
      max_tokens: 1_024,
      thinking: { type: "enabled", budget_tokens: 2_000 },
    });
    expect(json.thinking).toBeUndefined();
    expect(repaired).toEqual(["thinking"]);
  });

  it("(e) leaves a fitting budget, and count_tokens budgets, alone", () => {
    const thinking = { type: "enabled", budget_tokens: 4_095 };
    expect(repair("model-opus-4-6", { max_tokens: 4_096, thinking }).repaired).toEqual([]);
    const count = repair(
      "model-opus-4-6",
      { thinking: { type: "enabled", budget_tokens: 90_000 } },
      "count_tokens",
    );
    expect(count.json.thinking).toEqual({ type: "enabled", budget_tokens: 90_000 });
    expect(count.repaired).toEqual([]);
  });
});

describe("effort and budget mappings", () => {
  it("maps budgets to efforts, never above high", () => {
    expect(effortForBudget(1_024)).toBe("low");
    expect(effortForBudget(4_095)).toBe("low");
    expect(effortForBudget(4_096)).toBe("medium");
    expect(effortForBudget(16_383)).toBe("medium");
    expect(effortForBudget(16_384)).toBe("high");
    expect(effortForBudget(1_000_000)).toBe("high");
  });

  it("maps efforts to budgets", () => {
    expect(budgetForEffort("low")).toBe(1_024);
    expect(budgetForEffort("medium")).toBe(4_096);
    expect(budgetForEffort("high")).toBe(16_384);
    expect(budgetForEffort("xhigh")).toBe(32_768);
    expect(budgetForEffort("max")).toBe(32_768);
  });
});

describe("repairView: effort", () => {
  it("removes an effort from a model without efforts, and an output_config left empty", () => {
    const { json, repaired } = repair("model-haiku-4-5", { output_config: { effort: "medium" } });
    expect(json.output_config).toBeUndefined();
    expect(repaired).toEqual(["output_config.effort"]);
  });

  it("keeps the rest of output_config when removing the effort", () => {
    const format = { type: "json_schema", schema: {} };
    const { json } = repair("model-haiku-4-5", { output_config: { effort: "medium", format } });
    expect(json.output_config).toEqual({ format });
  });

  it("leaves an effort given as null alone (it means the default)", () => {
    const { json, repaired } = repair("model-haiku-4-5", { output_config: { effort: null } });
    expect(json.output_config).toEqual({ effort: null });
    expect(repaired).toEqual([]);
  });

  it("raises xhigh to max where xhigh is not offered", () => {
    for (const id of ["model-opus-4-6", "model-sonnet-4-6"]) {
      const { json, repaired } = repair(id, { output_config: { effort: "xhigh" } });
      expect(json.output_config).toEqual({ effort: "max" });
      expect(repaired).toEqual(["output_config.effort"]);
    }
  });

  it("turns xhigh into high without max, and any other unoffered effort into high", () => {
    const noMax = customModel({ efforts: ["low", "medium", "high"] });
    expect(repair(noMax, { output_config: { effort: "xhigh" } }).json.output_config).toEqual({
      effort: "high",
    });
    const highOnly = customModel({ efforts: ["high"] });
    const { json, repaired } = repair(highOnly, { output_config: { effort: "low" } });
    expect(json.output_config).toEqual({ effort: "high" });
    expect(repaired).toEqual(["output_config.effort"]);
  });

  it("records an adjustment once even when two rules make it", () => {
    const odd = customModel({
      disabledThinkingMaxEffort: "xhigh",
      efforts: ["low", "medium", "high", "max"],
    });
    const { json, repaired } = repair(odd, {
      thinking: { type: "disabled" },
      output_config: { effort: "max" },
    });
    expect(json.output_config).toEqual({ effort: "max" });
    expect(repaired).toEqual(["output_config.effort"]);
  });
});

describe("repairView: sampling", () => {
  it("drops non-default sampling on strict models", () => {
    const { json, repaired } = repair("model-opus-4-8", { temperature: 0.5, top_p: 0.9, top_k: 40 });
    expect(json).not.toHaveProperty("temperature");
    expect(json).not.toHaveProperty("top_p");
    expect(json).not.toHaveProperty("top_k");
    expect(repaired).toEqual(["temperature", "top_p", "top_k"]);
  });

  it("keeps temperature 1 and top_p >= 0.99 on strict models, but no top_k", () => {
    const { json, repaired } = repair("model-sonnet-5", { temperature: 1, top_p: 0.99, top_k: 0 });
    expect(json).toMatchObject({ temperature: 1, top_p: 0.99 });
    expect(repaired).toEqual(["top_k"]);
  });

  it("keeps sampling on legacy models with thinking off", () => {
    for (const thinking of [undefined, { type: "disabled" }]) {
      const { json, repaired } = repair("model-sonnet-4-6", { thinking, temperature: 0.2, top_k: 40 });
      expect(json).toMatchObject({ temperature: 0.2, top_k: 40 });
      expect(repaired).toEqual([]);
    }
    expect(repair("model-haiku-4-5", { top_p: 0.5 }).repaired).toEqual([]);
  });

  it("drops temperature, top_k and a low top_p on legacy models with thinking on", () => {
    const { json, repaired } = repair("model-opus-4-6", {
      thinking: { type: "enabled", budget_tokens: 2_048 },
      temperature: 0.7,
      top_k: 5,
    });
    expect(json).not.toHaveProperty("temperature");
    expect(json).not.toHaveProperty("top_k");
    expect(repaired).toEqual(["temperature", "top_k"]);

    const adaptive = repair("model-sonnet-4-6", { thinking: { type: "adaptive" }, top_p: 0.9 });
    expect(adaptive.json).not.toHaveProperty("top_p");
    expect(adaptive.repaired).toEqual(["top_p"]);
    expect(repair("model-sonnet-4-6", { thinking: { type: "adaptive" }, top_p: 0.95 }).repaired).toEqual([]);
  });

  it("judges sampling by the thinking after repair", () => {
    // Adaptive on Haiku becomes a budget: thinking stays on.
    expect(repair("model-haiku-4-5", { thinking: { type: "adaptive" }, temperature: 0.5 }).repaired).toEqual([
      "thinking.adaptive->thinking.budget_tokens",
      "temperature",
    ]);
    // Too small a max_tokens drops thinking: sampling is then free.
    const off = repair("model-haiku-4-5", {
      max_tokens: 500,
      thinking: { type: "adaptive" },
      temperature: 0.5,
    });
    expect(off.json.temperature).toBe(0.5);
    expect(off.repaired).toEqual(["thinking"]);
  });

  it("treats a model that cannot turn thinking off as thinking", () => {
    const alwaysOn = customModel({ thinkingTypes: ["adaptive"], sampling: "legacy" });
    expect(repair(alwaysOn, { temperature: 0.5, top_p: 0.96 }).repaired).toEqual(["temperature"]);
  });

  it("drops top_p when temperature is also given, on models that refuse both", () => {
    const { json, repaired } = repair("model-sonnet-4-6", { temperature: 0.5, top_p: 0.9 });
    expect(json.temperature).toBe(0.5);
    expect(json).not.toHaveProperty("top_p");
    expect(repaired).toEqual(["top_p"]);
    const thinking = repair("model-opus-4-6", {
      thinking: { type: "adaptive" },
      temperature: 1,
      top_p: 0.97,
    });
    expect(thinking.json.temperature).toBe(1);
    expect(thinking.repaired).toEqual(["top_p"]);
  });

  it("keeps temperature and top_p together where both are allowed", () => {
    expect(repair("model-opus-4-8", { temperature: 1, top_p: 1 }).repaired).toEqual([]);
  });

  it("applies to count_tokens bodies too", () => {
    const { json, repaired } = repair("model-opus-4-8", { temperature: 0.3 }, "count_tokens");
    expect(json).not.toHaveProperty("temperature");
    expect(repaired).toEqual(["temperature"]);
  });
});

describe("repairView: a Claude Code body", () => {
  const body = () => ({
    max_tokens: 64_000,
    stream: true,
    thinking: { type: "adaptive" },
    output_config: { effort: "high" },
    context_management: { edits: [{ type: "clear_thinking_20251015", keep: "all" }] },
  });

  it("becomes a budget on Haiku 4.5", () => {
    const { json, repaired, clampedFrom, maxTokens } = repair("model-haiku-4-5", body());
    expect(json.thinking).toEqual({ type: "enabled", budget_tokens: 16_384 });
    expect(json).not.toHaveProperty("output_config");
    expect(json.max_tokens).toBe(64_000);
    expect(clampedFrom).toBeUndefined();
    expect(maxTokens).toBe(64_000);
    expect(repaired).toEqual(["thinking.adaptive->thinking.budget_tokens", "output_config.effort"]);
    expect(json.context_management).toEqual(body().context_management);
  });

  it("needs nothing on Opus 4.8", () => {
    const { json, repaired } = repair("model-opus-4-8", body());
    expect(repaired).toEqual([]);
    expect(json).toEqual({ ...body(), model: "claude-opus-4-8", messages: MESSAGES });
  });
});

describe("repairView: purity", () => {
  /** Requests that make every rule fire, on the models that fire them. */
  const CASES: readonly [string, Record<string, unknown>][] = [
    ["model-opus-4-8", { thinking: { type: "enabled", budget_tokens: 9_000, display: "omitted", x: 1 } }],
    [
      "model-haiku-4-5",
      { max_tokens: 99_000, thinking: { type: "adaptive" }, output_config: { effort: "low" } },
    ],
    [
      "model-sonnet-4-6",
      { max_tokens: 5_000, thinking: { type: "enabled", budget_tokens: 9_000 }, top_k: 3 },
    ],
    ["model-opus-5", { thinking: { type: "disabled" }, output_config: { effort: "max", format: null } }],
    ["model-fable-5", { thinking: { type: "disabled" }, temperature: 0.2, top_p: 0.5 }],
    ["model-opus-4-6", { output_config: { effort: "xhigh" }, temperature: 0.5, top_p: 0.5 }],
  ];

  it.each(CASES)("never writes to the view it is given (%s)", (id, fields) => {
    const body = { model: "client-name", messages: MESSAGES, max_tokens: 4096, ...fields };
    const request = parseMessagesRequest(JSON.stringify(body), "create");
    const before = structuredClone(request.view);
    const view = deepFreeze(request.view);
    // Strict mode: a write to a frozen object would throw.
    const result = repairView(view, model(id), "create");
    expect(result.repaired.length + (result.clampedFrom === undefined ? 0 : 1)).toBeGreaterThan(0);
    expect(result.view).not.toBe(view);
    expect(view).toEqual(before);
  });
});
