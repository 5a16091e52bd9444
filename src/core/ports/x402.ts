/**
 * The x402 port: what the billing core asks of the ledger's store for calls paid per request
 * with a signed x402 payment instead of an API key (docs/x402.md). A keyless payer has an
 * account of its own, keyed by its wallet address; each paid call credits that account with
 * what the payment authorises (from {@link SYSTEM_X402}), holds and settles as any call does,
 * and then returns what the call did not spend to {@link SYSTEM_X402}. Amounts are bigints in
 * the chain's ledger units, as everywhere in the ledger.
 */

/**
 * The counterpart of x402 payments: what keyless payers authorised, less what was returned
 * unspent. Its net debit on a chain is what those payers were charged there.
 */
export const SYSTEM_X402 = "system:x402";

/** An x402 scheme the gateway serves: `exact` (images), `upto` (text). */
export type X402Scheme = "exact" | "upto";

/**
 * Where an x402 payment stands: `authorised` (credited, its call running or not yet closed),
 * `settled` (the charge was collected onchain), `unused` (nothing was charged: nothing collected),
 * `failed` (a charge the chain refused to collect: the call's charge stands in the ledger as
 * owed, and `error` says why).
 */
export type X402Status = "authorised" | "settled" | "unused" | "failed";

/** One x402 payment, as stored. */
export interface X402PaymentRow {
  /** Derived from the signed payment: the same payment presented twice has the same id. */
  readonly id: string;
  /** The hold of the call it paid for (one payment, one call). */
  readonly holdId: string;
  readonly accountId: string;
  readonly chain: string;
  readonly scheme: X402Scheme;
  /** The payer's wallet address, as the payment names it. */
  readonly payer: string;
  /** What the payment authorises, in ledger units: credited from {@link SYSTEM_X402}. */
  readonly authorised: bigint;
  /** The payment as presented (the decoded PAYMENT-SIGNATURE JSON), for a collection retried later. */
  readonly payload: string;
  readonly status: X402Status;
  /** Collected onchain, in ledger units (0 unless `settled`). */
  readonly settled: bigint;
  /** The collecting transaction, "" until `settled`. */
  readonly txHash: string;
  /** Why collecting failed, "" unless `failed`. */
  readonly error: string;
  readonly createdAt: number;
  /** When it was closed; undefined while `authorised`. */
  readonly closedAt: number | undefined;
}

/** A payment to record as it is authorised. */
export type NewX402Payment = Omit<X402PaymentRow, "status" | "settled" | "txHash" | "error" | "closedAt">;

/** How an authorised payment ends. */
export interface X402Closing {
  readonly id: string;
  readonly status: Exclude<X402Status, "authorised">;
  readonly settled: bigint;
  readonly txHash: string;
  readonly error: string;
  /**
   * What goes back from the payer's account to {@link SYSTEM_X402}: the authorised amount less
   * the call's charge (all of it when nothing was charged).
   */
  readonly returned: bigint;
  readonly now: number;
}

/** The x402 payments' store. Writes are atomic; each answer comes after its commit. */
export interface X402Store {
  /**
   * Records the payment and credits `authorised` to its account from {@link SYSTEM_X402}, in
   * one transaction (entry `x402_<id>`). A payment id seen before writes nothing and answers
   * `replayed`: a payment pays for one call only.
   */
  authoriseX402(payment: NewX402Payment): Promise<"authorised" | "replayed">;
  /**
   * Closes an authorised payment and posts `returned` (when > 0) from its account back to
   * {@link SYSTEM_X402} (entry `x402ret_<id>`), in one transaction. Throws if `returned` exceeds
   * the account's available funds (the ledger never goes below zero). A payment already closed
   * is left as it is.
   */
  closeX402(closing: X402Closing): Promise<"closed" | "already-closed" | "not-found">;
  /** The x402 payments of these holds, by hold id. */
  x402Payments(holdIds: readonly string[]): Promise<Map<string, X402PaymentRow>>;
  /**
   * Payments still `authorised` that were created before `createdBefore` (unix ms), oldest
   * first, at most `limit`: those a crash left open, for the recovery pass to collect or close.
   */
  openX402Payments(createdBefore: number, limit: number): Promise<X402PaymentRow[]>;
}
