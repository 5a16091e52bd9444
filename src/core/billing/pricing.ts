import { Code } from "@connectrpc/connect";
import type { UsageCounts } from "../../store/ledger-repository.js";
import { invalidField, reasonError } from "../errors.js";
import { PICO_PER_MICRO } from "./money.js";
import {
  IMAGE_SIZES,
  type ImagePrice,
  type ImageSize,
  isImageSize,
  type PriceCatalog,
  type TextPrice,
} from "./price-catalog.js";

/** A call to price, as the Inference service describes it before running it. */
export type CallSpec =
  | {
      readonly kind: "text";
      readonly model: string;
      /** An upper bound of the request's input tokens, all kinds together. */
      readonly inputTokens: bigint;
      /** The request's `max_tokens`, before clamping. */
      readonly maxTokens: bigint;
    }
  | { readonly kind: "image"; readonly model: string; readonly size: string; readonly count: number };

/** What a call delivered (as the ledger records it). Image calls bill `images` only; text calls the tokens. */
export type DeliveredUsage = UsageCounts;

/** A call resolved against the catalog: its prices are known and its inputs validated. */
export type PricedCall =
  | {
      readonly kind: "text";
      readonly price: TextPrice;
      readonly inputTokens: bigint;
      /** `max_tokens` clamped to the model's maximum output. */
      readonly maxTokens: bigint;
    }
  | { readonly kind: "image"; readonly price: ImagePrice; readonly size: ImageSize; readonly count: number };

/** Usage with every count zero: what a call that delivered nothing reports. */
export const NO_USAGE: DeliveredUsage = {
  inputTokens: 0n,
  outputTokens: 0n,
  cacheWrite5mTokens: 0n,
  cacheWrite1hTokens: 0n,
  cacheReadTokens: 0n,
  images: 0,
};

/** More tokens than any context window: anything above is a caller bug, not a call. */
const MAX_TOKENS_PER_CALL = 1_000_000_000n;
const MAX_IMAGES_PER_CALL = 100;

/** Validates a call against the catalog; fails InvalidArgument naming the field at fault. */
export function priceCall(catalog: PriceCatalog, call: CallSpec): PricedCall {
  if (call.kind === "text") {
    const price = catalog.text.get(call.model);
    if (price === undefined) throw unknownModel(call.model, [...catalog.text.keys()]);
    tokenCount("input_tokens", call.inputTokens);
    if (call.maxTokens < 1n || call.maxTokens > MAX_TOKENS_PER_CALL) {
      throw invalidField("max_tokens", `max_tokens must be between 1 and ${MAX_TOKENS_PER_CALL}.`);
    }
    const cap = BigInt(price.maxOutputTokens);
    return {
      kind: "text",
      price,
      inputTokens: call.inputTokens,
      maxTokens: call.maxTokens < cap ? call.maxTokens : cap,
    };
  }
  const price = catalog.images.get(call.model);
  if (price === undefined) throw unknownModel(call.model, [...catalog.images.keys()]);
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
 * The worst-case price of a call, in pico-dollars (exact). Text: every input token at the
 * dearest input-side rate it could be billed at (normally the 1-hour cache write, 2× input),
 * plus the clamped `max_tokens` at the output rate. Images: the requested count at the
 * requested size. A charge for the same call never exceeds it (given an honest input bound).
 */
export function quotePico(call: PricedCall): bigint {
  if (call.kind === "image") return BigInt(call.count) * call.price.perImage.get(call.size)! * PICO_PER_MICRO;
  const p = call.price;
  const dearestInput = maxOf([p.input, p.cacheWrite5m, p.cacheWrite1h, p.cacheRead]);
  return call.inputTokens * dearestInput + call.maxTokens * p.output;
}

/**
 * The actual price of what a call delivered, in pico-dollars (exact): each kind of token at its
 * own rate, or each delivered image at the requested size's price.
 */
export function chargePico(call: PricedCall, usage: DeliveredUsage): bigint {
  if (call.kind === "image")
    return BigInt(usage.images) * call.price.perImage.get(call.size)! * PICO_PER_MICRO;
  const p = call.price;
  return (
    usage.inputTokens * p.input +
    usage.outputTokens * p.output +
    usage.cacheWrite5mTokens * p.cacheWrite5m +
    usage.cacheWrite1hTokens * p.cacheWrite1h +
    usage.cacheReadTokens * p.cacheRead
  );
}

/** Fails InvalidArgument when a usage report has a negative or absurd count. */
export function checkUsage(usage: DeliveredUsage): void {
  tokenCount("usage.input_tokens", usage.inputTokens);
  tokenCount("usage.output_tokens", usage.outputTokens);
  tokenCount("usage.cache_write_5m_tokens", usage.cacheWrite5mTokens);
  tokenCount("usage.cache_write_1h_tokens", usage.cacheWrite1hTokens);
  tokenCount("usage.cache_read_tokens", usage.cacheReadTokens);
  if (!Number.isInteger(usage.images) || usage.images < 0 || usage.images > MAX_IMAGES_PER_CALL) {
    throw invalidField("usage.images", `usage.images must be between 0 and ${MAX_IMAGES_PER_CALL}.`);
  }
}

/** Math.max for bigints (Math.max refuses them). */
function maxOf(values: readonly bigint[]): bigint {
  let max = values[0]!;
  for (const v of values) if (v > max) max = v;
  return max;
}

function tokenCount(field: string, value: bigint): void {
  if (value < 0n || value > MAX_TOKENS_PER_CALL) {
    throw invalidField(field, `${field} must be between 0 and ${MAX_TOKENS_PER_CALL}.`);
  }
}

function unknownModel(model: string, known: string[]) {
  return reasonError(Code.InvalidArgument, "INVALID_FIELD", `Unknown model ${JSON.stringify(model)}.`, {
    field: "model",
    allowed: known.join(","),
  });
}
