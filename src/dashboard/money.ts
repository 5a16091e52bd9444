/** Decimal places of a chain's ledger units: min(asset decimals, 9) (see docs/billing.md). */
export function ledgerDecimals(assetDecimals: number): number {
  return Math.min(assetDecimals, 9);
}

/** An integer amount in units of 10^-decimals as dollars, exactly: `$1.234567`, at least cents. */
export function dollars(amount: bigint, decimals: number): string {
  const negative = amount < 0n;
  const magnitude = negative ? -amount : amount;
  const scale = 10n ** BigInt(decimals);
  const whole = magnitude / scale;
  let fraction = (magnitude % scale).toString().padStart(decimals, "0").replace(/0+$/, "");
  if (fraction.length < 2) fraction = fraction.padEnd(2, "0");
  return `${negative ? "-" : ""}$${whole.toLocaleString("en-US")}.${fraction}`;
}

/** Integer micro-dollars as dollars. */
export function microDollars(amount: bigint): string {
  return dollars(amount, 6);
}

/** Parses a dollar amount typed by a user into units of 10^-decimals; undefined when invalid. */
export function parseDollars(text: string, decimals: number): bigint | undefined {
  const match = /^\s*\$?(\d+)(?:\.(\d*))?\s*$/.exec(text);
  if (match === null) return undefined;
  const fraction = match[2] ?? "";
  if (fraction.length > decimals) return undefined;
  return BigInt(match[1]!) * 10n ** BigInt(decimals) + BigInt(fraction.padEnd(decimals, "0") || "0");
}
