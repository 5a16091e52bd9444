import { readInteger, readMoney, readObject, readString, rejectUnknownKeys } from "./json-reader.js";

/** One set of token rates: integer micro-dollars per 1,000,000 tokens. */
export interface TokenRates {
  readonly input: bigint;
  readonly output: bigint;
  readonly cacheRead: bigint;
  /** 5-minute cache writes; 1.25× input unless configured. */
  readonly cacheWrite5m: bigint;
  /** 1-hour cache writes; 2× input unless configured. */
  readonly cacheWrite1h: bigint;
}

/** Prices of one text model: its standard rates, and what modifies them. */
export interface TextPrice extends TokenRates {
  readonly model: string;
  /** The clamp applied to `max_tokens` when quoting. */
  readonly maxOutputTokens: number;
  /** Input tokens one sampling pass can read at most (the model's context window). */
  readonly contextWindow: number;
  /** Fast-mode rates (`speed: "fast"`); undefined when the model does not offer fast mode. */
  readonly fast: TokenRates | undefined;
  /**
   * What `inference_geo` multiplies every token rate by, per geo, in basis points (11000 = ×1.1).
   * Empty when the model does not take `inference_geo`.
   */
  readonly residency: ReadonlyMap<string, number>;
}

/** Image sizes the catalog may price. */
export const IMAGE_SIZES = ["1K", "2K", "4K"] as const;
export type ImageSize = (typeof IMAGE_SIZES)[number];

/** Prices of one image model: integer micro-dollars per delivered image, for each size offered. */
export interface ImagePrice {
  readonly model: string;
  /** A size the model does not offer has no entry. */
  readonly perImage: ReadonlyMap<ImageSize, bigint>;
}

/** Where a catalog's prices come from. */
export interface CatalogSource {
  readonly version: string;
  readonly source: string;
  /** YYYY-MM-DD, or "" when the file does not say. */
  readonly effectiveDate: string;
}

/** Fees of the server tools the gateway lets through, in integer micro-dollars per use. */
export interface ServerToolFees {
  readonly webSearch: bigint;
  readonly webFetch: bigint;
}

/** Every price the gateway bills by. */
export interface PriceCatalog {
  readonly source: CatalogSource;
  readonly text: ReadonlyMap<string, TextPrice>;
  readonly images: ReadonlyMap<string, ImagePrice>;
  readonly serverTools: ServerToolFees;
  /** The provider's limit on sampling iterations in one call with server tools. */
  readonly serverToolIterationLimit: number;
}

/** Basis points: a multiplier of ×1. */
export const BP_ONE = 10_000;

/** The provider's published server-tool fees and loop limit, used when a catalog file omits them. */
const DEFAULT_SERVER_TOOLS: ServerToolFees = { webSearch: 10_000n, webFetch: 0n };
const DEFAULT_SERVER_TOOL_ITERATION_LIMIT = 10;
/** The largest context window any served model has: the bound when a catalog file omits one. */
const DEFAULT_CONTEXT_WINDOW = 1_000_000;

const MODEL_NAME = /^[a-z0-9][a-z0-9.-]{0,63}$/;
const GEO_NAME = /^[a-z][a-z0-9-]{0,31}$/;
const DATE = /^\d{4}-\d{2}-\d{2}$/;
const ROOT_FIELDS = [
  "version",
  "source",
  "effective_date",
  "text",
  "images",
  "server_tools",
  "server_tool_iteration_limit",
];
const RATE_FIELDS = ["input", "output", "cache_read", "cache_write_5m", "cache_write_1h"];
const TEXT_FIELDS = [...RATE_FIELDS, "max_output_tokens", "context_window", "fast", "residency"];

/** Whether `size` is one of {@link IMAGE_SIZES}. */
export function isImageSize(size: string): size is ImageSize {
  return (IMAGE_SIZES as readonly string[]).includes(size);
}

/**
 * Parses and validates a catalog file (integer micro-dollars throughout):
 * `{"version"?, "source"?, "effective_date"?, "server_tools"?: {"web_search"?, "web_fetch"?},
 * "server_tool_iteration_limit"?, "text": {MODEL: {"input", "output", "cache_read",
 * "cache_write_5m"?, "cache_write_1h"?, "max_output_tokens", "context_window"?, "fast"?: {"input",
 * "output", "cache_read"?, "cache_write_5m"?, "cache_write_1h"?}, "residency"?: {GEO: BASIS_POINTS}}},
 * "images": {MODEL: {"1K"?, "2K"?, "4K"?}}}`. Omitted cache prices are derived (writes 1.25× and
 * 2× input; a fast cache read in the standard read's proportion to input) and must come out
 * whole. Throws an Error naming the offending entry.
 */
