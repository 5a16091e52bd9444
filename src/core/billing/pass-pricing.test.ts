import { describe, expect, it } from "vitest";
import { defaultPriceCatalog } from "./default-catalog.js";
import { firstPassPico, nextPassPico, type PassBoundary, type PricedTextCall } from "./pass-pricing.js";
import { priceCall, quotePico, type TextCallSpec } from "./pricing.js";

// The worst case of a multi-pass call, pass by pass, on the shipped prices. Rates are µ$ per
// million tokens, so a token costs its rate in pico-dollars: Sonnet 4.6 reads at $6/MTok (the
// 1-hour cache write, its dearest input-side rate) and writes at $15/MTok, × 1.1 when the request
// names no inference_geo (a workspace default may apply US-only).

const catalog = defaultPriceCatalog();
const priced = (spec: TextCallSpec) => priceCall(catalog, spec) as PricedTextCall;
const next = (spec: TextCallSpec, boundary: PassBoundary) => nextPassPico(catalog, priced(spec), boundary);

/** Claude Code's WebSearch sub-request, roughly: a 20k-token prompt, 32k max_tokens, 8 searches. */
const SEARCH: TextCallSpec = {
  kind: "text",
  model: "model-sonnet-4-6",
  inputTokens: 20_000n,
  maxTokens: 32_000n,
  serverToolLoop: true,
  webSearchMaxUses: 8n,
};
const $ = (dollars: number) => BigInt(Math.round(dollars * 1e6)) * 1_000_000n;

describe("the first pass", () => {
  it("is the prompt bound read, max_tokens written, and every search the call may make", () => {
    // (20,000 × $6 + 32,000 × $15) / 1M × 1.1 + 8 × $0.01 = $0.66 + $0.08.
    expect(firstPassPico(catalog, priced(SEARCH))).toBe($(0.74));
    // Against $64.89 for every pass the loop may run, held today.
    expect(quotePico(catalog, priced(SEARCH))).toBe($(64.892));
  });

  it("is today's hold of the same call without its loop, when nothing else adds a pass", () => {
    for (const spec of [
      SEARCH,
      { ...SEARCH, inferenceGeo: "global" },
      { ...SEARCH, model: "model-opus-4-8", speed: "fast" as const, webSearchMaxUses: 0n },
      { ...SEARCH, model: "model-haiku-4-5", inputTokens: 500_000n, maxTokens: 100_000n },
    ]) {
      expect(firstPassPico(catalog, priced(spec))).toBe(
        quotePico(catalog, priced({ ...spec, serverToolLoop: false })),
      );
    }
  });

  it("clamps the prompt to the model's window and max_tokens to its ceiling", () => {
    // Haiku 4.5: 200k window, 64k ceiling, $2 / $5, no residency: 200,000 × $2 + 64,000 × $5.
    const haiku = { ...SEARCH, model: "model-haiku-4-5", inputTokens: 900_000n, maxTokens: 100_000n };
    expect(firstPassPico(catalog, priced(haiku))).toBe($(0.4 + 0.32 + 0.08));
  });

  it("with compaction, adds the compaction pass the provider may run before it", () => {
    // A compaction pass reads the same 20,000 tokens and writes up to the 128k ceiling:
    // (2 × 20,000 × $6 + 32,000 × $15 + 128,000 × $15) / 1M × 1.1 + $0.08.
    expect(firstPassPico(catalog, priced({ ...SEARCH, compaction: true }))).toBe($(2.904 + 0.08));
  });
});

