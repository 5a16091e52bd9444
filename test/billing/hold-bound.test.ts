import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { defaultPriceCatalog } from "../../src/core/billing/default-catalog.js";
import { picoToUnits } from "../../src/core/billing/money.js";
import type { TextPrice } from "../../src/core/billing/price-catalog.js";
import {
  type DeliveredUsage,
  type FallbackSpec,
  NO_USAGE,
  type PassKind,
  priceCall,
  priceUsage,
  quotePico,
  type Speed,
  type TextCallSpec,
  type UsagePass,
} from "../../src/core/billing/pricing.js";
import { type Rng, rng } from "./prng.js";

// The hold covers every usage the provider may report within its documented limits
// (docs/billing.md, "The hold"): random requests with fast mode, residency, web search,
// advisor, compaction, fallbacks and server-tool loops, each answered by a random usage drawn
// within those limits — every pass at most a context window of input and the attempt's
// max_tokens of output, at most the iteration limit of passes per attempt, declined attempts
// with no output, searches up to max_uses. The charge never exceeds the hold.

const catalog = defaultPriceCatalog();
const models = [...catalog.text.values()];
const L = catalog.serverToolIterationLimit;

/**
 * Draws values: the request from fast-check's generator (so a failure shrinks to a small
 * request), the usage from a PRNG seeded by it (a usage is hundreds of draws, which fast-check's
 * recorded generator makes quadratic).
 */
interface Draw {
  int(min: number, max: number): number;
  bool(): boolean;
}

function fromGen(g: fc.GeneratorValue): Draw {
  return { int: (min, max) => g(fc.integer, { min, max }), bool: () => g(fc.boolean) };
}

function fromRng(r: Rng): Draw {
  return { int: (min, max) => min + r.int(max - min + 1), bool: () => r.int(2) === 1 };
}

function pick<T>(g: Draw, items: readonly T[]): T {
  return items[g.int(0, items.length - 1)]!;
}

function big(g: Draw, max: number): bigint {
  return BigInt(g.int(0, max));
}

/** A random request's billable features, valid against the catalog. */
function drawSpec(g: Draw): TextCallSpec {
  const price = pick(g, models);
  const speed: Speed | undefined = price.fast !== undefined && g.bool() ? "fast" : undefined;
  const geos = ["global", ...price.residency.keys()];
  const inferenceGeo = price.residency.size > 0 && g.bool() ? pick(g, geos) : undefined;
  const webSearch = g.bool() ? BigInt(g.int(1, 10)) : 0n;
  const advisorPrice = g.bool() ? pick(g, models) : undefined;
  const serverToolLoop = webSearch > 0n || advisorPrice !== undefined || g.bool();
  const fallbackCount = g.int(0, 3);
  const fallbacks: FallbackSpec[] = [];
  for (let i = 0; i < fallbackCount; i++) {
    const fallback = pick(g, models);
    fallbacks.push({
      model: fallback.model,
      maxTokens: g.bool() ? BigInt(g.int(1, 200_000)) : 0n,
      speed: fallback.fast !== undefined && g.bool() ? "fast" : undefined,
    });
  }
  return {
    kind: "text",
    model: price.model,
    inputTokens: big(g, 1_500_000),
    maxTokens: BigInt(g.int(1, 200_000)),
    speed,
    inferenceGeo,
    serverToolLoop,
    webSearchMaxUses: webSearch,
    advisor:
      advisorPrice === undefined
        ? undefined
        : {
            model: advisorPrice.model,
            maxTokens: g.bool() ? BigInt(g.int(1024, 200_000)) : 0n,
            maxUses: g.bool() ? BigInt(g.int(1, 5)) : 0n,
          },
    compaction: g.bool(),
    fallbacks: fallbackCount > 0 ? fallbacks : [],
    defaultFallback: fallbackCount === 0 && g.bool(),
  };
}

/** `total` input-side tokens split at random over the four input kinds. */
function inputSide(g: Draw, total: bigint) {
  const cuts = [big(g, Number(total)), big(g, Number(total)), big(g, Number(total))].sort((a, b) =>
    a < b ? -1 : 1,
  ) as [bigint, bigint, bigint];
  return {
    inputTokens: cuts[0],
    cacheWrite5mTokens: cuts[1] - cuts[0],
    cacheWrite1hTokens: cuts[2] - cuts[1],
    cacheReadTokens: total - cuts[2],
  };
}

function pass(g: Draw, kind: PassKind, model: string, maxInput: bigint, maxOutput: bigint): UsagePass {
  return {
    kind,
    model,
    ...inputSide(g, big(g, Number(maxInput))),
    outputTokens: big(g, Number(maxOutput)),
  };
}

function min(a: bigint, b: bigint): bigint {
  return a < b ? a : b;
}

