/**
 * Exact money arithmetic. Charges are computed in pico-dollars (10^-12 $): a price in
 * micro-dollars per million tokens times a token count is a whole number of pico-dollars, so
 * nothing is rounded until the one conversion to the chain asset's smallest unit.
 */

/** Pico-dollars per micro-dollar: a per-image price (µ$) × this is pico-dollars. */
export const PICO_PER_MICRO = 1_000_000n;

/** Tokens per price unit: prices are per 1,000,000 tokens. */
export const TOKENS_PER_PRICE_UNIT = 1_000_000n;

/** The largest amount SQLite INTEGER and proto int64 hold. */
export const INT64_MAX = 9_223_372_036_854_775_807n;

const PICO_DECIMALS = 12;

/**
 * Pico-dollars as the smallest unit of a dollar asset with `decimals` decimals, rounded up:
 * one unit is 10^(12 − decimals) pico-dollars (decimals ≤ 12), or a pico-dollar is
 * 10^(decimals − 12) units (decimals > 12, exact).
 */
export function picoToUnits(pico: bigint, decimals: number): bigint {
  if (pico < 0n) throw new RangeError("a charge is never negative");
  if (decimals >= PICO_DECIMALS) return pico * 10n ** BigInt(decimals - PICO_DECIMALS);
  const perUnit = 10n ** BigInt(PICO_DECIMALS - decimals);
  return (pico + perUnit - 1n) / perUnit;
}

/**
 * Parses a decimal amount of the asset ("12.50", "0.000001") into smallest units, exactly.
 * Refuses signs, exponents, and more fractional digits than the asset has.
 */
export function parseDecimalAmount(text: string, decimals: number): bigint {
  const match = /^(\d+)(?:\.(\d+))?$/.exec(text.trim());
  if (match === null) throw new RangeError(`not a plain decimal amount: ${JSON.stringify(text)}`);
  const whole = match[1]!;
  const fraction = match[2] ?? "";
  if (fraction.length > decimals) {
    throw new RangeError(`${JSON.stringify(text)} has more than ${decimals} decimal places`);
  }
  return BigInt(whole) * 10n ** BigInt(decimals) + BigInt(fraction.padEnd(decimals, "0") || "0");
}

/** Formats smallest units as a decimal amount with every decimal place ("12.500000"). */
export function formatUnits(units: bigint, decimals: number): string {
  const sign = units < 0n ? "-" : "";
  const abs = units < 0n ? -units : units;
  if (decimals === 0) return `${sign}${abs}`;
  const scale = 10n ** BigInt(decimals);
  return `${sign}${abs / scale}.${(abs % scale).toString().padStart(decimals, "0")}`;
}
