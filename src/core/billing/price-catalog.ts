import { readInteger, readMoney, readObject, rejectUnknownKeys } from "./json-reader.js";

/** Prices of one text model: integer micro-dollars per 1,000,000 tokens. */
export interface TextPrice {
  readonly model: string;
  readonly input: bigint;
  readonly output: bigint;
  readonly cacheRead: bigint;
  /** 5-minute cache writes; 1.25× input unless configured. */
  readonly cacheWrite5m: bigint;
  /** 1-hour cache writes; 2× input unless configured. */
  readonly cacheWrite1h: bigint;
  /** The clamp applied to `max_tokens` when quoting. */
  readonly maxOutputTokens: number;
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

/** Every price the gateway bills by. */
export interface PriceCatalog {
  readonly text: ReadonlyMap<string, TextPrice>;
  readonly images: ReadonlyMap<string, ImagePrice>;
}

const MODEL_NAME = /^[a-z0-9][a-z0-9.-]{0,63}$/;
const TEXT_FIELDS = [
  "input",
  "output",
  "cache_read",
  "cache_write_5m",
  "cache_write_1h",
  "max_output_tokens",
];

/** Whether `size` is one of {@link IMAGE_SIZES}. */
export function isImageSize(size: string): size is ImageSize {
  return (IMAGE_SIZES as readonly string[]).includes(size);
}

/**
 * Parses and validates a catalog file: `{"text": {MODEL: {"input", "output", "cache_read",
 * "cache_write_5m"?, "cache_write_1h"?, "max_output_tokens"}}, "images": {MODEL: {"1K"?, "2K"?,
 * "4K"?}}}`, all prices integer micro-dollars. Omitted cache-write prices are derived (1.25× and
 * 2× input) and must come out whole. Throws an Error naming the offending entry.
 */
export function parsePriceCatalog(json: unknown): PriceCatalog {
  const root = readObject(json, "$");
  rejectUnknownKeys(root, ["text", "images"], "$");
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
  return { text, images };
}

function parseTextPrice(model: string, value: unknown, path: string): TextPrice {
  checkModelName(model, path);
  const obj = readObject(value, path);
  rejectUnknownKeys(obj, TEXT_FIELDS, path);
  const input = readMoney(obj, "input", path);
  const derived = (key: string, numerator: bigint, denominator: bigint): bigint => {
    if (obj[key] !== undefined) return readMoney(obj, key, path);
    if ((input * numerator) % denominator !== 0n) {
      throw new Error(`${path}.${key} cannot be derived exactly from input ${input}; set it explicitly`);
    }
    return (input * numerator) / denominator;
  };
  return {
    model,
    input,
    output: readMoney(obj, "output", path),
    cacheRead: readMoney(obj, "cache_read", path),
    cacheWrite5m: derived("cache_write_5m", 5n, 4n),
    cacheWrite1h: derived("cache_write_1h", 2n, 1n),
    maxOutputTokens: readInteger(obj, "max_output_tokens", path, 1, 10_000_000),
  };
}

function checkModelName(model: string, path: string): void {
  if (!MODEL_NAME.test(model)) throw new Error(`${path}: model names are 1–64 of [a-z0-9.-]`);
}
