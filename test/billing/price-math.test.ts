import { ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { DEFAULT_CATALOG_JSON, defaultPriceCatalog } from "../../src/core/billing/default-catalog.js";
import {
  formatUnits,
  LEDGER_MAX_DECIMALS,
  ledgerDecimals,
  ledgerToOnchain,
  onchainToLedger,
  parseDecimalAmount,
  picoToUnits,
} from "../../src/core/billing/money.js";
import {
  type PriceCatalog,
  parsePriceCatalog,
  type TextPrice,
} from "../../src/core/billing/price-catalog.js";
import { type DeliveredUsage, priceCall, priceUsage, quotePico } from "../../src/core/billing/pricing.js";
import { errorInfo } from "../../src/core/errors.js";
import { rng } from "./prng.js";

const DECIMALS = [0, 2, 6, 8, 9, 12, 15, 18];

/** The reference: ceil(pico × 10^decimals / 10^12) by a route independent of picoToUnits. */
function referenceUnits(pico: bigint, decimals: number): bigint {
  const numerator = pico * 10n ** BigInt(decimals);
  const denominator = 10n ** 12n;
  return numerator / denominator + (numerator % denominator === 0n ? 0n : 1n);
}

describe("picoToUnits", () => {
  it("rounds up once to the asset's smallest unit", () => {
    expect(picoToUnits(0n, 6)).toBe(0n);
    expect(picoToUnits(1n, 6)).toBe(1n); // a pico-dollar still costs one micro-unit
    expect(picoToUnits(1_000_000n, 6)).toBe(1n);
    expect(picoToUnits(1_000_001n, 6)).toBe(2n);
    expect(picoToUnits(7_000_000_000n, 6)).toBe(7000n);
    expect(picoToUnits(1n, 18)).toBe(1_000_000n);
    expect(picoToUnits(1_000_000n, 18)).toBe(10n ** 12n); // 1 µ$ = 10^(18−6) units
    expect(picoToUnits(1n, 0)).toBe(1n);
    expect(picoToUnits(10n ** 12n + 1n, 0)).toBe(2n);
  });

  it("agrees with the reference for random amounts and decimals", () => {
    const r = rng(7);
    for (let i = 0; i < 5000; i++) {
      const pico = r.big(10n ** 20n);
      const d = r.pick(DECIMALS);
      expect(picoToUnits(pico, d)).toBe(referenceUnits(pico, d));
    }
  });
});

describe("the ledger scale", () => {
  it("is min(asset decimals, 9): 6-decimal chains are unchanged", () => {
    expect(LEDGER_MAX_DECIMALS).toBe(9);
    expect([0, 2, 6, 8, 9, 12, 15, 18].map(ledgerDecimals)).toEqual([0, 2, 6, 8, 9, 9, 9, 9]);
  });

  it("rounds a call's pico-dollars up once to ledger units: ceil(pico × 10^L / 10^12)", () => {
    const L = ledgerDecimals(18);
    expect(picoToUnits(1n, L)).toBe(1n); // a pico-dollar still costs one 10^-9 unit
    expect(picoToUnits(1000n, L)).toBe(1n);
    expect(picoToUnits(1001n, L)).toBe(2n);
    expect(picoToUnits(7_000_000_000n, L)).toBe(7_000_000n); // 7000 µ$
    expect(picoToUnits(7_000_000_000n, ledgerDecimals(6))).toBe(7000n);
  });

  it("converts ledger units to onchain units exactly and back, with the dust floored", () => {
    expect(ledgerToOnchain(1n, 18)).toBe(10n ** 9n);
    expect(ledgerToOnchain(1_000_000_000n * 10n ** 9n, 18)).toBe(10n ** 27n); // 10^9 tokens
    expect(ledgerToOnchain(12_500_000n, 6)).toBe(12_500_000n);
    expect(ledgerToOnchain(5n, 12)).toBe(5000n);
    expect(onchainToLedger(10n ** 18n + 1n, 18)).toEqual({ ledger: 10n ** 9n, dust: 1n });
    expect(onchainToLedger(999_999_999n, 18)).toEqual({ ledger: 0n, dust: 999_999_999n });
    expect(onchainToLedger(12_500_001n, 6)).toEqual({ ledger: 12_500_001n, dust: 0n });
    expect(() => onchainToLedger(-1n, 18)).toThrow(RangeError);
    const r = rng(13);
    for (let i = 0; i < 2000; i++) {
      const d = r.pick(DECIMALS);
      const onchain = r.big(10n ** 30n);
      const { ledger, dust } = onchainToLedger(onchain, d);
      expect(ledgerToOnchain(ledger, d) + dust).toBe(onchain);
      expect(dust >= 0n && dust < 10n ** BigInt(d - ledgerDecimals(d))).toBe(true);
      expect(onchainToLedger(ledgerToOnchain(ledger, d), d)).toEqual({ ledger, dust: 0n });
    }
  });
});

describe("decimal amounts", () => {
  it("parses exactly, and refuses more precision than the asset has", () => {
    expect(parseDecimalAmount("12.50", 6)).toBe(12_500_000n);
    expect(parseDecimalAmount("12", 6)).toBe(12_000_000n);
    expect(parseDecimalAmount("0.000001", 6)).toBe(1n);
    expect(parseDecimalAmount("12.50", 18)).toBe(12_500_000_000_000_000_000n);
    expect(parseDecimalAmount("7", 0)).toBe(7n);
    expect(() => parseDecimalAmount("0.0000001", 6)).toThrow(/more than 6 decimal places/);
    expect(() => parseDecimalAmount("1.5", 0)).toThrow(/more than 0/);
    for (const bad of ["", "-1", "1e3", "1.", ".5", "0x10", "1,5", " 1 2"]) {
      expect(() => parseDecimalAmount(bad, 6)).toThrow();
    }
  });

  it("round-trips through formatUnits", () => {
    const r = rng(11);
    for (let i = 0; i < 2000; i++) {
      const d = r.pick(DECIMALS);
      const units = r.big(10n ** 24n);
      expect(parseDecimalAmount(formatUnits(units, d), d)).toBe(units);
    }
    expect(formatUnits(12_500_000n, 6)).toBe("12.500000");
  });
});

describe("the shipped catalog", () => {
  it("prices every text model from the upstream table, with exact cache-write rates", () => {
    const catalog = defaultPriceCatalog();
    const dollars = (m: string): [bigint, bigint, bigint, bigint, bigint] => {
      const p = catalog.text.get(m)!;
      return [p.input, p.output, p.cacheRead, p.cacheWrite5m, p.cacheWrite1h];
    };
    expect(dollars("model-opus-5")).toEqual([5_000_000n, 25_000_000n, 500_000n, 6_250_000n, 10_000_000n]);
    expect(dollars("model-opus-4-6")).toEqual(dollars("model-opus-5"));
    expect(dollars("model-opus-4-7")).toEqual(dollars("model-opus-5"));
    expect(dollars("model-opus-4-8")).toEqual(dollars("model-opus-5"));
    expect(dollars("model-sonnet-5")).toEqual([2_000_000n, 10_000_000n, 200_000n, 2_500_000n, 4_000_000n]);
    expect(dollars("model-sonnet-4-6")).toEqual([3_000_000n, 15_000_000n, 300_000n, 3_750_000n, 6_000_000n]);
    expect(dollars("model-haiku-4-5")).toEqual([1_000_000n, 5_000_000n, 100_000n, 1_250_000n, 2_000_000n]);
    expect(dollars("model-fable-5")).toEqual([
      10_000_000n,
      50_000_000n,
      1_000_000n,
      12_500_000n,
      20_000_000n,
    ]);
    expect(catalog.text.size).toBe(8);
  });

  it("prices images per size, and has no price for a size a model does not offer", () => {
    const catalog = defaultPriceCatalog();
    expect(Object.fromEntries(catalog.images.get("image-pro")!.perImage)).toEqual({
      "1K": 134_000n,
      "2K": 134_000n,
      "4K": 240_000n,
    });
    expect(Object.fromEntries(catalog.images.get("image-2")!.perImage)).toEqual({ "1K": 39_000n });
    const error = capture(() =>
      priceCall(catalog, { kind: "image", model: "image-2", size: "4K", count: 1 }),
    );
    expect(errorInfo(error)?.metadata).toMatchObject({ field: "size", allowed: "1K" });
  });

  it("refuses an unknown model, naming the field", () => {
    const error = capture(() =>
      priceCall(defaultPriceCatalog(), { kind: "text", model: "gpt-9", inputTokens: 1n, maxTokens: 1n }),
    );
    expect(errorInfo(error)?.metadata.field).toBe("model");
  });
});

describe("catalog files", () => {
  it("refuses a cache-write price that cannot be derived exactly, and accepts it when explicit", () => {
    const file = (extra: object) => ({
      text: { m: { input: 3, output: 1, cache_read: 0, max_output_tokens: 10, ...extra } },
    });
    expect(() => parsePriceCatalog(file({}))).toThrow(/cache_write_5m cannot be derived exactly/);
    expect(parsePriceCatalog(file({ cache_write_5m: 4 })).text.get("m")!.cacheWrite5m).toBe(4n);
  });

  it.each([
    [
      { text: { m: { input: 1.5, output: 1, cache_read: 0, max_output_tokens: 1 } } },
      /input must be a whole number/,
    ],
    [
      { text: { m: { input: -1, output: 1, cache_read: 0, max_output_tokens: 1 } } },
      /input must be a whole number/,
    ],
    [
      { text: { m: { input: 4, output: 1, cache_read: 0, max_output_tokens: 1, typo: 1 } } },
      /unknown field "typo"/,
    ],
    [{ text: {}, images: { i: { "8K": 1 } } }, /unknown field "8K"/],
    [{ text: {}, images: { i: {} } }, /at least one of/],
    [{ text: { "Bad Name": { input: 4, output: 1, cache_read: 0, max_output_tokens: 1 } } }, /model names/],
  ])("refuses %j", (json, message) => {
    expect(() => parsePriceCatalog(json)).toThrow(message);
  });

  it("takes prices above 2^53 as digit strings, exactly", () => {
    const big = "9007199254740993";
    const catalog = parsePriceCatalog({ text: {}, images: { i: { "1K": big } } });
    expect(catalog.images.get("i")!.perImage.get("1K")).toBe(9_007_199_254_740_993n);
  });

  it("round-trips the shipped defaults", () => {
    expect(parsePriceCatalog(DEFAULT_CATALOG_JSON)).toEqual(defaultPriceCatalog());
  });
});

describe("quote and charge (properties)", () => {
  const r = rng(20240601);

  function randomTextPrice(): TextPrice {
    const input = r.big(50_000_000n) * 4n; // a multiple of 4 so 1.25× is whole, like real prices
    return {
      model: "m",
      input,
      output: r.big(200_000_000n),
      cacheRead: r.big(input + 1n),
      cacheWrite5m: (input * 5n) / 4n,
      cacheWrite1h: input * 2n,
      maxOutputTokens: 1 + r.int(200_000),
      contextWindow: 10_000_000,
      fast: undefined,
      residency: new Map(),
    };
  }

  /** Splits `total` into random non-negative parts. */
  function split(total: bigint, parts: number): bigint[] {
    const cuts = Array.from({ length: parts - 1 }, () => r.big(total + 1n)).sort((a, b) => (a < b ? -1 : 1));
    const out: bigint[] = [];
    let prev = 0n;
    for (const c of [...cuts, total]) {
      out.push(c - prev);
      prev = c;
    }
    return out;
  }

  it("charge is exact, rounded up once, and never exceeds the quote for the same request", () => {
    for (let i = 0; i < 5000; i++) {
      const price = randomTextPrice();
      const catalog = catalogOf(price);
      const inputTokens = r.big(2_000_000n);
      const maxTokens = 1n + r.big(300_000n);
      const call = priceCall(catalog, { kind: "text", model: "m", inputTokens, maxTokens });
      const clamped = maxTokens < BigInt(price.maxOutputTokens) ? maxTokens : BigInt(price.maxOutputTokens);
      // Any delivery within the request: input-side kinds sum to at most the estimate, output
      // to at most the clamped max_tokens.
      const [input, w5, w1, read] = split(r.big(inputTokens + 1n), 4) as [bigint, bigint, bigint, bigint];
      const usage: DeliveredUsage = {
        inputTokens: input,
        cacheWrite5mTokens: w5,
        cacheWrite1hTokens: w1,
        cacheReadTokens: read,
        outputTokens: r.big(clamped + 1n),
        images: 0,
      };
      const chargeP = priceUsage(catalog, call, usage).pico;
      // Exact: the same sum computed term by term in micro-dollar×tokens (= pico-dollars).
      expect(chargeP).toBe(
        input * price.input +
          usage.outputTokens * price.output +
          w5 * price.cacheWrite5m +
          w1 * price.cacheWrite1h +
          read * price.cacheRead,
      );
      const quoteP = quotePico(catalog, call);
      expect(chargeP <= quoteP).toBe(true);
      for (const d of [0, 6, 9, 18]) {
        const charge = picoToUnits(chargeP, d);
        const quote = picoToUnits(quoteP, d);
        expect(charge <= quote).toBe(true);
        // Rounded up once: less than one unit above the exact value, never below it.
        expect(charge * 10n ** 12n >= chargeP * 10n ** BigInt(d)).toBe(true);
        const withinOneUnit =
          charge === 0n ? chargeP === 0n : (charge - 1n) * 10n ** 12n < chargeP * 10n ** BigInt(d);
        expect(withinOneUnit).toBe(true);
      }
    }
  });

  it("per-call rounding is never below the sum of its exact parts (one ceiling, not five)", () => {
    // Five separately rounded kinds could overcharge by up to five units; one ceiling by < 1.
    const price: TextPrice = {
      model: "m",
      input: 1n,
      output: 1n,
      cacheRead: 1n,
      cacheWrite5m: 1n,
      cacheWrite1h: 1n,
      maxOutputTokens: 10,
      contextWindow: 1_000,
      fast: undefined,
      residency: new Map(),
    };
    const catalog = catalogOf(price);
    const call = priceCall(catalog, {
      kind: "text",
      model: "m",
      inputTokens: 10n,
      maxTokens: 10n,
    });
    const usage = {
      inputTokens: 1n,
      outputTokens: 1n,
      cacheWrite5mTokens: 1n,
      cacheWrite1hTokens: 1n,
      cacheReadTokens: 1n,
      images: 0,
    };
    expect(picoToUnits(priceUsage(catalog, call, usage).pico, 6)).toBe(1n); // 5 pico-dollars → 1 unit, not 5
  });

  it("image charges never exceed the quote and are per delivered image", () => {
    const catalog = defaultPriceCatalog();
    for (let i = 0; i < 2000; i++) {
      const model = r.pick(["image-pro", "image-2"]);
      const size = model === "image-2" ? "1K" : r.pick(["1K", "2K", "4K"]);
      const count = 1 + r.int(10);
      const call = priceCall(catalog, { kind: "image", model, size, count });
      const delivered = r.int(count + 1);
      const perImage = catalog.images.get(model)!.perImage.get(size as "1K")!;
      const charge = priceUsage(catalog, call, {
        inputTokens: 0n,
        outputTokens: 0n,
        cacheWrite5mTokens: 0n,
        cacheWrite1hTokens: 0n,
        cacheReadTokens: 0n,
        images: delivered,
      }).pico;
      expect(charge).toBe(BigInt(delivered) * perImage * 1_000_000n);
      expect(charge <= quotePico(catalog, call)).toBe(true);
    }
    const pro4k = priceCall(catalog, { kind: "image", model: "image-pro", size: "4K", count: 2 });
    expect(picoToUnits(quotePico(catalog, pro4k), 6)).toBe(480_000n); // 2 × $0.24
  });

  it("quotes the documented worst case", () => {
    const catalog = defaultPriceCatalog();
    // opus-5: 10,000 input tokens at the 1h write rate ($10/MTok) + max_tokens clamped to 128k at $25/MTok.
    const call = priceCall(catalog, {
      kind: "text",
      model: "model-opus-5",
      inputTokens: 10_000n,
      maxTokens: 1_000_000n,
      inferenceGeo: "global",
    });
    expect(picoToUnits(quotePico(catalog, call), 6)).toBe(100_000n + 3_200_000n);
    expect(picoToUnits(quotePico(catalog, call), 18)).toBe((100_000n + 3_200_000n) * 10n ** 12n);
    // Without inference_geo a workspace default may apply US-only inference: ×1.1 is held.
    const unnamed = priceCall(catalog, {
      kind: "text",
      model: "model-opus-5",
      inputTokens: 10_000n,
      maxTokens: 1_000_000n,
    });
    expect(picoToUnits(quotePico(catalog, unnamed), 6)).toBe(((100_000n + 3_200_000n) * 11n) / 10n);
  });
});

/** A catalog of one text model, with the provider's default server-tool fees. */
function catalogOf(price: TextPrice): PriceCatalog {
  return {
    source: { version: "test", source: "test", effectiveDate: "" },
    text: new Map([[price.model, price]]),
    images: new Map(),
    serverTools: { webSearch: 10_000n, webFetch: 0n },
    serverToolIterationLimit: 10,
  };
}

function capture(fn: () => unknown): ConnectError {
  try {
    fn();
  } catch (error) {
    if (error instanceof ConnectError) return error;
    throw error;
  }
  throw new Error("expected a ConnectError");
}
