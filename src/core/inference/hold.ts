import type { CallBilling } from "../billing/call-billing.js";
import type { CallSpec } from "../billing/pricing.js";
import type { X402Authorisation, X402Payments, X402Route } from "../billing/x402.js";
import type { HoldState } from "../ports/ledger.js";
import type { RateLimitDecision, RateLimiter } from "../ports/rate-limits.js";
import { type PaidCaller, takeLimit } from "./admission.js";
import { insufficientFundsForCall } from "./inference-errors.js";

/** What paying for and holding a call needs. */
export interface HoldDeps {
  readonly billing: CallBilling;
  readonly now: () => number;
  readonly x402?: X402Payments | undefined;
}

/** A call whose worst case is held: as it bills (a keyless call's account and chain are its payment's). */
export interface HeldCall<C extends PaidCaller> {
  readonly call: C;
  /** A keyless call's payment, authorised for at least the hold; undefined for a keyed call. */
  readonly payment: X402Authorisation | undefined;
  readonly hold: HoldState;
  /** The limit decision the call was admitted under (its key's, or its payer's). */
  readonly rateLimit: RateLimitDecision;
}

/**
 * Pays for and holds a call admitted by {@link admitCaller} (`admitted`: its key's limit decision,
 * undefined for a keyless call). A keyless call pays with x402 first — authorising at least the
 * call's worst case (`upto` for text, the listed price for an image) — and is then limited per
 * payer. The hold comes last: a call the wallet cannot cover never reaches the provider, and a
 * text call's refusal says the largest max_tokens that fits. Any failure closes the payment
 * unused, having collected nothing.
 */
export async function holdPaidCall<C extends PaidCaller>(
  deps: HoldDeps,
  limit: RateLimiter,
  given: C,
  paid: {
    readonly spec: CallSpec;
    readonly route: X402Route;
    readonly admitted: RateLimitDecision | undefined;
  },
): Promise<HeldCall<C>> {
  let call = given;
  let payment: X402Authorisation | undefined;
  if (given.accountId === "") {
    payment = await deps.x402!.pay({
      header: given.payment,
      route: paid.route,
      chainField: given.billingChain,
      requestId: given.requestId,
      origin: given.origin,
      quote: (chain) => deps.billing.quoteOn(chain, paid.spec),
    });
    call = { ...given, accountId: payment.accountId, billingChain: payment.chain.id };
  }
  try {
    const rateLimit = paid.admitted ?? (await takeLimit(deps, limit, `x402:${payment!.payer}`));
    const held = await deps.billing.holdOrFit({
      accountId: call.accountId,
      requestId: call.requestId,
      keyId: call.keyId,
      chain: call.billingChain,
      call: paid.spec,
    });
    if (held.kind === "insufficient") {
      throw held.maxTokensThatFit === undefined
        ? held.refusal
        : insufficientFundsForCall(
            held.refusal,
            held.maxTokensThatFit,
            paid.spec.kind === "text" && paid.spec.passByPass === true,
          );
    }
    return { call, payment, hold: held.state, rateLimit };
  } catch (error) {
    if (payment !== undefined) await deps.x402!.close(payment, 0n, undefined);
    throw error;
  }
}
