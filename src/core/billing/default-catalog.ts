import { type PriceCatalog, parsePriceCatalog } from "./price-catalog.js";

/**
 * The shipped price catalog, in the same shape as a TOLLGATE_CATALOG file (integer
 * micro-dollars). Text: input / output / cache-read per 1M tokens from the upstream list prices;
 * cache writes are derived (1.25× input for the 5-minute TTL, 2× input for the 1-hour TTL).
 * Images, per delivered image: `image-pro` follows gemini-3-pro-image ($0.134 at 1K and 2K,
 * $0.24 at 4K); `image-2` follows gemini-2.5-flash-image, which only renders 1K ($0.039), so it
 * has no 2K or 4K price and such requests are refused rather than billed at a guess.
 */
export const DEFAULT_CATALOG_JSON = {
  text: {
    "model-fable-5": {
      input: 10_000_000,
      output: 50_000_000,
      cache_read: 1_000_000,
      max_output_tokens: 128_000,
    },
    "model-haiku-4-5": {
      input: 1_000_000,
      output: 5_000_000,
      cache_read: 100_000,
      max_output_tokens: 64_000,
    },
    "model-opus-4-6": {
      input: 5_000_000,
      output: 25_000_000,
      cache_read: 500_000,
      max_output_tokens: 128_000,
    },
    "model-opus-4-7": {
      input: 5_000_000,
      output: 25_000_000,
      cache_read: 500_000,
      max_output_tokens: 128_000,
    },
    "model-opus-4-8": {
      input: 5_000_000,
      output: 25_000_000,
      cache_read: 500_000,
      max_output_tokens: 128_000,
    },
    "model-opus-5": { input: 5_000_000, output: 25_000_000, cache_read: 500_000, max_output_tokens: 128_000 },
    "model-sonnet-4-6": {
      input: 3_000_000,
      output: 15_000_000,
      cache_read: 300_000,
      max_output_tokens: 128_000,
    },
    "model-sonnet-5": {
      input: 2_000_000,
      output: 10_000_000,
      cache_read: 200_000,
      max_output_tokens: 128_000,
    },
  },
  images: {
    "image-pro": { "1K": 134_000, "2K": 134_000, "4K": 240_000 },
    "image-2": { "1K": 39_000 },
  },
} as const;

/** The shipped catalog, validated like any config file. */
export function defaultPriceCatalog(): PriceCatalog {
  return parsePriceCatalog(DEFAULT_CATALOG_JSON);
}
