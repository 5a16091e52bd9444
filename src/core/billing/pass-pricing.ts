import { BP_ONE, type PriceCatalog, type TextPrice } from "./price-catalog.js";
import {
  ceilDiv,
  dearestInput,
  geoBp,
  type PricedCall,
  ratesAt,
  SCALED_PER_MICRO,
  type Speed,
  type TextCallSpec,
} from "./pricing.js";

/**
 * The worst case of a multi-pass call pass by pass, for holding its first pass and raising the
 * hold at each pass boundary the stream shows (docs/billing.md, "Raises"), instead of holding
 * every pass the call may run before the first byte (`quotePico`).
 *
 * A *stretch* is the provider work between two boundaries the gateway can see: one sampling pass
 * (reading the context so far, writing up to the attempt's clamped `max_tokens`), preceded, when
 * compaction is on, by the compaction pass the provider may run before it (reading the same
 * context, writing up to the model's output ceiling: compaction shows in the stream only once it
 * has run, so the stretch that contains it pays for it, and a compaction block is no raise
 * point). Each input token is held at the dearest input-side rate, at fast rates when any attempt
 * asks for fast mode, × the residency multiplier the hold assumes — as `quotePico` does, so
 * that the charge `priceUsage` computes for the same passes never exceeds what was held.
 *
 * Web search fees are all the first pass's: `max_uses` caps the call's searches, and one pass can
 * start all of them at once (parallel `server_tool_use` blocks) before the gateway sees the first
 * block, so the first hold covers `max_uses` × the fee and later stretches add none.
 *
 * Long context: the catalog prices every token of a pass at one rate whatever its length (the
 * provider bills the 1M window of its 4.6-and-later models at their standard rates, and the
 * catalog's 200k-window model cannot pass 200k), so a stretch that can read past 200k tokens is
 * held at the same rates, up to the model's context window. A catalog with long-context rates
 * would need them here and in `priceUsage` alike.
 *
 * All amounts are pico-dollars (rounded up once per stretch), integers throughout.
 */

/** A text call resolved against the catalog (`priceCall`). */
export type PricedTextCall = Extract<PricedCall, { readonly kind: "text" }>;

/**
 * A pass boundary the gateway saw in the stream, and what the next stretch can read. `attempt`
 * is the attempt the next stretch runs in: 0 for the requested model, i for `fallbacks[i − 1]`,
 * and `fallbacks.length + 1` for the provider's own pick under `fallbacks: "default"`.
 * `contextTokens` bounds what the conversation holds when the boundary is seen: the prompt bound,
 * plus every earlier pass's output (what was delivered, or its `max_tokens`) and every tool
 * result seen (its size in the stream, tokens ≤ UTF-8 bytes, or the model's window).
 */
export type PassBoundary =
  /**
   * A `server_tool_use` block of a tool the provider runs (web search, web fetch, tool search,
   * an MCP tool): the tool runs, then the next stretch reads the context plus the tool's result,
   * whose size `resultTokens` bounds when known (undefined: up to the model's context window).
   */
  | {
      readonly kind: "tool";
      readonly attempt: number;
      readonly contextTokens: bigint;
      readonly resultTokens?: bigint | undefined;
    }
  /**
   * A `server_tool_use` block calling the advisor: the advisor model reads the context and
   * answers (up to the tool's `max_tokens`, else its ceiling, at its own rates), then the next
   * stretch reads the context plus that answer.
   */
  | { readonly kind: "advisor"; readonly attempt: number; readonly contextTokens: bigint }
  /** A fallback hop: attempt `attempt` (≥ 1) starts over from the prompt, at its own model. */
  | { readonly kind: "fallback"; readonly attempt: number };

const BP = BigInt(BP_ONE);

/**
 * The worst case of a multi-pass call's first pass, in pico-dollars: the first stretch of the
 * requested model (the prompt bound read, its clamped `max_tokens` written, a compaction pass
 * before it when compaction is on) plus every web search the call may make (`max_uses` × the
 * fee). What to hold before the call is forwarded; never more than `quotePico` of the same call.
 */
export function firstPassPico(catalog: PriceCatalog, call: PricedTextCall): bigint {
  const { spec } = call;
  const scaled =
    stretchScaled(spec, call.price, spec.maxTokens, () => spec.inputTokens) + searchFeesScaled(catalog, spec);
  return ceilDiv(scaled, BP);
}

/**
 * The worst case of the stretch a pass boundary starts, in pico-dollars: what to raise the hold
 * by before relaying the block that shows the boundary.
 * - `tool`: the next stretch reads min(context + result, window) (the window when the result's
 *   size is unknown).
 * - `advisor`: the advisor's call, reading min(context, the advisor's window), plus the next
 *   stretch, reading min(context + the advisor's answer, window).
 * - `fallback`: the attempt's first stretch, from the prompt bound, at its model (the dearest
 *   catalog model's stretch for the provider's own pick).
 * Throws a RangeError for an attempt the call does not have, negative token counts, or an
 * advisor boundary on a call without the advisor tool: the caller's bug, not a caller's input.
 */
