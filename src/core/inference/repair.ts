import type { MessagesCall, MessagesRequest } from "./messages-request.js";
import { EFFORTS, type Effort, type TextModel } from "./model-catalog.js";

/** What repair changed. */
export interface Repair {
  /**
   * Every adjustment, in the order applied, without duplicates (the x-gateway-repaired-params
   * header is repaired.join(",")). Empty when nothing changed.
   */
  readonly repaired: readonly string[];
  /** The client's max_tokens when it was clamped to the model's ceiling (x-gateway-clamped-max-tokens), else undefined. */
  readonly clampedFrom: number | undefined;
  /** max_tokens as sent upstream (create), 0 for count_tokens. */
  readonly maxTokens: number;
}

/** The provider's smallest accepted `thinking.budget_tokens`. */
export const MIN_THINKING_BUDGET = 1024;

/** Sampling floors: below these a `top_p` is refused (strict models always; legacy ones while thinking). */
export const STRICT_MIN_TOP_P = 0.99;
export const LEGACY_THINKING_MIN_TOP_P = 0.95;

/** effort → budget_tokens, for models that only take manual budgets (Haiku 4.5). */
const BUDGET_FOR_EFFORT: Readonly<Record<Effort, number>> = {
  low: 1024,
  medium: 4096,
  high: 16384,
  xhigh: 32768,
  max: 32768,
};

/** budget_tokens → effort: the first row whose bound the budget is below; the last row catches the rest. */
const EFFORT_FOR_BUDGET: readonly (readonly [below: number, effort: Effort])[] = [
  [4096, "low"],
  [16384, "medium"],
  [Number.POSITIVE_INFINITY, "high"],
];

/**
 * The budget → effort mapping used when a legacy budget is rewritten. No official table
 * exists; this one mirrors {@link budgetForEffort}: budget < 4096 → "low", < 16384 →
 * "medium", otherwise "high". It never yields "xhigh" or "max": those cost far more than any
 * budget implied, so only a client that asks for them gets them.
 */
export function effortForBudget(budgetTokens: number): Effort {
  for (const [below, effort] of EFFORT_FOR_BUDGET) if (budgetTokens < below) return effort;
  return "high";
}

/**
 * The effort → budget mapping used for models that only take budgets: low 1024, medium 4096,
 * high 16384, xhigh and max 32768.
 */
export function budgetForEffort(effort: Effort): number {
  return BUDGET_FOR_EFFORT[effort];
}

/**
 * Rewrites a validated request, in place, into one the model accepts: never a failure. Also
 * sets json.model to model.upstreamId. Rules, in order: clamp max_tokens to the model's ceiling
 * (create); translate thinking into a type the model accepts; bring output_config.effort into
 * the model's list; drop sampling parameters the model refuses given the final thinking.
 */
export function repairRequest(request: MessagesRequest, model: TextModel, call: MessagesCall): Repair {
  const { json } = request;
  const caps = model.capabilities;
  const repaired = new Set<string>();
  json.model = model.upstreamId;

  // max_tokens bounds thinking budgets, so it is settled first.
  let maxTokens = 0;
  let clampedFrom: number | undefined;
  if (call === "create") {
    maxTokens = request.maxTokens;
    if (maxTokens > model.maxOutputTokens) {
      clampedFrom = maxTokens;
      maxTokens = model.maxOutputTokens;
      json.max_tokens = maxTokens;
    }
  }
  const maxBudget = call === "create" ? maxTokens - 1 : Number.POSITIVE_INFINITY;

  repairThinking(json, model, maxBudget, repaired);
  repairEffort(json, caps.efforts, repaired);
  repairSampling(json, model, repaired);

  return { repaired: [...repaired], clampedFrom, maxTokens };
}

