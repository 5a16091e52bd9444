/**
 * The x402 payments' rules both stores check the same way: the ledger entries a payment writes,
 * and why a closing or a collection cannot be written.
 */
import type { X402Closing, X402Collection, X402Status } from "../../core/ports/x402.js";

/** The ledger entry that credits an x402 payment to its account, from {@link SYSTEM_X402}. */
export function x402CreditEntryId(paymentId: string): string {
  return `x402_${paymentId}`;
}

/** The ledger entry that returns what a payment's call did not spend to {@link SYSTEM_X402}. */
export function x402ReturnEntryId(paymentId: string): string {
  return `x402ret_${paymentId}`;
}

/**
 * Why a closing cannot be written, or undefined when it can: a return is never negative, never
 * more than the payment brought in, and never more than the account has available (the
 * ledger never goes below zero). Each is a caller's bug, not an outcome: it throws.
 */
export function x402ReturnRefusal(
  paymentId: string,
  returned: bigint,
  authorised: bigint,
  available: bigint,
): Error | undefined {
  if (returned < 0n) return new Error(`x402 payment ${paymentId}: a negative return (${returned})`);
  if (returned > authorised)
    return new Error(`x402 payment ${paymentId}: returning ${returned}, more than its ${authorised}`);
  if (returned > available)
    return new Error(
      `x402 payment ${paymentId}: returning ${returned}, the account has ${available} available`,
    );
  return undefined;
}

/**
 * Why a collection cannot be recorded for an `authorised` payment of `authorised`, or undefined
 * when it can: something was collected (> 0), no more than the payment authorised, by a named
 * transaction. Each is a caller's bug: it throws, writing nothing.
 */
export function x402CollectionRefusal(c: X402Collection, authorised: bigint): Error | undefined {
  if (c.collected <= 0n) return new Error(`x402 payment ${c.id}: a collection of ${c.collected}`);
  if (c.collected > authorised)
    return new Error(`x402 payment ${c.id}: collected ${c.collected}, more than its ${authorised}`);
  if (c.txHash === "") return new Error(`x402 payment ${c.id}: a collection without its transaction`);
  return undefined;
}

/**
 * Why a closing cannot be written for a payment in `status` (open: `authorised` or `collected`),
 * or undefined when it can: nothing closes as `collected` (that is recordX402Collection's), and
 * a collected payment closes only as `settled` with what and how it was collected — what the
 * chain took is not rewritten by a closing. A caller's bug: it throws, writing nothing.
 */
export function x402ClosingRefusal(
  c: X402Closing,
  status: X402Status,
  settled: bigint,
  txHash: string,
): Error | undefined {
  if (c.status === "collected") return new Error(`x402 payment ${c.id}: a closing as collected`);
  if (status === "collected" && (c.status !== "settled" || c.settled !== settled || c.txHash !== txHash))
    return new Error(
      `x402 payment ${c.id}: collected ${settled} by ${txHash}, closed as ${c.status} ${c.settled} by ${c.txHash || '""'}`,
    );
  return undefined;
}