describe("the next pass", () => {
  it("after a tool: reads the context and the tool's result, up to the window when the result is unknown", () => {
    const tool = { kind: "tool", attempt: 0, contextTokens: 60_000n } as const;
    // (90,000 × $6 + 32,000 × $15) / 1M × 1.1, no search fee: the first pass held them all.
    expect(next(SEARCH, { ...tool, resultTokens: 30_000n })).toBe($(1.122));
    // (1,000,000 × $6 + 32,000 × $15) / 1M × 1.1.
    expect(next(SEARCH, tool)).toBe($(7.128));
    expect(next(SEARCH, { ...tool, contextTokens: 990_000n, resultTokens: 30_000n })).toBe($(7.128));
    expect(next(SEARCH, { ...tool, contextTokens: 0n, resultTokens: 0n })).toBe($(0.528));
  });

  it("after the advisor is called: its call at its own rates, then a pass reading the context and its answer", () => {
    const spec = { ...SEARCH, advisor: { model: "model-opus-4-6", maxTokens: 2_000n, maxUses: 0n } };
    // Advice: (50,000 × $10 + 2,000 × $25) / 1M × 1.1 = $0.605; then
    // (52,000 × $6 + 32,000 × $15) / 1M × 1.1 = $0.8712.
    expect(next(spec, { kind: "advisor", attempt: 0, contextTokens: 50_000n })).toBe($(0.605 + 0.8712));
    // Without the tool's max_tokens, the advisor's ceiling (128k) bounds its answer:
    // (50,000 × $10 + 128,000 × $25) / 1M × 1.1 = $4.07, then (178,000 × $6 + 32,000 × $15) / 1M × 1.1.
    const open = { ...spec, advisor: { ...spec.advisor, maxTokens: 0n } };
    expect(next(open, { kind: "advisor", attempt: 0, contextTokens: 50_000n })).toBe($(4.07 + 1.7028));
  });

  it("after a fallback hop: the attempt's first pass from the prompt, at its model, max_tokens and the call's speed", () => {
    const spec: TextCallSpec = {
      ...SEARCH,
      fallbacks: [
        { model: "model-haiku-4-5", maxTokens: 0n, speed: undefined },
        { model: "model-haiku-4-5", maxTokens: 1_000n, speed: undefined },
      ],
    };
    // Haiku: 20,000 × $2 + 32,000 × $5 (the call's max_tokens); then 1,000 of its own.
    expect(next(spec, { kind: "fallback", attempt: 1 })).toBe($(0.2));
    expect(next(spec, { kind: "fallback", attempt: 2 })).toBe($(0.045));
    // A fallback that asks for fast mode makes every pass fast: the charge prices each pass at
    // the call's reported speed. Opus 4.8 fast: $20 in (1-hour write), $50 out, × 1.1.
    const fast: TextCallSpec = {
      ...SEARCH,
      model: "model-opus-4-8",
      fallbacks: [{ model: "model-opus-5", maxTokens: 0n, speed: "fast" }],
    };
    expect(next(fast, { kind: "tool", attempt: 0, contextTokens: 10_000n, resultTokens: 10_000n })).toBe(
      $(((20_000 * 20 + 32_000 * 50) / 1e6) * 1.1),
    );
  });

  it('under fallbacks: "default", the dearest pass any catalog model could run', () => {
    const spec = { ...SEARCH, defaultFallback: true };
    const each = [...catalog.text.keys()].map((model) =>
      next({ ...SEARCH, model }, { kind: "tool", attempt: 0, contextTokens: 10_000n, resultTokens: 5_000n }),
    );
    expect(next(spec, { kind: "tool", attempt: 1, contextTokens: 10_000n, resultTokens: 5_000n })).toBe(
      [...each].sort((a, b) => (a < b ? 1 : a > b ? -1 : 0))[0],
    );
  });

  it("with compaction, adds a compaction pass reading what the next pass reads", () => {
    const tool = { kind: "tool", attempt: 0, contextTokens: 60_000n, resultTokens: 30_000n } as const;
    // (2 × 90,000 × $6 + 32,000 × $15 + 128,000 × $15) / 1M × 1.1.
    expect(next({ ...SEARCH, compaction: true }, tool)).toBe($(((180_000 * 6 + 160_000 * 15) / 1e6) * 1.1));
  });

  it("refuses a boundary the call cannot have (the caller's bug)", () => {
    expect(() => next(SEARCH, { kind: "fallback", attempt: 1 })).toThrow(RangeError);
    expect(() => next(SEARCH, { kind: "fallback", attempt: 0 })).toThrow(RangeError);
    expect(() => next(SEARCH, { kind: "tool", attempt: 1, contextTokens: 1n })).toThrow(RangeError);
    expect(() => next(SEARCH, { kind: "tool", attempt: -1, contextTokens: 1n })).toThrow(RangeError);
    expect(() => next(SEARCH, { kind: "tool", attempt: 0, contextTokens: -1n })).toThrow(RangeError);
    expect(() => next(SEARCH, { kind: "tool", attempt: 0, contextTokens: 1n, resultTokens: -1n })).toThrow(
      RangeError,
    );
    expect(() => next(SEARCH, { kind: "advisor", attempt: 0, contextTokens: 1n })).toThrow(RangeError);
  });
});