function repairThinking(
  json: Record<string, unknown>,
  model: TextModel,
  maxBudget: number,
  repaired: Set<string>,
): void {
  const thinking = asObject(json.thinking);
  if (thinking === undefined) return;
  const accepts = model.capabilities.thinkingTypes;
  const type = thinking.type;
  const display = thinking.display;

  if (type === "enabled" && !accepts.includes("enabled") && accepts.includes("adaptive")) {
    json.thinking = withDisplay({ type: "adaptive" }, display);
    const config = outputConfig(json);
    if (effortOf(json) === undefined) {
      config.effort = effortForBudget(thinking.budget_tokens as number);
      repaired.add("thinking.budget_tokens->output_config.effort");
    } else {
      // The client's own effort says more about what it wants than a budget does.
      repaired.add("thinking.budget_tokens");
    }
  } else if (type === "adaptive" && !accepts.includes("adaptive") && accepts.includes("enabled")) {
    const budget = Math.min(budgetForEffort(effortOf(json) ?? "high"), maxBudget);
    if (budget < MIN_THINKING_BUDGET) {
      // Too little room under max_tokens to think at all: answering without thinking beats a refusal.
      delete json.thinking;
      repaired.add("thinking");
    } else {
      json.thinking = withDisplay({ type: "enabled", budget_tokens: budget }, display);
      repaired.add("thinking.adaptive->thinking.budget_tokens");
    }
  } else if (typeof type === "string" && !(accepts as readonly string[]).includes(type)) {
    // Disabled on an always-thinking model, or a type with no translation: the default is accepted.
    delete json.thinking;
    repaired.add("thinking");
  } else if (type === "disabled") {
    const ceiling = model.capabilities.disabledThinkingMaxEffort;
    const effort = effortOf(json);
    if (ceiling !== undefined && effort !== undefined && rank(effort) > rank(ceiling)) {
      outputConfig(json).effort = ceiling;
      repaired.add("output_config.effort");
    }
  } else if (type === "enabled" && maxBudget !== Number.POSITIVE_INFINITY) {
    // The provider wants budget_tokens < max_tokens (count_tokens has no max_tokens to respect).
    if ((thinking.budget_tokens as number) > maxBudget) {
      if (maxBudget < MIN_THINKING_BUDGET) {
        delete json.thinking;
        repaired.add("thinking");
      } else {
        thinking.budget_tokens = maxBudget;
        repaired.add("thinking.budget_tokens");
      }
    }
  }
}

function repairEffort(
  json: Record<string, unknown>,
  efforts: readonly Effort[],
  repaired: Set<string>,
): void {
  const effort = effortOf(json);
  if (effort === undefined || efforts.includes(effort)) return;
  const config = json.output_config as Record<string, unknown>;
  if (efforts.length === 0) {
    delete config.effort;
    if (Object.keys(config).length === 0) delete json.output_config;
  } else if (effort === "xhigh") {
    // The nearest accepted level: max where offered (more, not less, of what was asked).
    config.effort = efforts.includes("max") ? "max" : "high";
  } else {
    config.effort = "high";
  }
  repaired.add("output_config.effort");
}

function repairSampling(json: Record<string, unknown>, model: TextModel, repaired: Set<string>): void {
  const caps = model.capabilities;
  const type = asObject(json.thinking)?.type;
  const thinkingOn = type === "enabled" || type === "adaptive" || !caps.thinkingTypes.includes("disabled");
  const drop = (field: string) => {
    delete json[field];
    repaired.add(field);
  };
  if (caps.sampling === "strict" || thinkingOn) {
    const minTopP = caps.sampling === "strict" ? STRICT_MIN_TOP_P : LEGACY_THINKING_MIN_TOP_P;
    if (json.temperature !== undefined && json.temperature !== 1) drop("temperature");
    if (json.top_p !== undefined && (json.top_p as number) < minTopP) drop("top_p");
    if (json.top_k !== undefined) drop("top_k");
  }
  if (caps.exclusiveTemperatureTopP && json.temperature !== undefined && json.top_p !== undefined) {
    // temperature is the knob clients mean; top_p is the one dropped.
    drop("top_p");
  }
}

/** The request's output_config.effort; null (the API's "default") counts as absent. */
function effortOf(json: Record<string, unknown>): Effort | undefined {
  const effort = asObject(json.output_config)?.effort;
  return typeof effort === "string" ? (effort as Effort) : undefined;
}

/** The request's output_config, created if missing (its other fields are kept). */
function outputConfig(json: Record<string, unknown>): Record<string, unknown> {
  const existing = asObject(json.output_config);
  if (existing !== undefined) return existing;
  const created: Record<string, unknown> = {};
  json.output_config = created;
  return created;
}

function withDisplay(thinking: Record<string, unknown>, display: unknown): Record<string, unknown> {
  if (display !== undefined) thinking.display = display;
  return thinking;
}

function rank(effort: Effort): number {
  return EFFORTS.indexOf(effort);
}

function asObject(value: unknown): Record<string, unknown> | undefined {
  return typeof value === "object" && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined;
}
