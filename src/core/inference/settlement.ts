import type { BillingCounters } from "../billing/billing-counters.js";
import type { CallBilling } from "../billing/call-billing.js";
import type { DeliveredUsage } from "../billing/pricing.js";
import type { X402Authorisation, X402Payments } from "../billing/x402.js";
import type { HoldRow, HoldState } from "../ports/ledger.js";
import type { Log } from "../ports/log.js";
import type { X402Settlement } from "../ports/x402.js";
import { type MeasuredCall, streamUsage, type UsageDeps } from "./delivered-usage.js";
import type { StreamMeter } from "./usage.js";

/** What settling a call needs. */
export interface SettlementDeps extends UsageDeps {
  readonly billing: CallBilling;
  /** Where billing anomalies are counted (unpriced usage, capped charges). */
  readonly counters: BillingCounters;
  /** Told of failures that cannot reach the caller any more (a settle after the answer went out). */
  readonly log: Log;
  readonly x402?: X402Payments | undefined;
}

/** What closing a paid call's payment needs. */
export interface PaymentDeps {
  readonly log: Log;
  readonly x402?: X402Payments | undefined;
}

/** One running text call as settlement needs it: its hold, the request as sent, the output cap. */
export interface BilledCall extends MeasuredCall {
  readonly placed: HoldRow;
  /** A keyless call's payment; undefined for a keyed call. */
  readonly payment: X402Authorisation | undefined;
  /** The most output tokens the call can bill; undefined when several passes may write. */
  readonly outputCap: bigint | undefined;
  /** The configured name of the endpoint that answered ("" before an answer, or without a router). */
  readonly endpoint: string;
}

/** A settled call, as its caller is told: the charge, the hold's state (for its receipt), the payment's answer. */
export interface Settled {
  /** What the call was charged, in the chain's ledger units (0 when released). */
  readonly charge: bigint;
  readonly state: HoldState;
  /** An x402 call's collection, as its PAYMENT-RESPONSE header says it (collected before delivery only). */
  readonly paymentResponse?: string | undefined;
}

/**
 * Whether a call is settled — or its hold handed to a payment's collection — so that its end
 * leaves the hold alone; until then the end settles it for what was delivered.
 */
export interface CallOutcome {
  settled: boolean;
}

/**
 * Settles a whole answer (not streamed) for `usage`. An x402 charge is collected before the answer
 * is handed over; a payment the chain refuses gets nothing (402, the hold released by the call's
 * end). Once collected, the hold is the recovery pass's should the settle not happen: never
 * released (`outcome.settled` says so as soon as the hold is no longer the call's).
 */
export async function settleAnswer(
  deps: SettlementDeps,
  billed: BilledCall,
  usage: DeliveredUsage,
  outcome: CallOutcome,
): Promise<Settled> {
  const { placed, payment } = billed;
  let collected: X402Settlement | undefined;
  if (payment !== undefined) {
    const charge = deps.billing.chargeFor(placed, capOutput(usage, billed.outputCap));
    if (charge > 0n) {
      // Collected or refused, the hold is no longer this call's to release.
      outcome.settled = true;
      collected = await deps.x402!.collectBeforeDelivery(payment, charge, () =>
        deps.billing.release(placed.id),
      );
    }
  }
  const state = await settle(deps, billed, usage);
  outcome.settled = true;
  return settledCall(deps, state, payment, collected);
}

/**
 * Settles a stream for what reached the client ({@link streamUsage}); undefined when the settle
 * failed (logged: the hold is then left to the sweeper). An x402 stream's headers went out: its
 * collection runs on, and its receipt says how it went.
 */
export async function settleStream(
  deps: SettlementDeps,
  billed: BilledCall,
  meter: StreamMeter,
): Promise<Settled | undefined> {
  const { placed, call, payment } = billed;
  let state: HoldState;
  try {
    const usage = await streamUsage(deps, billed, meter);
    state = usage === undefined ? await deps.billing.release(placed.id) : await settle(deps, billed, usage);
  } catch (error) {
    deps.log.error({ err: error, requestId: call.requestId, holdId: placed.id }, "settling a stream failed");
    return undefined;
  }
  if (payment !== undefined) deps.x402!.collectLater(payment, chargeOf(state), call.requestId);
  return { charge: chargeOf(state), state };
}

