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
 * `collected` (its charge was collected onchain — `settled` and `txHash` say what and how — and
 * its call's ledger settle is not yet confirmed: recorded before that settle, so a crash between
 * the two never forgets a collection; its hold is never swept while it is `collected`, and the
 * recovery pass settles it), `settled` (the charge was collected onchain and the payment closed),
 * `unused` (nothing was charged: nothing collected), `failed` (a charge the chain refused to
 * collect: the call's charge stands in the ledger as owed, `error` says why, and its payer is
 * refused further x402 calls until an operator clears it).
 */
export type X402Status = "authorised" | "collected" | "settled" | "unused" | "failed";

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
  /** Collected onchain, in ledger units (0 unless `collected` or `settled`). */
  readonly settled: bigint;
  /** The collecting transaction, "" until `collected` or `settled`. */
  readonly txHash: string;
  /** Why collecting failed, "" unless `failed`. */
  readonly error: string;
  readonly createdAt: number;
  /** When its collection was recorded; undefined until it is `collected` (kept once closed). */
  readonly collectedAt: number | undefined;
  /** When it was closed; undefined while `authorised` or `collected`. */
  readonly closedAt: number | undefined;
  /**
   * When an operator cleared a `failed` payment's payer (it had settled what it owed out of
   * band); undefined otherwise. A `failed` payment not cleared refuses its payer's next calls.
   */
  readonly clearedAt: number | undefined;
}

/** A payment to record as it is authorised. */
export type NewX402Payment = Omit<
  X402PaymentRow,
  "status" | "settled" | "txHash" | "error" | "collectedAt" | "closedAt" | "clearedAt"
>;

/** A collection to record: what was collected onchain for an authorised payment, and by which transaction. */
export interface X402Collection {
  readonly id: string;
  /** Collected, in ledger units (> 0). */
  readonly collected: bigint;
  readonly txHash: string;
  readonly now: number;
}

/**
 * How an authorised (or collected) payment ends. Closing a `collected` payment must name status
 * `settled` with the settled amount and transaction it was collected with.
 */
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
   * Records, durably and before anything else is written for the call, that an `authorised`
   * payment's charge was collected onchain: status `collected`, `settled` = `collected`,
   * `tx_hash`, `collected_at`. No money moves in the ledger. Answers `not-authorised` (writing
   * nothing) for a payment in any other status.
   */
  recordX402Collection(collection: X402Collection): Promise<"recorded" | "not-authorised" | "not-found">;
  /**
   * Closes an authorised or collected payment and posts `returned` (when > 0) from its account
   * back to {@link SYSTEM_X402} (entry `x402ret_<id>`), in one transaction. Throws if `returned`
   * exceeds the account's available funds (the ledger never goes below zero), or if a
   * `collected` payment is closed with another status, amount or transaction than it was
   * collected with. A payment already closed is left as it is.
   */
  closeX402(closing: X402Closing): Promise<"closed" | "already-closed" | "not-found">;
  /** The payment with this id, in any status (a replay is refused before the facilitator is asked). */
  x402Payment(id: string): Promise<X402PaymentRow | undefined>;
  /** The x402 payments of these holds, by hold id. */
  x402Payments(holdIds: readonly string[]): Promise<Map<string, X402PaymentRow>>;
  /**
   * Payments still `authorised` or `collected` that were created before `createdBefore` (unix
   * ms), oldest first, at most `limit`: those a crash left open, for the recovery pass to
   * collect, settle or close.
   */
  openX402Payments(createdBefore: number, limit: number): Promise<X402PaymentRow[]>;
  /**
   * The `failed` payments of `payer` (as stored: an EVM address in lower case) that no operator
   * cleared, oldest first, at most `limit`: while there is one, the payer's x402 calls are
   * refused. Read on every x402 call: one indexed lookup.
   */
  failedX402Payments(payer: string, limit: number): Promise<X402PaymentRow[]>;
  /**
   * Clears every `failed`, not yet cleared payment of `payer` (`cleared_at` = `now`): an operator
   * says what it owed was settled out of band. Answers how many it cleared.
   */
  clearFailedX402(payer: string, now: number): Promise<number>;
}
