import type { BillingCounters } from "../billing/billing-counters.js";
import type { CallBilling } from "../billing/call-billing.js";
import type { X402Payments } from "../billing/x402.js";
import type { Log } from "../ports/log.js";
import type { Metrics } from "../ports/metrics.js";
import type { TextUpstream } from "../ports/providers.js";
import type { RateLimiter } from "../ports/rate-limits.js";
import { admitCaller, type ClientPolicy, type PaidCaller } from "./admission.js";
import { type CountTokensCall, countTokens } from "./count-tokens.js";
import { answerUsage } from "./delivered-usage.js";
import { type HeldCall, holdPaidCall } from "./hold.js";
import type { ModelCatalog, TextModel } from "./model-catalog.js";
import { type PreparedCall, prepareCall } from "./prepare.js";
import {
  type ProviderAnswer,
  ProviderRequest,
  providerAnswered,
  readAnswer,
  sendMessages,
} from "./provider-call.js";
import { relayStream } from "./relay.js";
import {
  type BilledCall,
  type CallOutcome,
  settleAbandoned,
  settleAnswer,
  settleStream,
} from "./settlement.js";
import type { MessageHead, MessagePart, TextCall, TokenCount } from "./text-call.js";
import { StreamMeter } from "./usage.js";

export type { MessageHead, MessagePart, TextCall, TokenCount } from "./text-call.js";

/** What text inference is built from. */
export interface TextInferenceDeps {
  /** Holds and settlements, answered once durable (grouped commits in the gateway). */
  readonly billing: CallBilling;
  readonly models: ModelCatalog;
  readonly upstream: TextUpstream;
  /** Per-key limit on billed calls. */
  readonly messagesLimit: RateLimiter;
  /** Per-key limit on count_tokens. */
  readonly countTokensLimit: RateLimiter;
  readonly clientPolicy: ClientPolicy;
  /** Silence from a streaming provider after which the gateway sends its own `ping`. */
  readonly streamPingMs: number;
  /** The `max_uses` a web search tool without one is sent with. */
  readonly webSearchMaxUses: number;
  /** Where billing anomalies are counted (unpriced or missing usage, capped charges). */
  readonly counters: BillingCounters;
  /** Told how long the provider took to answer each call. */
  readonly metrics: Metrics;
  readonly now: () => number;
  /** Told of failures masked for the caller or that cannot reach it any more (a settle after the answer went out). */
  readonly log: Log;
  /** Calls paid with x402 instead of a key; a keyless call is refused (401) without it. */
  readonly x402?: X402Payments;
}

/** Where a keyless text call is paid (x402 `upto`: at least the call's worst case). */
const X402_ROUTE = { kind: "text", path: "/x402/v1/messages" } as const;

/**
 * Text calls, end to end: admission, preparation, the hold, the provider call, the relay, and
 * the settlement of what was delivered — each step in a file named for it. Transport-free: the
 * Inference service adapts it to RPCs.
 */
export class TextInference {
  constructor(private readonly deps: TextInferenceDeps) {}

  /** The models served, in catalog order. */
  get models(): readonly TextModel[] {
    return this.deps.models.models;
  }

  /**
   * Runs one call. Nothing is yielded until funds are held and the provider has answered 200;
   * every failure before that throws, having charged nothing. After the head, a provider
   * failure arrives as an `error` event, and the call is settled for what was delivered when
   * the generator ends — normally or by failure (its last part then says the charge), or by the
   * consumer stopping early (the charge is then logged: nobody is left to tell).
   */
  async *createMessage(given: TextCall, signal: AbortSignal): AsyncGenerator<MessagePart> {
    const { deps } = this;
    const client = { policy: deps.clientPolicy, userAgent: given.userAgent };
    const admitted = await admitCaller(deps, deps.messagesLimit, given, client);
    const prepared = prepareCall(deps, given.body);
    const paid = { spec: prepared.spec, route: X402_ROUTE, admitted };
    const held = await holdPaidCall(deps, deps.messagesLimit, given, paid);
    const { call } = held;
    const billed = billedCall(held, prepared);
    const provider = new ProviderRequest(signal);
    const meter = new StreamMeter();
    const outcome: CallOutcome = { settled: false };
    const sentAt = performance.now();
    try {
      const answer = await sendMessages(deps, prepared.outgoing, call, provider, signal);
      const { response } = answer;
      yield { kind: "head", head: messageHead(held, prepared, answer) };
      if (!prepared.stream) {
        const { text, message } = await readAnswer(deps, response, signal, call.requestId);
        providerAnswered(deps, call.requestId, sentAt);
        const usage = await answerUsage(deps, billed, message);
        const settled = await settleAnswer(deps, billed, usage, outcome);
        yield { kind: "message", body: Buffer.from(text) };
        yield { kind: "settled", ...settled };
        return;
      }
      providerAnswered(deps, call.requestId, sentAt);
      yield* relayStream(deps, response, provider, meter, signal, call.requestId);
      // The caller left (the relay ends quietly): settled below, with nobody left to tell.
      if (signal.aborted) return;
      outcome.settled = true;
      const settled = await settleStream(deps, billed, meter);
      if (settled !== undefined && !signal.aborted) yield { kind: "settled", ...settled };
    } finally {
      provider.close();
      if (!outcome.settled) await settleAbandoned(deps, billed, meter);
    }
  }

  /** Counts a request's input tokens with the provider's counter; not funds-gated, not billed. */
  countTokens(call: CountTokensCall): Promise<TokenCount> {
    return countTokens(this.deps, call);
  }
}

/** The head of an answer: what is known once the call is held and the provider answered 200. */
function messageHead(held: HeldCall<TextCall>, prepared: PreparedCall, answer: ProviderAnswer): MessageHead {
  return {
    requestId: held.call.requestId,
    billingChain: held.hold.hold.chain,
    model: prepared.model.id,
    repairedParams: prepared.repaired,
    clampedFrom: prepared.clampedFrom,
    rateLimit: held.rateLimit,
    stream: prepared.stream,
    upstreamRequestId: answer.upstreamRequestId,
  };
}

/** A held text call as settlement needs it. */
function billedCall(held: HeldCall<BilledCall["call"] & PaidCaller>, prepared: PreparedCall): BilledCall {
  return {
    placed: held.hold.hold,
    call: held.call,
    request: prepared.sent,
    model: prepared.model,
    payment: held.payment,
    outputCap: prepared.outputCap,
  };
}