/** A usage the provider may report for `spec` within its documented limits. */
function drawUsage(g: Draw, spec: TextCallSpec): DeliveredUsage {
  const primary = catalog.text.get(spec.model)!;
  const attempts: { price: TextPrice; maxTokens: bigint }[] = [{ price: primary, maxTokens: spec.maxTokens }];
  for (const f of spec.fallbacks ?? []) {
    attempts.push({
      price: catalog.text.get(f.model)!,
      maxTokens: f.maxTokens > 0n ? f.maxTokens : spec.maxTokens,
    });
  }
  if (spec.defaultFallback === true) attempts.push({ price: pick(g, models), maxTokens: spec.maxTokens });
  const ran = g.int(1, attempts.length);
  const loop = spec.serverToolLoop === true ? L : 1;
  const passes: UsagePass[] = [];
  for (let a = 0; a < ran; a++) {
    const { price, maxTokens } = attempts[a]!;
    const window = BigInt(price.contextWindow);
    const output = min(maxTokens, BigInt(price.maxOutputTokens));
    const declined = a < ran - 1 && g.bool();
    const kind: PassKind = a === ran - 1 && ran > 1 ? "fallback" : "message";
    const iterations = declined ? 1 : g.int(1, loop);
    for (let i = 0; i < iterations; i++) {
      if (spec.compaction === true && g.bool()) {
        passes.push(pass(g, "compaction", price.model, window, BigInt(price.maxOutputTokens)));
      }
      const p = pass(g, kind, price.model, i === 0 ? min(spec.inputTokens, window) : window, output);
      passes.push(declined ? { ...p, outputTokens: 0n } : p);
    }
  }
  if (spec.advisor !== undefined) {
    const advisor = catalog.text.get(spec.advisor.model)!;
    const ceiling = BigInt(advisor.maxOutputTokens);
    const output = spec.advisor.maxTokens > 0n ? min(spec.advisor.maxTokens, ceiling) : ceiling;
    const most = spec.advisor.maxUses > 0n ? Number(spec.advisor.maxUses) : loop * attempts.length;
    const calls = g.int(0, most);
    for (let i = 0; i < calls; i++) {
      passes.push(pass(g, "advisor", advisor.model, BigInt(advisor.contextWindow), output));
    }
  }
  const anyFast = spec.speed === "fast" || (spec.fallbacks ?? []).some((f) => f.speed === "fast");
  const serving = attempts[ran - 1]!.price;
  const geos = spec.inferenceGeo ?? pick(g, ["global", ...serving.residency.keys()]);
  return {
    ...NO_USAGE,
    model: serving.model,
    passes,
    speed: anyFast && g.bool() ? "fast" : "standard",
    inferenceGeo: geos,
    webSearchRequests: big(g, Number(spec.webSearchMaxUses ?? 0n)),
    webFetchRequests: big(g, 5),
  };
}

describe("the hold covers any usage the provider may report for the request", () => {
  it("charge ≤ hold for random requests with every billable feature (fast-check, seeded)", () => {
    fc.assert(
      fc.property(fc.gen(), fc.integer(), (g, seed) => {
        const spec = drawSpec(fromGen(g));
        const priced = priceCall(catalog, spec);
        const usage = drawUsage(fromRng(rng(seed)), spec);
        const charge = priceUsage(catalog, priced, usage);
        const hold = quotePico(catalog, priced);
        expect(charge.unpriced).toEqual([]);
        expect(charge.pico <= hold).toBe(true);
        // In ledger units too (one rounding up each, so the order is kept).
        expect(picoToUnits(charge.pico, 6) <= picoToUnits(hold, 6)).toBe(true);
      }),
      { numRuns: 3000, seed: 20261124 },
    );
  });

  it("the worst case is reached: a usage at every bound prices exactly at the hold", () => {
    // Opus 4.8, fast, US-only named, one server tool: 10 passes, each a full window of 1-hour
    // writes (the first only the prompt) and max_tokens of output; 4 searches.
    const spec: TextCallSpec = {
      kind: "text",
      model: "model-opus-4-8",
      inputTokens: 20_000n,
      maxTokens: 1_000n,
      speed: "fast",
      inferenceGeo: "us",
      serverToolLoop: true,
      webSearchMaxUses: 4n,
    };
    const priced = priceCall(catalog, spec);
    const passes: UsagePass[] = Array.from({ length: L }, (_, i) => ({
      kind: "message",
      model: "model-opus-4-8",
      inputTokens: 0n,
      cacheWrite5mTokens: 0n,
      cacheWrite1hTokens: i === 0 ? 20_000n : 1_000_000n,
      cacheReadTokens: 0n,
      outputTokens: 1_000n,
    }));
    const usage: DeliveredUsage = {
      ...NO_USAGE,
      passes,
      speed: "fast",
      inferenceGeo: "us",
      webSearchRequests: 4n,
    };
    const charge = priceUsage(catalog, priced, usage).pico;
    // ((20,000 + 9 × 1,000,000) × $20 + 10 × 1,000 × $50) × 1.1 + 4 × $0.01
    //  = (180.4 + 0.5) × 1.1 + 0.04 = $199.03 = 199,030,000 µ$.
    expect(picoToUnits(charge, 6)).toBe(199_030_000n);
    expect(charge).toBe(quotePico(catalog, priced));
  });
});
