import { createHash } from "node:crypto";

const BASE32 = "abcdefghijklmnopqrstuvwxyz234567";

/** `prefix_` + 26 base32 characters (130 bits) of SHA-256 over the parts, NUL-separated. */
function derivedId(prefix: string, parts: readonly string[]): string {
  const digest = createHash("sha256").update(parts.join("\u0000")).digest();
  // 5 bits at a time from the front of the digest: 26 × 5 = 130 bits. Small numbers, not a
  // bigint per step: this runs on every billed call (docs/performance.md §21).
  let out = "";
  let bits = 0;
  let held = 0;
  let next = 0;
  for (let i = 0; i < 26; i++) {
    if (held < 5) {
      bits = (bits << 8) | digest[next++]!;
      held += 8;
    }
    held -= 5;
    out += BASE32[(bits >> held) & 31];
    bits &= (1 << held) - 1;
  }
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
