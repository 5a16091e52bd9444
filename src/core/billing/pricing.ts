import { Code } from "@connectrpc/connect";
import { invalidField, reasonError } from "../errors.js";
import { ZERO_USAGE } from "../ports/ledger.js";
import { PICO_PER_MICRO } from "./money.js";
import {
  BP_ONE,
  IMAGE_SIZES,
  type ImagePrice,
  type ImageSize,
  isImageSize,
  type PriceCatalog,
  type TextPrice,
  type TokenRates,
} from "./price-catalog.js";

/** A text call's speed (`speed` in the request, `usage.speed` in the answer). */
export type Speed = "standard" | "fast";

/** The advisor tool of a text call. */
export interface AdvisorSpec {
  /** A gateway model id. */
  readonly model: string;
  /** The tool's `max_tokens` (per advisor call); 0n = the advisor model's ceiling. */
  readonly maxTokens: bigint;
  /** The tool's `max_uses`; 0n = unlimited (bounded by the iteration limit). */
  readonly maxUses: bigint;
}

/** One entry of a text call's `fallbacks`. */
export interface FallbackSpec {
  /** A gateway model id. */
  readonly model: string;
  /** Its `max_tokens` override; 0n = the call's. */
  readonly maxTokens: bigint;
  /** Its `speed` override; undefined = the call's. */
  readonly speed: Speed | undefined;
}

/** A text call to price, as the Inference service describes it before running it. */
export interface TextCallSpec {
  readonly kind: "text";
  readonly model: string;
  /** An upper bound of the prompt's input tokens, all kinds together. */
  readonly inputTokens: bigint;
  /** The request's `max_tokens`, before clamping. */
  readonly maxTokens: bigint;
  readonly speed?: Speed;
  /** The request's `inference_geo`; undefined when absent (a workspace default may apply any). */
  readonly inferenceGeo?: string;
  /** A server tool can loop: the call may run up to the provider's iteration limit. */
  readonly serverToolLoop?: boolean;
  /** The web search tool's `max_uses`; 0n or undefined = no web search tool. */
  readonly webSearchMaxUses?: bigint;
  readonly advisor?: AdvisorSpec;
  /** Compaction (`context_management` with a `compact_*` edit) is on. */
  readonly compaction?: boolean;
  readonly fallbacks?: readonly FallbackSpec[];
  /** `fallbacks: "default"`: the provider picks one fallback model. */
  readonly defaultFallback?: boolean;
  /**
   * Held pass by pass: the call's hold quotes its first pass only (`firstPassPico`), and the
   * hold is raised at each pass boundary (docs/billing.md, "Holding pass by pass").
   */
  readonly passByPass?: boolean;
}

/** A call to price. */
export type CallSpec = TextCallSpec | ImageCallSpec;

/** An image call to price: `count` images of one model at one size. */
export interface ImageCallSpec {
  readonly kind: "image";
  readonly model: string;
  readonly size: string;
  readonly count: number;
}

/** Token counts of one sampling pass (or of a whole call). */
export interface TokenCounts {
  readonly inputTokens: bigint;
  readonly outputTokens: bigint;
  readonly cacheWrite5mTokens: bigint;
  readonly cacheWrite1hTokens: bigint;
  readonly cacheReadTokens: bigint;
}

/** The kinds of sampling pass the provider reports in `usage.iterations`. */
export type PassKind = "message" | "compaction" | "advisor" | "fallback" | "unknown";

/** One sampling pass as the provider reported it. */
export interface UsagePass extends TokenCounts {
  readonly kind: PassKind;
  /** A gateway model id, the provider's own name when it is not one, or "" for the call's model. */
  readonly model: string;
}

/**
 * What a call delivered. Images bill `images` only. Text calls bill `passes` when the provider
 * sent its per-pass record, else the top-level counts at `model`; then the fees of the server
 * tools. The top-level counts are what the provider reported at the top level.
 */
