import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { defaultPriceCatalog } from "../../src/core/billing/default-catalog.js";
import { picoToUnits } from "../../src/core/billing/money.js";
import {
  firstPassPico,
  nextPassPico,
  type PassBoundary,
  type PricedTextCall,
} from "../../src/core/billing/pass-pricing.js";
import type { TextPrice } from "../../src/core/billing/price-catalog.js";
import {
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

// Holding pass by pass never holds less than the call is charged: random multi-pass requests
// (server tools, advisor, compaction, fallbacks, fast mode, residency) run a random loop whose
// every stretch reads at most what its boundary said it could (the context so far, plus the
// tool's result when its size was known, else the window) — the hold placed for the first
// pass, raised at each boundary by nextPassPico — and the charge of what they report never
// exceeds the hold with its raises, in pico-dollars and in ledger units (each raise rounded up on
// its own). And the raises of a loop run to the provider's limit never add up to more than the
// whole-call hold held today (quotePico), give or take one pico-dollar of rounding per raise.

const catalog = defaultPriceCatalog();
const models = [...catalog.text.values()];
const L = catalog.serverToolIterationLimit;

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

function big(g: Draw, max: bigint): bigint {
  return BigInt(g.int(0, Number(max)));
}

function min(a: bigint, b: bigint): bigint {
  return a < b ? a : b;
}

/** A random multi-pass request, valid against the catalog. */
function drawSpec(g: Draw): TextCallSpec {
  const price = pick(g, models);
  const fallbacks: FallbackSpec[] = [];
  for (let i = g.int(0, 3); i > 0; i--) {
    const fallback = pick(g, models);
    fallbacks.push({
      model: fallback.model,
      maxTokens: g.bool() ? BigInt(g.int(1, 200_000)) : 0n,
      speed: fallback.fast !== undefined && g.bool() ? "fast" : undefined,
    });
  }
  const advisor = g.bool() ? pick(g, models) : undefined;
  return {
    kind: "text",
    model: price.model,
    inputTokens: BigInt(g.int(0, 1_500_000)),
    maxTokens: BigInt(g.int(1, 200_000)),
    speed: price.fast !== undefined && g.bool() ? "fast" : undefined,
    inferenceGeo:
      price.residency.size > 0 && g.bool() ? pick(g, ["global", ...price.residency.keys()]) : undefined,
    serverToolLoop: true,
    webSearchMaxUses: g.bool() ? BigInt(g.int(1, 10)) : 0n,
    advisor:
      advisor === undefined
        ? undefined
        : {
            model: advisor.model,
            maxTokens: g.bool() ? BigInt(g.int(1024, 200_000)) : 0n,
            maxUses: g.bool() ? BigInt(g.int(1, 5)) : 0n,
          },
    compaction: g.bool(),
    fallbacks,
    defaultFallback: fallbacks.length === 0 && g.bool(),
  };
}

/** `total` input-side tokens split at random over the four input kinds. */
function inputSide(g: Draw, total: bigint) {
  const cuts = [big(g, total), big(g, total), big(g, total)].sort((a, b) => (a < b ? -1 : 1)) as [
    bigint,
    bigint,
    bigint,
  ];
  return {
    inputTokens: cuts[0],
    cacheWrite5mTokens: cuts[1] - cuts[0],
    cacheWrite1hTokens: cuts[2] - cuts[1],
    cacheReadTokens: total - cuts[2],
  };
}

/** Up to `max`, and often exactly `max`: a run at its bounds must still be covered. */
function upTo(g: Draw, max: bigint): bigint {
  return g.bool() ? max : big(g, max);
}

/**
 * A pass that read at most `maxInput` tokens and wrote at most `maxOutput`; often at both bounds,
 * every input token a 1-hour cache write (the dearest), so that a stretch held too low shows.
 */
function pass(g: Draw, kind: PassKind, model: string, maxInput: bigint, maxOutput: bigint): UsagePass {
  const input = upTo(g, maxInput);
  const side = g.bool()
    ? { inputTokens: 0n, cacheWrite5mTokens: 0n, cacheWrite1hTokens: input, cacheReadTokens: 0n }
    : inputSide(g, input);
  return { kind, model, ...side, outputTokens: upTo(g, maxOutput) };
}

/** The attempts a spec may run: the model, each fallback, or the provider's pick. */
function attemptsOf(g: Draw, spec: TextCallSpec): { price: TextPrice; maxTokens: bigint }[] {
  const attempts = [{ price: catalog.text.get(spec.model)!, maxTokens: spec.maxTokens }];
  for (const f of spec.fallbacks ?? []) {
    attempts.push({
      price: catalog.text.get(f.model)!,
      maxTokens: f.maxTokens > 0n ? f.maxTokens : spec.maxTokens,
    });
  }
  if (spec.defaultFallback === true) attempts.push({ price: pick(g, models), maxTokens: spec.maxTokens });
  return attempts;
}

/**
 * A random run of `spec`, pass by pass: what was held (the first pass, then each raise, in
 * pico-dollars) and what the provider reports, every pass within what its raise allowed for.
 */
function drawRun(g: Draw, spec: TextCallSpec): { holds: bigint[]; passes: UsagePass[] } {
  const call = priceCall(catalog, spec) as PricedTextCall;
  const holds = [firstPassPico(catalog, call)];
  const passes: UsagePass[] = [];
  const attempts = attemptsOf(g, spec);
  const ran = g.int(1, attempts.length);
  let advice = 0n;
  for (let a = 0; a < ran; a++) {
    const { price, maxTokens } = attempts[a]!;
    if (a > 0) holds.push(nextPassPico(catalog, call, { kind: "fallback", attempt: a }));
    const window = BigInt(price.contextWindow);
    const ceiling = BigInt(price.maxOutputTokens);
    const output = min(maxTokens, ceiling);
    const declined = a < ran - 1 && g.bool();
    const kind: PassKind = a === ran - 1 && ran > 1 ? "fallback" : "message";
    // What the conversation holds (a bound), and what the next stretch may read.
    let context = spec.inputTokens;
    let reads = spec.inputTokens;
    for (let i = 0, stretches = declined ? 1 : g.int(1, L); i < stretches; i++) {
      if (i > 0) {
        const advisor = spec.advisor;
        const mayAdvise = advisor !== undefined && (advisor.maxUses === 0n || advice < advisor.maxUses);
        if (mayAdvise && g.bool()) {
          const boundary: PassBoundary = { kind: "advisor", attempt: a, contextTokens: context };
          holds.push(nextPassPico(catalog, call, boundary));
          const adviser = catalog.text.get(advisor.model)!;
          const adviserCeiling = BigInt(adviser.maxOutputTokens);
          const answer = advisor.maxTokens > 0n ? min(advisor.maxTokens, adviserCeiling) : adviserCeiling;
          const p = pass(g, "advisor", adviser.model, min(context, BigInt(adviser.contextWindow)), answer);
          passes.push(p);
          advice += 1n;
          reads = context + p.outputTokens;
        } else {
          const result = g.bool() ? undefined : big(g, 400_000n);
          const boundary: PassBoundary = {
            kind: "tool",
            attempt: a,
            contextTokens: context,
            resultTokens: result,
          };
          holds.push(nextPassPico(catalog, call, boundary));
          reads = result === undefined ? window : context + upTo(g, result);
        }
      }
      if (spec.compaction === true && g.bool()) {
        passes.push(pass(g, "compaction", price.model, min(reads, window), ceiling));
      }
      const p = pass(g, kind, price.model, min(reads, window), output);
      passes.push(declined ? { ...p, outputTokens: 0n } : p);
      context = reads + p.outputTokens;
    }
  }
  return { holds, passes };
}

describe("holding pass by pass covers what a multi-pass call is charged", () => {
  it("charge ≤ the first pass and its raises, for random requests and runs (fast-check, seeded)", () => {
    fc.assert(
      fc.property(fc.gen(), fc.integer(), (gen, seed) => {
        const spec = drawSpec(fromGen(gen));
        const g = fromRng(rng(seed));
        const { holds, passes } = drawRun(g, spec);
        const anyFast = spec.speed === "fast" || (spec.fallbacks ?? []).some((f) => f.speed === "fast");
        const serving = catalog.text.get(spec.model)!;
        const speed: Speed = anyFast && (g.bool() || g.bool()) ? "fast" : "standard";
        const charge = priceUsage(catalog, priceCall(catalog, spec), {
          ...NO_USAGE,
          passes,
          speed,
          inferenceGeo: spec.inferenceGeo ?? pick(g, ["global", ...serving.residency.keys()]),
          webSearchRequests: upTo(g, spec.webSearchMaxUses ?? 0n),
          webFetchRequests: big(g, 5n),
        });
        expect(charge.unpriced).toEqual([]);
        expect(charge.pico <= holds.reduce((a, b) => a + b, 0n)).toBe(true);
        const units = holds.reduce((sum, h) => sum + picoToUnits(h, 6), 0n);
        expect(picoToUnits(charge.pico, 6) <= units).toBe(true);
      }),
      { numRuns: 2000, seed: 20261201 },
    );
  });

  it("a loop raised to the provider's limit holds no more than today's whole-call hold (one pico-dollar of rounding per raise)", () => {
    fc.assert(
      fc.property(fc.gen(), (gen) => {
        const g = fromGen(gen);
        const spec = drawSpec(g);
        const call = priceCall(catalog, spec) as PricedTextCall;
        const attempts = 1 + (spec.fallbacks ?? []).length + (spec.defaultFallback === true ? 1 : 0);
        let advice = 0n;
        const holds = [firstPassPico(catalog, call)];
        for (let a = 0; a < attempts; a++) {
          if (a > 0) holds.push(nextPassPico(catalog, call, { kind: "fallback", attempt: a }));
          for (let i = 1; i < L; i++) {
            const advisor = spec.advisor;
            const advise = advisor !== undefined && (advisor.maxUses === 0n || advice < advisor.maxUses);
            if (advise) advice += 1n;
            // The worst a boundary can say: the whole window read, by a tool's unknown result or the advisor.
            const boundary: PassBoundary = advise
              ? { kind: "advisor", attempt: a, contextTokens: 100_000_000n }
              : { kind: "tool", attempt: a, contextTokens: 100_000_000n };
            holds.push(nextPassPico(catalog, call, boundary));
          }
        }
        const total = holds.reduce((x, y) => x + y, 0n);
        expect(total <= quotePico(catalog, call) + BigInt(holds.length)).toBe(true);
      }),
      { numRuns: 2000, seed: 20261202 },
    );
  });
});