/**
 * Settles a call its caller stopped reading (or that failed before its answer): for what was
 * delivered, with nobody left to tell but the log.
 */
export async function settleAbandoned(
  deps: SettlementDeps,
  billed: BilledCall,
  meter: StreamMeter,
): Promise<void> {
  const settled = await settleStream(deps, billed, meter);
  if (meter.started && settled !== undefined)
    deps.log.info(
      { requestId: billed.call.requestId, chain: billed.placed.chain, charge: `${settled.charge}` },
      "settled after its caller stopped reading",
    );
}

/**
 * The settled part of a call delivered whole (text or image): its charge and state and, for an
 * x402 call, its payment closed (`collected` before delivery; undefined when nothing was) and
 * the PAYMENT-RESPONSE value. A failure to record the payment is logged (it stays collected, for
 * the recovery pass), never turned into a failed answer: the call was delivered and paid.
 */
export async function settledCall(
  deps: PaymentDeps,
  state: HoldState,
  payment: X402Authorisation | undefined,
  collected: X402Settlement | undefined,
): Promise<Settled> {
  const charge = chargeOf(state);
  if (payment === undefined) return { charge, state };
  try {
    await deps.x402!.close(payment, charge, collected);
  } catch (error) {
    deps.log.error(
      { err: error, requestId: state.hold.requestId, payment: payment.id },
      "recording an x402 payment failed",
    );
  }
  return {
    charge,
    state,
    paymentResponse: collected === undefined ? undefined : deps.x402!.responseHeader(collected),
  };
}

/**
 * Settles what was delivered; anything the price could not account for is counted and logged.
 * A single-pass call is never charged more output than its max_tokens allows (a provider
 * reporting more went beyond its own limits); every call is capped at its hold.
 */
async function settle(
  deps: SettlementDeps,
  billed: BilledCall,
  delivered: DeliveredUsage,
): Promise<HoldState> {
  const { placed, call } = billed;
  const within = capOutput(delivered, billed.outputCap);
  // Only the attempt that delivered is charged; its endpoint is named on the row.
  const usage = billed.endpoint === "" ? within : { ...within, endpoint: billed.endpoint };
  const { state, capped, priced } = await deps.billing.settleDelivered(placed, usage);
  if (priced.unpriced.length > 0) {
    deps.counters.add("unpriced_usage");
    deps.log.error(
      { requestId: call.requestId, holdId: placed.id, unpriced: priced.unpriced },
      "usage the gateway cannot price; charged what it knows",
    );
  }
  if (capped || within !== delivered) {
    deps.counters.add("capped_charge");
    deps.log.error(
      { requestId: call.requestId, holdId: placed.id, maxTokens: billed.outputCap },
      capped
        ? "the delivered usage exceeded the call's hold; the charge was capped at the hold"
        : "the provider reported more output than max_tokens; charged max_tokens",
    );
  }
  return state;
}

/** `usage` with its output (and each pass's) at most `cap`; the same object when within it. */
function capOutput(usage: DeliveredUsage, cap: bigint | undefined): DeliveredUsage {
  if (cap === undefined) return usage;
  const over = (counts: { outputTokens: bigint }) => counts.outputTokens > cap;
  if (!over(usage) && !(usage.passes ?? []).some(over)) return usage;
  const min = (n: bigint) => (n > cap ? cap : n);
  return {
    ...usage,
    outputTokens: min(usage.outputTokens),
    ...(usage.passes === undefined
      ? {}
      : { passes: usage.passes.map((pass) => ({ ...pass, outputTokens: min(pass.outputTokens) })) }),
  };
}

/** What a resolved call was charged (0 when released). */
function chargeOf(state: HoldState): bigint {
  return state.resolution?.amount ?? 0n;
}
