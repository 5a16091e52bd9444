import { type PriceCatalog, parsePriceCatalog } from "./price-catalog.js";

/**
 * The shipped price catalog, in the same shape as a TOLLGATE_CATALOG file (integer
 * micro-dollars). Text: input / output / cache-read per 1M tokens from the upstream list prices;
 * cache writes are derived (1.25× input for the 5-minute TTL, 2× input for the 1-hour TTL).
 * Fast mode: Opus 5 and Opus 4.8 only, $10 / $50 per MTok (caching multipliers on top, so the
 * fast cache prices are derived the same way). Residency: `inference_geo: "us"` is ×1.1 on
 * every token rate of the 4.6-and-later models; Haiku 4.5 takes no `inference_geo`. Web search
 * is $10 per 1,000 searches; web fetch is tokens only; a server-tool loop runs at most 10
 * sampling iterations. Sources and dates: docs/billing.md.
 * Images, per delivered image: `image-pro` follows gemini-3-pro-image ($0.134 at 1K and 2K,
 * $0.24 at 4K); `image-2` follows gemini-2.5-flash-image, which only renders 1K ($0.039), so it
 * has no 2K or 4K price and such requests are refused rather than billed at a guess.
 */
export const DEFAULT_CATALOG_JSON = {
  version: "2026-11-24",
  source:
    "https://platform.claude.com/docs/en/about-claude/pricing; https://ai.google.dev/gemini-api/docs/pricing",
  effective_date: "2026-09-01",
  server_tools: { web_search: 10_000, web_fetch: 0 },
  server_tool_iteration_limit: 10,
  text: {
    "model-fable-5": {
      input: 10_000_000,
      output: 50_000_000,
      cache_read: 1_000_000,
      max_output_tokens: 128_000,
      context_window: 1_000_000,
      residency: { us: 11_000 },
    },
    "model-haiku-4-5": {
      input: 1_000_000,
      output: 5_000_000,
      cache_read: 100_000,
      max_output_tokens: 64_000,
      context_window: 200_000,
    },
    "model-opus-4-6": {
      input: 5_000_000,
      output: 25_000_000,
      cache_read: 500_000,
      max_output_tokens: 128_000,
      context_window: 1_000_000,
      residency: { us: 11_000 },
    },
    "model-opus-4-7": {
      input: 5_000_000,
      output: 25_000_000,
      cache_read: 500_000,
      max_output_tokens: 128_000,
      context_window: 1_000_000,
      residency: { us: 11_000 },
    },
    "model-opus-4-8": {
      input: 5_000_000,
      output: 25_000_000,
      cache_read: 500_000,
      max_output_tokens: 128_000,
      context_window: 1_000_000,
      fast: { input: 10_000_000, output: 50_000_000 },
      residency: { us: 11_000 },
    },
    "model-opus-5": {
      input: 5_000_000,
      output: 25_000_000,
      cache_read: 500_000,
      max_output_tokens: 128_000,
      context_window: 1_000_000,
      fast: { input: 10_000_000, output: 50_000_000 },
      residency: { us: 11_000 },
    },
    "model-sonnet-4-6": {
      input: 3_000_000,
      output: 15_000_000,
      cache_read: 300_000,
      max_output_tokens: 128_000,
      context_window: 1_000_000,
      residency: { us: 11_000 },
    },
    "model-sonnet-5": {
      input: 2_000_000,
      output: 10_000_000,
      cache_read: 200_000,
      max_output_tokens: 128_000,
      context_window: 1_000_000,
      residency: { us: 11_000 },
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
