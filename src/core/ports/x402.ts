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
  /**
   * When a collection of it was last begun: written, durably, before the facilitator is asked to
   * collect, so from then on the payment may have been collected whatever the gateway heard. A
   * payment marked so is never closed `unused` or `failed` without asking the chain, and while
   * it is `authorised` its hold is never swept (the recovery pass asks the chain and ends it).
   * Undefined until a collection is begun (kept once closed).
   */
  readonly collectingAt: number | undefined;
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
  "status" | "settled" | "txHash" | "error" | "collectedAt" | "collectingAt" | "closedAt" | "clearedAt"
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
   * Marks, durably, that a collection of an `authorised` payment is about to be asked of the
   * facilitator (`collecting_at` = `now`; a later collection marks it again). No money moves.
   * While the payment stays `authorised` so marked, the sweeper never expires its hold (see
   * LedgerStore.expireHolds): the chain may have taken it. Answers `not-authorised` (writing
   * nothing) for a payment in any other status.
   */
  markX402Collecting(id: string, now: number): Promise<"marked" | "not-authorised" | "not-found">;
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

/**
 * The x402 wire format and facilitator, in the core's terms (spec v2, docs/x402.md): what the
 * money rule (src/core/billing/x402.ts) asks of the payment SDK. src/chains/x402/ implements it
 * with `@x402/core` and the chains' schemes; the core never imports the SDK. Amounts here are
 * the chain's onchain units as decimal strings, as the wire carries them.
 */

/** One offer (x402's `PaymentRequirements`): what a payment must name to pay a route. */
export interface X402Offer {
  readonly scheme: string;
  /** The chain's CAIP-2 network (`eip155:8453`, `solana:...`). */
  readonly network: string;
  readonly asset: string;
  /** Onchain units, a decimal string. */
  readonly amount: string;
  readonly payTo: string;
  readonly maxTimeoutSeconds: number;
  readonly extra: Readonly<Record<string, unknown>>;
}

/** A payment as its `PAYMENT-SIGNATURE` header decodes (x402's `PaymentPayload`), unchecked. */
export interface X402PaymentPayload {
  readonly x402Version: unknown;
  readonly resource?: unknown;
  /** The offer the payer accepted, as it names it. */
  readonly accepted: X402Offer;
  /** The scheme's own payload (a signed authorisation): what the payment's identity is derived from. */
  readonly payload: Record<string, unknown>;
  readonly extensions?: unknown;
}

/** A 402's `PAYMENT-REQUIRED` body, less its version. */
export interface X402Required {
  readonly error: string;
  readonly resource: { readonly url: string; readonly description: string; readonly mimeType: string };
  readonly accepts: readonly X402Offer[];
  /** Declares the EIP-2612 gas-sponsoring extension (an `upto` offer: the payer need not approve first). */
  readonly sponsorGas: boolean;
}

/** The facilitator's verdict on a payment. */
export interface X402Verdict {
  readonly isValid: boolean;
  /** The signer, when valid. */
  readonly payer?: string | undefined;
  readonly invalidReason?: string | undefined;
  readonly invalidMessage?: string | undefined;
}

/** How a collection ended (x402's `SettleResponse`): taken onchain by `transaction`, or refused. */
export interface X402Settlement {
  readonly success: boolean;
  /** The collecting transaction; "" when refused. */
  readonly transaction: string;
  readonly network: string;
  readonly payer?: string | undefined;
  readonly errorReason?: string | undefined;
  readonly errorMessage?: string | undefined;
}

/** What an offer is built from, before its amount. */
export interface X402OfferRequest {
  readonly scheme: X402Scheme;
  readonly network: string;
  readonly payTo: string;
  readonly asset: string;
  readonly extra: Readonly<Record<string, unknown>>;
  readonly maxTimeoutSeconds: number;
}