export interface DeliveredUsage extends TokenCounts {
  readonly images: number;
  /** The model that served the call (a gateway id, or the provider's name); "" = the call's model. */
  readonly model?: string;
  readonly passes?: readonly UsagePass[];
  readonly speed?: Speed;
  /** `usage.inference_geo`; "" or "global" = no residency multiplier. */
  readonly inferenceGeo?: string;
  readonly webSearchRequests?: bigint;
  readonly webFetchRequests?: bigint;
  /** Usage fields the reader did not know (e.g. `usage.server_tool_use.foo`): priced as nothing. */
  readonly unpriced?: readonly string[];
  /**
   * The configured provider endpoint that served the call (docs/providers.md): recorded with the
   * settlement, never priced — the gateway model's listed price applies whatever endpoint served.
   */
  readonly endpoint?: string;
}

/** One line of a priced call. */
export interface ChargeLine {
  readonly kind: "tokens" | "web_search" | "web_fetch";
  /** Token lines: the pass; "declined" is an attempt listed but not charged. */
  readonly pass: Exclude<PassKind, "unknown"> | "declined" | "";
  /** Token lines: the catalog model whose rates priced it. */
  readonly model: string;
  readonly tokens: TokenCounts | undefined;
  /** web_search / web_fetch: how many. */
  readonly quantity: bigint;
  readonly speed: Speed | "";
  /** Token lines: the residency multiplier, in basis points. */
  readonly multiplierBp: number;
  /** This line's exact price, in pico-dollars × 10,000 (a multiplier in basis points stays exact). */
  readonly scaled: bigint;
  readonly description: string;
}

/** A priced usage: every line, their exact total, and whatever could not be priced. */
export interface PricedUsage {
  readonly lines: readonly ChargeLine[];
  /** Σ lines, in pico-dollars × 10,000. */
  readonly scaled: bigint;
  /** The total in pico-dollars, rounded up (ceil of ceil is the one rounding of the call). */
  readonly pico: bigint;
  readonly unpriced: readonly string[];
}

/** A call resolved against the catalog: its prices are known and its inputs validated. */
export type PricedCall =
  | { readonly kind: "text"; readonly spec: TextCallSpec; readonly price: TextPrice }
  | { readonly kind: "image"; readonly price: ImagePrice; readonly size: ImageSize; readonly count: number };

/** Usage with every count zero: what a call that delivered nothing reports. */
export const NO_USAGE: DeliveredUsage = ZERO_USAGE;

/** More tokens than any context window: anything above is a caller bug, not a call. */
const MAX_TOKENS_PER_CALL = 1_000_000_000n;
const MAX_IMAGES_PER_CALL = 100;
/** More than any tool's sensible `max_uses`: bounds the worst case a request can ask for. */
export const MAX_TOOL_USES = 1_000n;
/** The provider accepts at most three fallback models. */
export const MAX_FALLBACKS = 3;
const BP = BigInt(BP_ONE);
/** Pico-dollars × 10,000 per micro-dollar. */
export const SCALED_PER_MICRO = PICO_PER_MICRO * BP;

