import type { ConnectError } from "@connectrpc/connect";
import type { HoldRow, HoldState } from "../ports/ledger.js";
import type { ChainConfig } from "./chain-registry.js";
import type { PassBoundary } from "./pass-pricing.js";
import type { CallSpec, DeliveredUsage, PricedUsage, TextCallSpec } from "./pricing.js";

/** A call to reserve funds for. */
export interface HoldInput {
  readonly accountId: string;
  /** The gateway's request id; the hold id is derived from it. */
  readonly requestId: string;
  /** The API key making the call, for usage rows; "" when none. */
  readonly keyId: string;
  /** The `x-gateway-billing-chain` value: a chain id, `auto`, or empty. */
  readonly chain: string | undefined;
  readonly call: CallSpec;
}

/**
 * A hold for a call about to run, or the refusal of a wallet that cannot cover it, answered with
 * what would fit where the available amount is known.
 */
export type NewCallHold =
  | { readonly kind: "held"; readonly state: HoldState }
  | {
      readonly kind: "insufficient";
      /** The INSUFFICIENT_FUNDS refusal, as {@link CallBilling.holdNewCall} throws it. */
      readonly refusal: ConnectError;
      /**
       * A text call's largest max_tokens the available funds cover for the same request (0 when
       * not even one output token fits); undefined for an image call.
       */
      readonly maxTokensThatFit: bigint | undefined;
    };

/**
 * What raising a running call's hold answered: `raised`, with the hold as it stands now (its
 * `raised` the new total: the hold to settle with), or `declined` when the wallet or a spend cap
 * does not cover the raise (nothing written), with the refusal a call would have got
 * (INSUFFICIENT_FUNDS, SPEND_CAP_REACHED) for the caller to end the turn with.
 */
export type HoldRaise =
  | { readonly kind: "raised"; readonly state: HoldState }
  | { readonly kind: "declined"; readonly refusal: ConnectError };

/**
 * The billing a model call needs on its hot path: hold before the provider call, settle or
 * release after it. Each write is answered once it is durable; the ledger group-commits the
 * writes of the calls in flight (one fsync for many calls), off the request loop.
 */
export interface CallBilling {
  /** The worst case on the chain the call would bill, writing nothing. */
  quote(
    accountId: string,
    chain: string | undefined,
    call: CallSpec,
  ): Promise<{ chain: ChainConfig; amount: bigint }>;
  /** The worst case on a given chain; reads nothing. */
  quoteOn(chain: ChainConfig, call: CallSpec): bigint;
  /** Reserves the worst case; a request id seen before is refused (REQUEST_ID_REUSED). */
  holdNewCall(input: HoldInput): Promise<HoldState>;
  /** Like {@link holdNewCall}, except that a wallet that cannot cover the call is an answer, not a throw. */
  holdOrFit(input: HoldInput): Promise<NewCallHold>;
  /** A multi-pass text call's first pass on a given chain (see pass-pricing.ts); reads nothing. */
  firstPassQuoteOn(chain: ChainConfig, call: TextCallSpec): bigint;
  /** The stretch a pass boundary starts, on the chain of the hold `placed`; reads nothing. */
  nextPassQuote(placed: HoldRow, call: TextCallSpec, boundary: PassBoundary): bigint;
  /** The stretch a pass boundary starts, on a given chain (see pass-pricing.ts); reads nothing. */
  nextPassQuoteOn(chain: ChainConfig, call: TextCallSpec, boundary: PassBoundary): bigint;
  /**
   * Raises the hold of a running call by `amount` for its pass `pass` (≥ 2), atomically with the
   * funds and spend caps; a retry of the same pass holds nothing more.
   */
  raise(placed: HoldRow, pass: number, amount: bigint): Promise<HoldRaise>;
  /** Charges what was delivered (capped at the hold) and releases the rest of the hold it placed. */
  settleDelivered(
    placed: HoldRow,
    usage: DeliveredUsage,
  ): Promise<{ state: HoldState; capped: boolean; priced: PricedUsage }>;
  /** What {@link settleDelivered} will charge for `usage`, writing nothing (x402: collected first). */
  chargeFor(placed: HoldRow, usage: DeliveredUsage): bigint;
  /** Voids the hold: nothing is charged. */
  release(holdId: string): Promise<HoldState>;
}