export function parsePriceCatalog(json: unknown): PriceCatalog {
  const root = readObject(json, "$");
  rejectUnknownKeys(root, ROOT_FIELDS, "$");
  const effectiveDate = readString(root, "effective_date", "$", "");
  if (effectiveDate !== "" && !DATE.test(effectiveDate))
    throw new Error("$.effective_date must be YYYY-MM-DD");
  const source: CatalogSource = {
    version: readString(root, "version", "$", "custom"),
    source: readString(root, "source", "$", "operator catalog file"),
    effectiveDate,
  };
  const text = new Map<string, TextPrice>();
  for (const [model, value] of Object.entries(readObject(root.text, "$.text"))) {
    text.set(model, parseTextPrice(model, value, `$.text[${JSON.stringify(model)}]`));
  }
  const images = new Map<string, ImagePrice>();
  for (const [model, value] of Object.entries(readObject(root.images ?? {}, "$.images"))) {
    const path = `$.images[${JSON.stringify(model)}]`;
    checkModelName(model, path);
    if (text.has(model)) throw new Error(`${path}: ${model} is also a text model`);
    const obj = readObject(value, path);
    rejectUnknownKeys(obj, IMAGE_SIZES, path);
    const perImage = new Map<ImageSize, bigint>();
    for (const size of IMAGE_SIZES)
      if (obj[size] !== undefined) perImage.set(size, readMoney(obj, size, path));
    if (perImage.size === 0) throw new Error(`${path} must price at least one of ${IMAGE_SIZES.join(", ")}`);
    images.set(model, { model, perImage });
  }
  if (text.size + images.size === 0) throw new Error("$ must price at least one model");
  const tools = readObject(root.server_tools ?? {}, "$.server_tools");
  rejectUnknownKeys(tools, ["web_search", "web_fetch"], "$.server_tools");
  return {
    source,
    text,
    images,
    serverTools: {
      webSearch:
        tools.web_search === undefined
          ? DEFAULT_SERVER_TOOLS.webSearch
          : readMoney(tools, "web_search", "$.server_tools"),
      webFetch:
        tools.web_fetch === undefined
          ? DEFAULT_SERVER_TOOLS.webFetch
          : readMoney(tools, "web_fetch", "$.server_tools"),
    },
    serverToolIterationLimit:
      root.server_tool_iteration_limit === undefined
        ? DEFAULT_SERVER_TOOL_ITERATION_LIMIT
        : readInteger(root, "server_tool_iteration_limit", "$", 1, 1000),
  };
}

function parseTextPrice(model: string, value: unknown, path: string): TextPrice {
  checkModelName(model, path);
  const obj = readObject(value, path);
  rejectUnknownKeys(obj, TEXT_FIELDS, path);
  const standard = parseRates(obj, path, undefined);
  return {
    model,
    ...standard,
    maxOutputTokens: readInteger(obj, "max_output_tokens", path, 1, 10_000_000),
    contextWindow:
      obj.context_window === undefined
        ? DEFAULT_CONTEXT_WINDOW
        : readInteger(obj, "context_window", path, 1, 100_000_000),
    fast:
      obj.fast === undefined
        ? undefined
        : parseRates(readObject(obj.fast, `${path}.fast`), `${path}.fast`, standard),
    residency: parseResidency(obj.residency, `${path}.residency`),
  };
}

/**
 * One rate set. Cache writes default to 1.25× and 2× input; the cache read is required for the
 * standard set, and for a fast set defaults to the standard read's proportion of input.
 */
function parseRates(
  obj: Record<string, unknown>,
  path: string,
  standard: TokenRates | undefined,
): TokenRates {
  if (standard !== undefined) rejectUnknownKeys(obj, RATE_FIELDS, path);
  const input = readMoney(obj, "input", path);
  const derived = (key: string, numerator: bigint, denominator: bigint): bigint => {
    if (obj[key] !== undefined) return readMoney(obj, key, path);
    if (denominator === 0n || (input * numerator) % denominator !== 0n) {
      throw new Error(`${path}.${key} cannot be derived exactly from input ${input}; set it explicitly`);
    }
    return (input * numerator) / denominator;
  };
  return {
    input,
    output: readMoney(obj, "output", path),
    cacheRead:
      standard === undefined
        ? readMoney(obj, "cache_read", path)
        : derived("cache_read", standard.cacheRead, standard.input),
    cacheWrite5m: derived("cache_write_5m", 5n, 4n),
    cacheWrite1h: derived("cache_write_1h", 2n, 1n),
  };
}

function parseResidency(value: unknown, path: string): ReadonlyMap<string, number> {
  const residency = new Map<string, number>();
  if (value === undefined) return residency;
  const obj = readObject(value, path);
  for (const geo of Object.keys(obj)) {
    if (!GEO_NAME.test(geo) || geo === "global") {
      throw new Error(`${path}: ${JSON.stringify(geo)} is not a geo to price ("global" is always ×1)`);
    }
    residency.set(geo, readInteger(obj, geo, path, BP_ONE, 10 * BP_ONE));
  }
  return residency;
}

function checkModelName(model: string, path: string): void {
  if (!MODEL_NAME.test(model)) throw new Error(`${path}: model names are 1–64 of [a-z0-9.-]`);
}