/** The x402 wire format and the facilitator behind it. */
export interface X402Gateway {
  /**
   * Asks the facilitator what it supports (upto's offers name the facilitator's address);
   * throws when it cannot answer.
   */
  initialize(): Promise<void>;
  /**
   * The offer template for a chain and scheme, as the facilitator serves it (its `amount` is a
   * placeholder). Throws when the facilitator does not serve the chain and scheme.
   */
  offer(request: X402OfferRequest): Promise<X402Offer | undefined>;
  /** The `PAYMENT-REQUIRED` header value of a 402. */
  paymentRequiredHeader(required: X402Required): string;
  /** A `PAYMENT-SIGNATURE` header value, decoded; throws on anything that is not base64 JSON. */
  decodePayment(header: string): X402PaymentPayload;
  /** Whether the payment pays `offer` (asset, payTo, timeout, token domain, as x402 matches them). */
  matches(offer: X402Offer, payment: X402PaymentPayload): boolean;
  /**
   * The facilitator's verdict; a refusal it throws is answered as a verdict. Throws when the
   * facilitator cannot be asked.
   */
  verify(payment: X402PaymentPayload, offer: X402Offer): Promise<X402Verdict>;
  /**
   * Collects the payment: on `upto`, `amount` (onchain units) of what it authorises; on `exact`
   * (`amount` undefined) all of it. May throw (the core takes a throw for a refusal).
   */
  settle(payment: X402PaymentPayload, offer: X402Offer, amount: bigint | undefined): Promise<X402Settlement>;
  /** The `PAYMENT-RESPONSE` header value of a collection. */
  paymentResponseHeader(settlement: X402Settlement): string;
}

/**
 * What the chain says of a payment's authorisation, asked before a payment that may have been
 * collected is closed without its collection on record:
 * - `used`: a collection to the offer's `payTo` took it, by `transaction`, moving `collected`
 *   (onchain units) there;
 * - `unused`: nothing took it, and nothing can any more (its validity ended, its Solana blockhash
 *   expired, or its payer cancelled it): safe to close as not collected;
 * - `usable`: nothing took it yet, but a collection already sent could still land;
 * - `unknown`: the chain's answer does not settle it (the authorisation is spent but no
 *   collection of it to `payTo` was found, or the lookup is not possible for this payment):
 *   left for the operator, never closed as not collected.
 */
export type X402OnchainState =
  | { readonly kind: "used"; readonly transaction: string; readonly collected: bigint }
  | { readonly kind: "unused"; readonly reason: string }
  | { readonly kind: "usable" }
  | { readonly kind: "unknown"; readonly reason: string };

/** The chains' side of x402, in the core's terms: whether a payment was collected onchain. */
export interface X402Onchain {
  /**
   * Whether `payment` (paying `offer`) was used onchain, looked up in the chain itself: its
   * EIP-3009 authorisation state and `AuthorizationUsed` log, its Permit2 nonce and the transfer
   * that spent it, or its Solana transaction's status. `since` (unix ms) is when the gateway
   * took the payment: no collection of it is older. Throws when the chain cannot be asked.
   */
  collection(payment: X402PaymentPayload, offer: X402Offer, since: number): Promise<X402OnchainState>;
}

/** A chain a sign-in challenge offers: its network, family and asset. */
export interface X402SignInNetwork {
  readonly network: string;
  readonly family: "evm" | "solana";
  readonly asset: string;
}

/** A sign-in challenge to issue (CAIP-122 fields). */
export interface X402SignInChallenge {
  readonly domain: string;
  readonly url: string;
  readonly statement: string;
  readonly nonce: string;
  readonly issuedAt: number;
  readonly expiresAt: number;
  readonly networks: readonly X402SignInNetwork[];
  /** The 402's message. */
  readonly error: string;
  readonly description: string;
}

/** A `SIGN-IN-WITH-X` proof as parsed: the fields the core checks, and the rest for the verifier. */
export interface X402SignInProof {
  readonly uri: string;
  readonly chainId: string;
  readonly nonce: string;
}

/** A check's outcome: valid, or why not. */
export type X402SignInCheck =
  | { readonly isValid: true }
  | { readonly isValid: false; readonly invalidReason: string; readonly invalidMessage: string };

/** A signature check's outcome: valid with its signer, or why not. */
export type X402SignInVerdict =
  | { readonly isValid: true; readonly payer: string }
  | { readonly isValid: false; readonly invalidReason: string; readonly invalidMessage: string };

/** x402's sign-in-with-x extension, in the core's terms (src/chains/x402/ implements it). */
export interface X402SignInProofs {
  /** The `PAYMENT-REQUIRED` header value of a challenge declaring the extension. */
  challengeHeader(challenge: X402SignInChallenge): string;
  /** Parses a `SIGN-IN-WITH-X` header; throws (its message says why) on one that does not parse. */
  parse(header: string): X402SignInProof;
  /** Checks the message: domain and uri bound to `expected`, issued within `maxAgeMs`, not expired. */
  validate(proof: X402SignInProof, expected: URL, maxAgeMs: number): Promise<X402SignInCheck>;
  /** Checks the signature (EOA only, no RPC); `payer` is the signer when valid. */
  verify(proof: X402SignInProof): Promise<X402SignInVerdict>;
}
