import type { MessagesCall, MessagesView, Sampling, Thinking } from "./messages-request.js";
import { EFFORTS, type Effort, type TextModel, type TextModelCapabilities } from "./model-catalog.js";

/** A repaired view, and what repair changed. */
export interface Repair {
  /** The view as it goes upstream: the input view itself when nothing changed, else a new one. */
  readonly view: MessagesView;
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
 * Rewrites a validated request's view into one the model accepts: never a failure, and never a
 * write to its input (unchanged parts of the view are shared). Also sets the model to
 * model.upstreamId. First max_tokens is clamped to the model's ceiling (create), then {@link RULES}
 * run in order against the model's capabilities: thinking into a type the model accepts,
 * output_config.effort into the model's list, sampling parameters the model refuses given the
 * final thinking dropped.
 */
export function repairView(view: MessagesView, model: TextModel, call: MessagesCall): Repair {
  let current = view.model === model.upstreamId ? view : { ...view, model: model.upstreamId };

  // max_tokens bounds thinking budgets, so it is settled first.
  let maxTokens = 0;
  let clampedFrom: number | undefined;
  if (call === "create") {
    maxTokens = view.maxTokens;
    if (maxTokens > model.maxOutputTokens) {
      clampedFrom = maxTokens;
      maxTokens = model.maxOutputTokens;
      current = { ...current, maxTokens };
    }
  }
  const context: RuleContext = {
    caps: model.capabilities,
    maxBudget: call === "create" ? maxTokens - 1 : Number.POSITIVE_INFINITY,
  };

  const repaired = new Set<string>();
  for (const rule of RULES) {
    const step = rule(current, context);
    if (step === undefined) continue;
    current = step.view;
    for (const name of step.repaired) repaired.add(name);
  }
  return { view: current, repaired: [...repaired], clampedFrom, maxTokens };
}

/** What a rule sees besides the view. */
interface RuleContext {
  readonly caps: TextModelCapabilities;
  /** The largest thinking budget max_tokens leaves room for; unbounded for count_tokens. */
  readonly maxBudget: number;
}

/** A rule's change: the new view and the names it records. */
interface Step {
  readonly view: MessagesView;
  readonly repaired: readonly string[];
}

/** One repair rule: undefined when it does not apply to the view on this model. */
type Rule = (view: MessagesView, context: RuleContext) => Step | undefined;

/**
 * How a thinking type the model refuses is translated, when the model takes the target type.
 * A refused type without a usable translation is removed (the model's default is accepted).
 */
const THINKING_TRANSLATIONS: readonly {
  readonly from: Thinking["type"];
  readonly to: Thinking["type"];
  readonly translate: (view: MessagesView, thinking: Thinking, context: RuleContext) => Step;
}[] = [
  { from: "enabled", to: "adaptive", translate: budgetToAdaptive },
  { from: "adaptive", to: "enabled", translate: adaptiveToBudget },
];

/**
 * What each sampling policy refuses: `when` the limits apply (always, or while thinking), and
 * the lowest top_p accepted then. temperature ≠ 1 and any top_k are refused whenever they apply.
 */
const SAMPLING_RULES: Readonly<
  Record<
    TextModelCapabilities["sampling"],
    { readonly when: "always" | "thinking"; readonly minTopP: number }
  >
> = {
  strict: { when: "always", minTopP: STRICT_MIN_TOP_P },
  legacy: { when: "thinking", minTopP: LEGACY_THINKING_MIN_TOP_P },
};

/**
 * An effort the model does not offer → the levels tried first, nearest first (more, not less,
 * of what was asked); "high" when none is offered.
 */
const EFFORT_SUBSTITUTES: Readonly<Partial<Record<Effort, readonly Effort[]>>> = { xhigh: ["max"] };

/** The rules, in the order they apply; the ones after thinking see the thinking as repaired. */
const RULES: readonly Rule[] = [
  thinkingType,
  thinkingBudget,
  disabledThinkingEffort,
  effortLevel,
  samplingLimits,
  exclusiveTemperatureTopP,
];

/** A thinking type the model refuses: translated where the table allows, else removed. */
function thinkingType(view: MessagesView, context: RuleContext): Step | undefined {
  const { thinking } = view;
  const accepts = context.caps.thinkingTypes;
  if (thinking === undefined || accepts.includes(thinking.type)) return undefined;
  const translation = THINKING_TRANSLATIONS.find((t) => t.from === thinking.type && accepts.includes(t.to));
  // Disabled on an always-thinking model, or a type with no translation: the default is accepted.
  return translation?.translate(view, thinking, context) ?? withoutThinking(view);
}

/** A budget is replaced by adaptive thinking and an effort that says as much. */
function budgetToAdaptive(view: MessagesView, thinking: Thinking): Step {
  const adaptive: Thinking = { type: "adaptive", display: thinking.display, extra: {} };
  if (typeof view.effort === "string") {
    // The client's own effort says more about what it wants than a budget does.
    return { view: { ...view, thinking: adaptive }, repaired: ["thinking.budget_tokens"] };
  }
  // The table calls this for "enabled" thinking only; the minimum budget stands in otherwise.
  const budget = thinking.type === "enabled" ? thinking.budgetTokens : MIN_THINKING_BUDGET;
  return {
    view: {
      ...view,
      thinking: adaptive,
      effort: effortForBudget(budget),
      outputConfig: view.outputConfig ?? {},
    },
    repaired: ["thinking.budget_tokens->output_config.effort"],
  };
}

/** Adaptive thinking is replaced by the budget its effort implies, kept under max_tokens. */
function adaptiveToBudget(view: MessagesView, thinking: Thinking, context: RuleContext): Step {
  const budget = Math.min(budgetForEffort(effortOf(view) ?? "high"), context.maxBudget);
  // Too little room under max_tokens to think at all: answering without thinking beats a refusal.
  if (budget < MIN_THINKING_BUDGET) return withoutThinking(view);
  const enabled: Thinking = { type: "enabled", budgetTokens: budget, display: thinking.display, extra: {} };
  return { view: { ...view, thinking: enabled }, repaired: ["thinking.adaptive->thinking.budget_tokens"] };
}

/** The provider wants budget_tokens < max_tokens (count_tokens has no max_tokens to respect). */
function thinkingBudget(view: MessagesView, context: RuleContext): Step | undefined {
  const { thinking } = view;
  if (thinking?.type !== "enabled" || thinking.budgetTokens <= context.maxBudget) return undefined;
  if (context.maxBudget < MIN_THINKING_BUDGET) return withoutThinking(view);
  return {
    view: { ...view, thinking: { ...thinking, budgetTokens: context.maxBudget } },
    repaired: ["thinking.budget_tokens"],
  };
}

/** Thinking turned off is accepted only up to the model's effort ceiling for it (Opus 5). */
function disabledThinkingEffort(view: MessagesView, context: RuleContext): Step | undefined {
  const ceiling = context.caps.disabledThinkingMaxEffort;
  const effort = effortOf(view);
  if (view.thinking?.type !== "disabled" || ceiling === undefined || effort === undefined) return undefined;
  if (rank(effort) <= rank(ceiling)) return undefined;
  return { view: { ...view, effort: ceiling }, repaired: ["output_config.effort"] };
}

/** An effort the model does not offer: removed where it takes none, else the nearest offered. */
function effortLevel(view: MessagesView, context: RuleContext): Step | undefined {
  const { efforts } = context.caps;
  const effort = effortOf(view);
  if (effort === undefined || efforts.includes(effort)) return undefined;
  if (efforts.length === 0) {
    // An output_config left empty goes too.
    const other = view.outputConfig;
    const outputConfig = other === undefined || Object.keys(other).length === 0 ? undefined : other;
    return { view: { ...view, effort: undefined, outputConfig }, repaired: ["output_config.effort"] };
  }
  const substitute = EFFORT_SUBSTITUTES[effort]?.find((e) => efforts.includes(e)) ?? "high";
  return { view: { ...view, effort: substitute }, repaired: ["output_config.effort"] };
}

/** Sampling the model's policy refuses, given the thinking as repaired. */
function samplingLimits(view: MessagesView, context: RuleContext): Step | undefined {
  const { caps } = context;
  const rule = SAMPLING_RULES[caps.sampling];
  const type = view.thinking?.type;
  const thinkingOn = type === "enabled" || type === "adaptive" || !caps.thinkingTypes.includes("disabled");
  if (rule.when === "thinking" && !thinkingOn) return undefined;
  const { temperature, topP, topK } = view.sampling;
  return dropSampling(view, {
    temperature: temperature !== undefined && temperature !== 1,
    topP: topP !== undefined && topP < rule.minTopP,
    topK: topK !== undefined,
  });
}

/** temperature and top_p together where the model refuses both: temperature is the knob clients mean. */
function exclusiveTemperatureTopP(view: MessagesView, context: RuleContext): Step | undefined {
  const { temperature, topP } = view.sampling;
  if (!context.caps.exclusiveTemperatureTopP || temperature === undefined || topP === undefined) {
    return undefined;
  }
  return dropSampling(view, { topP: true });
}

/** The wire names of the sampling knobs, in the order they are recorded. */
const SAMPLING_FIELDS: readonly (readonly [keyof Sampling, string])[] = [
  ["temperature", "temperature"],
  ["topP", "top_p"],
  ["topK", "top_k"],
];

function dropSampling(view: MessagesView, drop: Partial<Record<keyof Sampling, boolean>>): Step | undefined {
  const dropped = SAMPLING_FIELDS.filter(([field]) => drop[field] === true);
  if (dropped.length === 0) return undefined;
  const sampling = { ...view.sampling };
  for (const [field] of dropped) sampling[field] = undefined;
  return { view: { ...view, sampling }, repaired: dropped.map(([, name]) => name) };
}

function withoutThinking(view: MessagesView): Step {
  return { view: { ...view, thinking: undefined }, repaired: ["thinking"] };
}

/** The request's output_config.effort; null (the API's "default") counts as absent. */
function effortOf(view: MessagesView): Effort | undefined {
  return view.effort ?? undefined;
}

function rank(effort: Effort): number {
  return EFFORTS.indexOf(effort);
}