/** Validates a call against the catalog; fails InvalidArgument naming the field at fault. */
export function priceCall(catalog: PriceCatalog, call: CallSpec): PricedCall {
  if (call.kind === "text") {
    const price = textPrice(catalog, call.model, "model");
    tokenCount("input_tokens", call.inputTokens);
    if (call.maxTokens < 1n || call.maxTokens > MAX_TOKENS_PER_CALL) {
      throw invalidField("max_tokens", `max_tokens must be between 1 and ${MAX_TOKENS_PER_CALL}.`);
    }
    checkSpeed(price, call.speed, "speed");
    const geo = call.inferenceGeo;
    if (geo !== undefined && geo !== "") {
      if (price.residency.size === 0) {
        throw invalidField("inference_geo", `inference_geo: ${price.model} does not take inference_geo.`);
      }
      if (geo !== "global" && !price.residency.has(geo)) {
        throw invalidField(
          "inference_geo",
          `inference_geo: must be one of global, ${[...price.residency.keys()].join(", ")}; got ${JSON.stringify(geo)}.`,
        );
      }
    }
    uses("tools.max_uses", call.webSearchMaxUses ?? 0n);
    if (call.advisor !== undefined) {
      textPrice(catalog, call.advisor.model, "tools.model");
      uses("tools.max_uses", call.advisor.maxUses);
      tokenCount("tools.max_tokens", call.advisor.maxTokens);
    }
    const fallbacks = call.fallbacks ?? [];
    if (fallbacks.length > MAX_FALLBACKS) {
      throw invalidField("fallbacks", `fallbacks names at most ${MAX_FALLBACKS} models.`);
    }
    fallbacks.forEach((fallback, i) => {
      const fallbackPrice = textPrice(catalog, fallback.model, `fallbacks.${i}.model`);
      checkSpeed(fallbackPrice, fallback.speed, `fallbacks.${i}.speed`);
      tokenCount(`fallbacks.${i}.max_tokens`, fallback.maxTokens);
    });
    return { kind: "text", spec: call, price };
  }
  const price = catalog.images.get(call.model);
  if (price === undefined) throw unknownModel(call.model, [...catalog.images.keys()], "model");
  const offered = IMAGE_SIZES.filter((s) => price.perImage.has(s));
  if (!isImageSize(call.size) || !price.perImage.has(call.size)) {
    throw reasonError(
      Code.InvalidArgument,
      "INVALID_FIELD",
      `${call.model} offers the sizes ${offered.join(", ")}; got ${JSON.stringify(call.size)}.`,
      { field: "size", allowed: offered.join(",") },
    );
  }
  if (!Number.isInteger(call.count) || call.count < 1 || call.count > MAX_IMAGES_PER_CALL) {
    throw invalidField("n", `The number of images must be between 1 and ${MAX_IMAGES_PER_CALL}.`);
  }
  return { kind: "image", price, size: call.size, count: call.count };
}

/**
 * The worst-case price of a call, in pico-dollars (rounded up). Images: the requested count at
 * the requested size. Text: the sum, for each attempt (the model, each fallback, or for
 * `"default"` the dearest catalog model), of its sampling passes — with a server tool, up to
 * the iteration limit L of them, the first reading the prompt and each later one a full context
 * window, each writing up to the attempt's clamped max_tokens — and, with compaction, L
 * summarising passes of a full window each; plus the advisor's calls (its max_uses, else L per
 * attempt) of a full advisor window and its max_tokens each; every input token at the dearest
 * input-side rate (normally the 1-hour cache write), at fast rates when any attempt asks for
 * fast mode, × the residency multiplier named (or the dearest the model offers when none is
 * named: a provider workspace default may apply it); plus max_uses web searches at their fee.
 * A charge for the same call never exceeds it, for any usage the provider may report within
 * these documented limits (docs/billing.md; test/billing/hold-bound.test.ts).
 */
export function quotePico(catalog: PriceCatalog, call: PricedCall): bigint {
  if (call.kind === "image") return BigInt(call.count) * call.price.perImage.get(call.size)! * PICO_PER_MICRO;
  return ceilDiv(worstCaseScaled(catalog, call.spec), BP);
}

