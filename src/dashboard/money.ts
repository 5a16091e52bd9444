import { formatDollars, formatMicroDollars } from "../core/billing/charge-format.js";

// One formatting of money for the CLI and the page: the core's pure helpers, bundled.
export { ledgerDecimals } from "../core/billing/money.js";

/** An integer amount in units of 10^-decimals as dollars, exactly: `$1.234567`, at least cents. */
export const dollars = formatDollars;

/** Integer micro-dollars as dollars. */
export const microDollars = formatMicroDollars;

/** Parses a dollar amount typed by a user into units of 10^-decimals; undefined when invalid. */
export function parseDollars(text: string, decimals: number): bigint | undefined {
  const match = /^\s*\$?(\d+)(?:\.(\d*))?\s*$/.exec(text);
  if (match === null) return undefined;
  const fraction = match[2] ?? "";
  if (fraction.length > decimals) return undefined;
  return BigInt(match[1]!) * 10n ** BigInt(decimals) + BigInt(fraction.padEnd(decimals, "0") || "0");
}