export function nextPassPico(catalog: PriceCatalog, call: PricedTextCall, boundary: PassBoundary): bigint {
  const { spec } = call;
  if (boundary.kind === "fallback") {
    if (boundary.attempt < 1) throw new RangeError("a fallback hop starts attempt 1 or later");
    return ceilDiv(
      attemptScaled(catalog, call, boundary.attempt, (price, maxTokens) =>
        stretchScaled(spec, price, maxTokens, () => spec.inputTokens),
      ),
      BP,
    );
  }
  const context = boundary.contextTokens;
  if (context < 0n) throw new RangeError("contextTokens must be ≥ 0");
  if (boundary.kind === "tool") {
    const result = boundary.resultTokens;
    if (result !== undefined && result < 0n) throw new RangeError("resultTokens must be ≥ 0");
    return ceilDiv(
      attemptScaled(catalog, call, boundary.attempt, (price, maxTokens) =>
        stretchScaled(spec, price, maxTokens, (window) => (result === undefined ? window : context + result)),
      ),
      BP,
    );
  }
  const advisor = spec.advisor;
  if (advisor === undefined) throw new RangeError("an advisor boundary on a call without the advisor tool");
  const price = catalog.text.get(advisor.model);
  if (price === undefined) throw new RangeError(`the advisor model ${advisor.model} is not in the catalog`);
  const rates = ratesAt(price, holdSpeed(spec));
  const ceiling = BigInt(price.maxOutputTokens);
  const answer = advisor.maxTokens > 0n && advisor.maxTokens < ceiling ? advisor.maxTokens : ceiling;
  const advice =
    (min(context, BigInt(price.contextWindow)) * dearestInput(rates) + answer * rates.output) *
    geoBp(price, spec.inferenceGeo);
  const next = attemptScaled(catalog, call, boundary.attempt, (attemptPrice, maxTokens) =>
    stretchScaled(spec, attemptPrice, maxTokens, () => context + answer),
  );
  return ceilDiv(advice + next, BP);
}

/**
 * `stretch` at attempt `attempt`'s model and `max_tokens` (pico-dollars × 10,000); for the
 * provider's own fallback pick, the dearest stretch any catalog model could run.
 */
function attemptScaled(
  catalog: PriceCatalog,
  call: PricedTextCall,
  attempt: number,
  stretch: (price: TextPrice, maxTokens: bigint) => bigint,
): bigint {
  const { spec } = call;
  const fallbacks = spec.fallbacks ?? [];
  if (!Number.isInteger(attempt) || attempt < 0) throw new RangeError(`no attempt ${attempt}`);
  if (attempt === 0) return stretch(call.price, spec.maxTokens);
  if (attempt <= fallbacks.length) {
    const fallback = fallbacks[attempt - 1]!;
    const price = catalog.text.get(fallback.model);
    if (price === undefined)
      throw new RangeError(`the fallback model ${fallback.model} is not in the catalog`);
    return stretch(price, fallback.maxTokens > 0n ? fallback.maxTokens : spec.maxTokens);
  }
  if (attempt === fallbacks.length + 1 && spec.defaultFallback === true) {
    let dearest = 0n;
    for (const price of catalog.text.values()) dearest = max(dearest, stretch(price, spec.maxTokens));
    return dearest;
  }
  throw new RangeError(`no attempt ${attempt}`);
}

/**
 * One stretch at `price` (pico-dollars × 10,000): the sampling pass, reading min(`reads(window)`,
 * window) and writing min(`maxTokens`, the model's ceiling), and with compaction the compaction
 * pass before it, reading as much and writing up to the ceiling.
 */
function stretchScaled(
  spec: TextCallSpec,
  price: TextPrice,
  maxTokens: bigint,
  reads: (window: bigint) => bigint,
): bigint {
  const rates = ratesAt(price, holdSpeed(spec));
  const window = BigInt(price.contextWindow);
  const ceiling = BigInt(price.maxOutputTokens);
  const input = min(reads(window), window) * dearestInput(rates);
  let pico = input + min(maxTokens, ceiling) * rates.output;
  if (spec.compaction === true) pico += input + ceiling * rates.output;
  return pico * geoBp(price, spec.inferenceGeo);
}

/** Every web search the call may make, at the fee (pico-dollars × 10,000). */
function searchFeesScaled(catalog: PriceCatalog, spec: TextCallSpec): bigint {
  return (spec.webSearchMaxUses ?? 0n) * catalog.serverTools.webSearch * SCALED_PER_MICRO;
}

/**
 * The speed every pass is held at: fast when any attempt asks for it, since the charge prices
 * each pass at the call's reported speed (`priceUsage`), whichever attempt it belongs to.
 */
function holdSpeed(spec: TextCallSpec): Speed {
  return spec.speed === "fast" || (spec.fallbacks ?? []).some((f) => f.speed === "fast")
    ? "fast"
    : "standard";
}

function min(a: bigint, b: bigint): bigint {
  return a < b ? a : b;
}

function max(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}