function worstCaseScaled(catalog: PriceCatalog, spec: TextCallSpec): bigint {
  const loop = BigInt(spec.serverToolLoop === true ? catalog.serverToolIterationLimit : 1);
  const anyFast = spec.speed === "fast" || (spec.fallbacks ?? []).some((f) => f.speed === "fast");
  const speed: Speed = anyFast ? "fast" : "standard";
  const attempt = (price: TextPrice, maxTokens: bigint): bigint => {
    const rates = ratesAt(price, speed);
    const window = BigInt(price.contextWindow);
    const prompt = spec.inputTokens < window ? spec.inputTokens : window;
    const output = min(maxTokens, BigInt(price.maxOutputTokens));
    let pico = (prompt + (loop - 1n) * window) * dearestInput(rates) + loop * output * rates.output;
    if (spec.compaction === true) {
      pico += loop * (window * dearestInput(rates) + BigInt(price.maxOutputTokens) * rates.output);
    }
    return pico * geoBp(price, spec.inferenceGeo);
  };
  let scaled = attempt(catalog.text.get(spec.model)!, spec.maxTokens);
  let attempts = 1n;
  for (const fallback of spec.fallbacks ?? []) {
    scaled += attempt(
      catalog.text.get(fallback.model)!,
      fallback.maxTokens > 0n ? fallback.maxTokens : spec.maxTokens,
    );
    attempts += 1n;
  }
  if (spec.defaultFallback === true) {
    let dearest = 0n;
    for (const price of catalog.text.values()) dearest = max(dearest, attempt(price, spec.maxTokens));
    scaled += dearest;
    attempts += 1n;
  }
  if (spec.advisor !== undefined) {
    const price = catalog.text.get(spec.advisor.model)!;
    const rates = ratesAt(price, speed);
    const ceiling = BigInt(price.maxOutputTokens);
    const output = spec.advisor.maxTokens > 0n ? min(spec.advisor.maxTokens, ceiling) : ceiling;
    const calls = spec.advisor.maxUses > 0n ? spec.advisor.maxUses : loop * attempts;
    const perCall = BigInt(price.contextWindow) * dearestInput(rates) + output * rates.output;
    scaled += calls * perCall * geoBp(price, spec.inferenceGeo);
  }
  return scaled + (spec.webSearchMaxUses ?? 0n) * catalog.serverTools.webSearch * SCALED_PER_MICRO;
}

/**
 * The price of what a call delivered, line by line and exact. Images: each delivered image at
 * the requested size's price. Text, in the provider's documented order: each sampling pass at
 * its own model's rates (top-level counts at the serving model when there is no per-pass record;
 * an attempt that declined before any output is listed but not charged), at fast rates when the
 * call ran fast on a model that has them, × the residency multiplier of `usage.inference_geo`;
 * then each web search at its fee (web fetches are tokens only). What cannot be priced as
 * reported — an unknown model (priced at the dearest catalog model), geo (at the model's
 * dearest multiplier) or usage field (nothing) — is listed in `unpriced`.
 */
export function priceUsage(catalog: PriceCatalog, call: PricedCall, usage: DeliveredUsage): PricedUsage {
  if (call.kind === "image") {
    const scaled = BigInt(usage.images) * call.price.perImage.get(call.size)! * SCALED_PER_MICRO;
    return { lines: [], scaled, pico: ceilDiv(scaled, BP), unpriced: [] };
  }
  const unpriced = [...(usage.unpriced ?? [])];
  const lines: ChargeLine[] = [];
  const callModel = call.price.model;
  const passes: readonly UsagePass[] =
    usage.passes !== undefined && usage.passes.length > 0
      ? usage.passes
      : [{ ...usage, kind: "message", model: usage.model ?? "" }];
  const lastFallback = passes.findLastIndex((p) => p.kind === "fallback");
  passes.forEach((pass, i) => {
    const declined = pass.kind === "message" && i < lastFallback && pass.outputTokens === 0n;
    const name = pass.model === "" ? callModel : pass.model;
    let price = catalog.text.get(name);
    if (price === undefined) {
      unpriced.push(`usage.iterations.${i}.model`);
      price = dearestModel(catalog);
    }
    if (pass.kind === "unknown") unpriced.push(`usage.iterations.${i}.type`);
    // `usage.speed` is the call's: a pass on a model without fast mode (an advisor, a fallback) ran standard.
    const speed: Speed = usage.speed === "fast" && price.fast !== undefined ? "fast" : "standard";
    const multiplierBp = residencyBp(price, usage.inferenceGeo, unpriced);
    const rates = ratesAt(price, speed);
    const scaled = declined ? 0n : tokensPico(pass, rates) * BigInt(multiplierBp);
    const passName = declined ? "declined" : pass.kind === "unknown" ? "message" : pass.kind;
    lines.push({
      kind: "tokens",
      pass: passName,
      model: price.model,
      tokens: pass,
      quantity: 0n,
      speed,
      multiplierBp,
      scaled,
      description: tokenLineText(price, passName, speed, multiplierBp, usage.inferenceGeo ?? ""),
    });
  });
  const searches = usage.webSearchRequests ?? 0n;
  if (searches > 0n) {
    lines.push(feeLine("web_search", searches, catalog.serverTools.webSearch, "web search", "web searches"));
  }
  const fetches = usage.webFetchRequests ?? 0n;
  if (fetches > 0n) {
    lines.push(feeLine("web_fetch", fetches, catalog.serverTools.webFetch, "web fetch", "web fetches"));
  }
  const scaled = lines.reduce((sum, line) => sum + line.scaled, 0n);
  return { lines, scaled, pico: ceilDiv(scaled, BP), unpriced: [...new Set(unpriced)] };
}

