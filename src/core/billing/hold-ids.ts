import { createHash } from "node:crypto";

const BASE32 = "abcdefghijklmnopqrstuvwxyz234567";

/** `prefix_` + 26 base32 characters (130 bits) of SHA-256 over the parts, NUL-separated. */
function derivedId(prefix: string, parts: readonly string[]): string {
  const digest = createHash("sha256").update(parts.join("\u0000")).digest();
  // 5 bits at a time from the front of the digest: 26 × 5 = 130 bits.
  let bits = 0n;
  for (const byte of digest.subarray(0, 17)) bits = (bits << 8n) | BigInt(byte);
  let out = "";
  for (let i = 0; i < 26; i++) out += BASE32[Number((bits >> BigInt(136 - 5 * (i + 1))) & 31n)];
  return `${prefix}_${out}`;
}

/**
 * The hold id of a call: derived from the account and the gateway's request id, so a retried
 * Hold finds the first one, and two accounts can never collide on one request id.
 */
export function holdIdFor(accountId: string, requestId: string): string {
  return derivedId("hold", ["hold", accountId, requestId]);
}

/** The ledger entry id of an operator credit carrying an idempotency key. */
export function creditIdFor(accountId: string, creditId: string): string {
  return derivedId("credit", ["credit", accountId, creditId]);
}

/** The transfer id of a withdrawal carrying an idempotency key. */
export function withdrawalIdFor(accountId: string, withdrawalId: string): string {
  return derivedId("wd", ["withdrawal", accountId, withdrawalId]);
}
