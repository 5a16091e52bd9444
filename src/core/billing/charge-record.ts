import { BP_ONE } from "./price-catalog.js";
import type { ChargeLine, PricedUsage, Speed, TokenCounts } from "./pricing.js";

/** A charge line as stored with the settlement and shown to the caller. */
export interface StoredChargeLine {
  readonly kind: ChargeLine["kind"];
  readonly pass: ChargeLine["pass"];
  readonly model: string;
  readonly tokens: TokenCounts | undefined;
  readonly quantity: bigint;
  readonly speed: Speed | "";
  readonly multiplierBp: number;
  /** This line's price in pico-dollars, rounded up to a whole pico-dollar (for display). */
  readonly amountPico: bigint;
  readonly description: string;
}

/** A settled call's priced breakdown, as stored. */
export interface ChargeRecord {
  readonly lines: readonly StoredChargeLine[];
  readonly unpriced: readonly string[];
}

const BP = BigInt(BP_ONE);
const EMPTY: ChargeRecord = { lines: [], unpriced: [] };

/**
 * The JSON kept with a settlement (hold_resolutions.charges): counts and amounts as decimal
 * strings (they are bigints), keys spelled out so an operator can read the column. "" when
 * there is nothing to record (an image call, or a call with no lines).
 */
export function encodeCharges(priced: PricedUsage): string {
  if (priced.lines.length === 0 && priced.unpriced.length === 0) return "";
  return JSON.stringify({
    lines: priced.lines.map((line) => ({
      kind: line.kind,
      pass: line.pass,
      model: line.model,
      tokens: line.tokens === undefined ? undefined : tokensJson(line.tokens),
      quantity: `${line.quantity}`,
      speed: line.speed,
      multiplier_bp: line.multiplierBp,
      amount_pico: `${(line.scaled + BP - 1n) / BP}`,
      description: line.description,
    })),
    unpriced: priced.unpriced,
  });
}

/** Reads what {@link encodeCharges} wrote; "" (older rows, voided holds) is no lines. */
export function decodeCharges(text: string): ChargeRecord {
  if (text === "") return EMPTY;
  const json = JSON.parse(text) as { lines: Record<string, unknown>[]; unpriced: string[] };
  return {
    lines: json.lines.map((line) => ({
      kind: line.kind as StoredChargeLine["kind"],
      pass: line.pass as StoredChargeLine["pass"],
      model: line.model as string,
      tokens: line.tokens === undefined ? undefined : tokensOf(line.tokens as Record<string, string>),
      quantity: BigInt(line.quantity as string),
      speed: line.speed as StoredChargeLine["speed"],
      multiplierBp: line.multiplier_bp as number,
      amountPico: BigInt(line.amount_pico as string),
      description: line.description as string,
    })),
    unpriced: json.unpriced,
  };
}

function tokensJson(t: TokenCounts): Record<string, string> {
  return {
    input: `${t.inputTokens}`,
    output: `${t.outputTokens}`,
    cache_write_5m: `${t.cacheWrite5mTokens}`,
    cache_write_1h: `${t.cacheWrite1hTokens}`,
    cache_read: `${t.cacheReadTokens}`,
  };
}

function tokensOf(t: Record<string, string>): TokenCounts {
  return {
    inputTokens: BigInt(t.input ?? "0"),
    outputTokens: BigInt(t.output ?? "0"),
    cacheWrite5mTokens: BigInt(t.cache_write_5m ?? "0"),
    cacheWrite1hTokens: BigInt(t.cache_write_1h ?? "0"),
    cacheReadTokens: BigInt(t.cache_read ?? "0"),
  };
}