/** Fails InvalidArgument when a usage report has a negative or absurd count. */
export function checkUsage(usage: DeliveredUsage): void {
  checkCounts("usage", usage);
  for (const [i, pass] of (usage.passes ?? []).entries()) checkCounts(`usage.iterations.${i}`, pass);
  if (usage.webSearchRequests !== undefined) uses("usage.web_search_requests", usage.webSearchRequests);
  if (usage.webFetchRequests !== undefined) uses("usage.web_fetch_requests", usage.webFetchRequests);
  if (!Number.isInteger(usage.images) || usage.images < 0 || usage.images > MAX_IMAGES_PER_CALL) {
    throw invalidField("usage.images", `usage.images must be between 0 and ${MAX_IMAGES_PER_CALL}.`);
  }
}

/** The sum of the token counts of every charged (non-declined) token line. */
export function chargedTokens(priced: PricedUsage): TokenCounts {
  const total = {
    inputTokens: 0n,
    outputTokens: 0n,
    cacheWrite5mTokens: 0n,
    cacheWrite1hTokens: 0n,
    cacheReadTokens: 0n,
  };
  for (const line of priced.lines) {
    if (line.tokens === undefined || line.pass === "declined") continue;
    total.inputTokens += line.tokens.inputTokens;
    total.outputTokens += line.tokens.outputTokens;
    total.cacheWrite5mTokens += line.tokens.cacheWrite5mTokens;
    total.cacheWrite1hTokens += line.tokens.cacheWrite1hTokens;
    total.cacheReadTokens += line.tokens.cacheReadTokens;
  }
  return total;
}

function tokensPico(t: TokenCounts, r: TokenRates): bigint {
  return (
    t.inputTokens * r.input +
    t.outputTokens * r.output +
    t.cacheWrite5mTokens * r.cacheWrite5m +
    t.cacheWrite1hTokens * r.cacheWrite1h +
    t.cacheReadTokens * r.cacheRead
  );
}

function feeLine(
  kind: "web_search" | "web_fetch",
  quantity: bigint,
  perUse: bigint,
  one: string,
  many: string,
): ChargeLine {
  const fee = perUse === 0n ? " (tokens only)" : "";
  return {
    kind,
    pass: "",
    model: "",
    tokens: undefined,
    quantity,
    speed: "",
    multiplierBp: BP_ONE,
    scaled: quantity * perUse * SCALED_PER_MICRO,
    description: `${quantity} ${quantity === 1n ? one : many}${fee}`,
  };
}

function tokenLineText(
  price: TextPrice,
  pass: ChargeLine["pass"],
  speed: Speed,
  multiplierBp: number,
  geo: string,
): string {
  const parts = [price.model, PASS_TEXT[pass]];
  if (speed === "fast" && price.fast !== undefined)
    parts.push(`fast mode ×${ratio(price.fast.output, price.output)}`);
  if (multiplierBp !== BP_ONE) parts.push(`${geo.toUpperCase()}-only ×${ratio(BigInt(multiplierBp), BP)}`);
  return parts.join(" · ");
}

const PASS_TEXT: Record<ChargeLine["pass"], string> = {
  message: "tokens",
  compaction: "compaction pass",
  advisor: "advisor call",
  fallback: "fallback attempt",
  declined: "declined attempt (not charged)",
  "": "",
};

