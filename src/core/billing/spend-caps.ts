/**
 * Spend caps: the most an account, or one of its API keys, may spend on a chain in a UTC day, a
 * UTC month, or ever. Enforced by the store in the hold's own transaction (see docs/billing.md
 * "Spend caps"), so parallel calls cannot run past a cap. What a period has spent counts its
 * holds: open ones at their held amount, settled ones at their charge, released or expired ones
 * at nothing; the stores keep it per key and UTC day as holds are placed and resolved.
 */

export type CapPeriod = "day" | "month" | "lifetime";

export const CAP_PERIODS: readonly CapPeriod[] = ["day", "month", "lifetime"];

/** A cap as stored. `keyId` is "" for a cap on the whole account. Amounts are the chain's ledger units. */
export interface SpendCap {
  readonly accountId: string;
  readonly keyId: string;
  readonly chain: string;
  readonly period: CapPeriod;
  readonly amount: bigint;
}

/** A hold the caps refused: the cap, what is left of it, and when it resets (undefined: never). */
export interface CapRefusal {
  readonly cap: SpendCap;
  readonly remaining: bigint;
  readonly resetsAt: number | undefined;
}

/** Milliseconds in a UTC day (JavaScript time has no leap seconds). */
export const DAY_MS = 86_400_000;

/**
 * The UTC day a hold placed at `at` (epoch ms) is spent on, as the day's first millisecond: the
 * stores keep what each key spent per day (spend_days), and every period starts on a day.
 */
export function spendDay(at: number): number {
  return at - (at % DAY_MS);
}

/** The first millisecond of the period containing `now` (epoch ms, UTC); 0 for lifetime. */
export function periodStart(period: CapPeriod, now: number): number {
  const d = new Date(now);
  if (period === "day") return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate());
  if (period === "month") return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
  return 0;
}

/** When the period containing `now` ends (the next one starts); undefined for lifetime. */
export function periodReset(period: CapPeriod, now: number): number | undefined {
  const d = new Date(now);
  if (period === "day") return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() + 1);
  if (period === "month") return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
  return undefined;
}

/**
 * The tightest refusal among `caps` for a hold of `amount` placed at `now`, or undefined when
 * every cap leaves room. `spent(cap)` is what the cap's period has spent so far.
 */
export function capRefusal(
  caps: readonly SpendCap[],
  amount: bigint,
  now: number,
  spent: (cap: SpendCap, since: number) => bigint,
): CapRefusal | undefined {
  let refusal: CapRefusal | undefined;
  for (const cap of caps) {
    const used = spent(cap, periodStart(cap.period, now));
    const remaining = cap.amount > used ? cap.amount - used : 0n;
    if (amount <= remaining) continue;
    if (refusal === undefined || remaining < refusal.remaining) {
      refusal = { cap, remaining, resetsAt: periodReset(cap.period, now) };
    }
  }
  return refusal;
}
