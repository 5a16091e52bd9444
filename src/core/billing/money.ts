/**
 * Exact money arithmetic. Charges are computed in pico-dollars (10^-12 $): a price in
 * micro-dollars per million tokens times a token count is a whole number of pico-dollars, so
 * nothing is rounded until the one conversion to the chain's ledger unit.
 *
 * Ledger units. The ledger (and every RPC amount) counts a chain's money in units of 10^-L of
 * its asset, where L = min(asset decimals, LEDGER_MAX_DECIMALS) (see `ledgerDecimals`). For a
 * 6-decimal stablecoin that is the asset's smallest unit; for an 18-decimal token it is 10^-9, so
 * an int64 balance holds about 9.22 × 10^9 whole tokens instead of 9.22.
 */

/** Pico-dollars per micro-dollar: a per-image price (µ$) × this is pico-dollars. */
export const PICO_PER_MICRO = 1_000_000n;

/** Tokens per price unit: prices are per 1,000,000 tokens. */
export const TOKENS_PER_PRICE_UNIT = 1_000_000n;

/** The largest amount SQLite INTEGER and proto int64 hold. */
export const INT64_MAX = 9_223_372_036_854_775_807n;

const PICO_DECIMALS = 12;

/** The finest ledger scale: assets with more decimals are counted in units of 10^-9 in the ledger. */
export const LEDGER_MAX_DECIMALS = 9;

/** The ledger scale L of an asset with `assetDecimals` decimals: ledger amounts are units of 10^-L. */
export function ledgerDecimals(assetDecimals: number): number {
  if (!Number.isInteger(assetDecimals) || assetDecimals < 0) throw new RangeError("bad asset decimals");
  return Math.min(assetDecimals, LEDGER_MAX_DECIMALS);
}

/**
 * Ledger units as onchain smallest units of an asset with `assetDecimals` decimals: exact,
 * × 10^(assetDecimals − L). What a settlement transfers for a ledger amount.
 */
export function ledgerToOnchain(ledger: bigint, assetDecimals: number): bigint {
  return ledger * 10n ** BigInt(assetDecimals - ledgerDecimals(assetDecimals));
}

/**
 * Onchain smallest units as ledger units, rounded down: `ledger` is what a deposit credits, and
 * `dust` (< 10^(assetDecimals − L) onchain units, always 0 when assetDecimals ≤ 9) is the part
 * too small for the ledger to count; it is never credited.
 * `ledgerToOnchain(ledger) + dust === onchain`.
 */
export function onchainToLedger(onchain: bigint, assetDecimals: number): { ledger: bigint; dust: bigint } {
  if (onchain < 0n) throw new RangeError("an onchain amount is never negative");
  const per = 10n ** BigInt(assetDecimals - ledgerDecimals(assetDecimals));
  return { ledger: onchain / per, dust: onchain % per };
}

/**
 * Pico-dollars as units of 10^-decimals dollars, rounded up (billing passes the chain's ledger
 * scale L, so this is the one rounding of a call: ceil(pico × 10^L / 10^12)):
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
 * Parses a decimal amount ("12.50", "0.000001") into units of 10^-decimals, exactly (for the
 * ledger, pass the chain's ledger scale L). Refuses signs, exponents, and more fractional digits
 * than `decimals`.
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

/** Formats units of 10^-decimals as a decimal amount with every decimal place ("12.500000"). */
export function formatUnits(units: bigint, decimals: number): string {
  const sign = units < 0n ? "-" : "";
  const abs = units < 0n ? -units : units;
  if (decimals === 0) return `${sign}${abs}`;
  const scale = 10n ** BigInt(decimals);
  return `${sign}${abs / scale}.${(abs % scale).toString().padStart(decimals, "0")}`;
}