/** a/b as a short decimal ("2", "1.1", "1.25"), for descriptions only. */
function ratio(a: bigint, b: bigint): string {
  const hundredths = (a * 100n) / b;
  const whole = hundredths / 100n;
  const fraction = (hundredths % 100n).toString().padStart(2, "0").replace(/0+$/, "");
  return fraction === "" ? `${whole}` : `${whole}.${fraction}`;
}

function residencyBp(price: TextPrice, geo: string | undefined, unpriced: string[]): number {
  if (geo === undefined || geo === "" || geo === "global") return BP_ONE;
  const multiplier = price.residency.get(geo);
  if (multiplier !== undefined) return multiplier;
  // A geo the catalog does not price for this model: its dearest known multiplier, and a flag.
  if (price.residency.size > 0) unpriced.push(`usage.inference_geo (${geo})`);
  return Math.max(BP_ONE, ...price.residency.values());
}

/** The multiplier a hold assumes: the named geo's, else the dearest the model offers. */
export function geoBp(price: TextPrice, geo: string | undefined): bigint {
  if (geo === undefined || geo === "") return BigInt(Math.max(BP_ONE, ...price.residency.values()));
  return BigInt(price.residency.get(geo) ?? BP_ONE);
}

/** A model's rates at a speed (standard when the model has no fast rates). */
export function ratesAt(price: TextPrice, speed: Speed): TokenRates {
  return speed === "fast" && price.fast !== undefined ? price.fast : price;
}

/** The dearest input-side rate (input, cache read, either cache write): what a hold reads at. */
export function dearestInput(r: TokenRates): bigint {
  return max(max(r.input, r.cacheRead), max(r.cacheWrite5m, r.cacheWrite1h));
}

/** The catalog's dearest text model by output rate: the price of a model the catalog lacks. */
function dearestModel(catalog: PriceCatalog): TextPrice {
  let dearest: TextPrice | undefined;
  for (const price of catalog.text.values()) {
    if (dearest === undefined || ratesAt(price, "fast").output > ratesAt(dearest, "fast").output)
      dearest = price;
  }
  return dearest!;
}

function textPrice(catalog: PriceCatalog, model: string, field: string): TextPrice {
  const price = catalog.text.get(model);
  if (price === undefined) throw unknownModel(model, [...catalog.text.keys()], field);
  return price;
}

function checkSpeed(price: TextPrice, speed: Speed | undefined, field: string): void {
  if (speed === "fast" && price.fast === undefined) {
    throw invalidField(field, `${field}: ${price.model} does not offer fast mode.`);
  }
}

function checkCounts(path: string, t: TokenCounts): void {
  tokenCount(`${path}.input_tokens`, t.inputTokens);
  tokenCount(`${path}.output_tokens`, t.outputTokens);
  tokenCount(`${path}.cache_write_5m_tokens`, t.cacheWrite5mTokens);
  tokenCount(`${path}.cache_write_1h_tokens`, t.cacheWrite1hTokens);
  tokenCount(`${path}.cache_read_tokens`, t.cacheReadTokens);
}

function uses(field: string, value: bigint): void {
  if (value < 0n || value > MAX_TOOL_USES) {
    throw invalidField(field, `${field} must be between 0 and ${MAX_TOOL_USES}.`);
  }
}

function tokenCount(field: string, value: bigint): void {
  if (value < 0n || value > MAX_TOKENS_PER_CALL) {
    throw invalidField(field, `${field} must be between 0 and ${MAX_TOKENS_PER_CALL}.`);
  }
}

function unknownModel(model: string, known: string[], field: string) {
  return reasonError(Code.InvalidArgument, "INVALID_FIELD", `Unknown model ${JSON.stringify(model)}.`, {
    field,
    allowed: known.join(","),
  });
}

/** a / b rounded up (a ≥ 0, b > 0). */
export function ceilDiv(a: bigint, b: bigint): bigint {
  return (a + b - 1n) / b;
}

function min(a: bigint, b: bigint): bigint {
  return a < b ? a : b;
}

function max(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}
