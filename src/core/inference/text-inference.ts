import { Code, ConnectError } from "@connectrpc/connect";
import type { BillingCounters } from "../billing/billing-counters.js";
import type { CallBilling } from "../billing/call-billing.js";
import type { DeliveredUsage } from "../billing/pricing.js";
import type { X402Payments } from "../billing/x402.js";
import type { Log } from "../ports/log.js";
import type { Metrics } from "../ports/metrics.js";
import type { TextUpstream, UpstreamResponse } from "../ports/providers.js";
import type { RateLimiter } from "../ports/rate-limits.js";
import { admitCaller, type ClientPolicy, type PaidCaller } from "./admission.js";
import { type CountTokensCall, countTokens } from "./count-tokens.js";
import { answerUsage, streamUsage } from "./delivered-usage.js";
import { type HeldCall, holdPaidCall } from "./hold.js";
import { upstreamError, upstreamOverloaded, upstreamRejected } from "./inference-errors.js";
import { MessageAssembly } from "./message-assembly.js";
import { messagesBody } from "./messages-request.js";
import type { ModelCatalog, TextModel } from "./model-catalog.js";
import { passRaiser } from "./pass-holds.js";
import { type PassRaiser, runsSeveralPasses } from "./passes.js";
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
  /** The tokens a server tool's result is held for before it arrives (see pass-holds.ts). */
  readonly toolResultTokens: bigint;
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
    // A keyed call that may run several passes holds its first and raises at each boundary; an
    // x402 payment cannot be raised, so a keyless call holds (and is authorised for) them all.
    const byPass = given.accountId !== "" && runsSeveralPasses(prepared.spec);
    const spec = byPass ? { ...prepared.spec, passByPass: true } : prepared.spec;
    const held = await holdPaidCall(deps, deps.messagesLimit, given, { spec, route: X402_ROUTE, admitted });
    const { call } = held;
    let billed = billedCall(held, prepared);
    const provider = new ProviderRequest(signal);
    const meter = new StreamMeter();
    const outcome: CallOutcome = { settled: false };
    const sentAt = performance.now();
    try {
      const body = byPass && !prepared.stream ? streamedBody(prepared) : prepared.outgoing;
      const answer = await sendMessages(deps, body, call, prepared, provider, signal);
      const { response } = answer;
      // Only the attempt that answered is charged, and its row names it (docs/providers.md).
      billed = { ...billed, endpoint: answer.endpoint };
      yield { kind: "head", head: messageHead(held, prepared, answer) };
      providerAnswered(deps, call.requestId, sentAt);
      const raise = byPass
        ? passRaiser(deps, billed.placed, prepared.spec, (hold) => {
            billed = { ...billed, placed: hold };
          })
        : undefined;
      if (!prepared.stream) {
        const { text, usage } =
          raise === undefined
            ? await wholeAnswer(deps, billed, response, signal)
            : await assembledAnswer(deps, billed, response, provider, signal, raise);
        const settled = await settleAnswer(deps, billed, usage, outcome);
        yield { kind: "message", body: Buffer.from(text) };
        yield { kind: "settled", ...settled };
        return;
      }
      yield* relayStream(deps, response, provider, meter, signal, call.requestId, raise);
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
    serverTools: prepared.serverTools,
    endpoint: "",
    payment: held.payment,
    outputCap: prepared.outputCap,
  };
}

/** A non-streaming answer as the provider sent it whole, and what it delivered. */
async function wholeAnswer(
  deps: TextInferenceDeps,
  billed: BilledCall,
  response: UpstreamResponse,
  signal: AbortSignal,
): Promise<{ text: string; usage: DeliveredUsage }> {
  const { text, message } = await readAnswer(deps, response, signal, billed.call.requestId);
  return { text, usage: await answerUsage(deps, billed, message) };
}

/**
 * A non-streaming answer to a call held pass by pass: the provider was asked for a stream (the
 * boundaries show only there), relayed through the raises to a message put together from its
 * events. A turn paused at a declined raise is a message with `stop_reason: "pause_turn"`; the
 * provider failing is the error a non-streaming call gets (nothing delivered, nothing charged).
 */
async function assembledAnswer(
  deps: TextInferenceDeps,
  billed: BilledCall,
  response: UpstreamResponse,
  provider: ProviderRequest,
  signal: AbortSignal,
  raise: PassRaiser,
): Promise<{ text: string; usage: DeliveredUsage }> {
  const { requestId } = billed.call;
  const meter = new StreamMeter();
  const assembly = new MessageAssembly();
  for await (const part of relayStream(deps, response, provider, meter, signal, requestId, raise)) {
    if (part.kind !== "event") continue;
    if (part.event === "error") throw streamError(part.data);
    assembly.add(part.event, part.data);
  }
  if (signal.aborted) throw new ConnectError("The client cancelled the call.", Code.Canceled);
  const usage = await streamUsage(deps, billed, meter);
  if (usage === undefined) throw upstreamError("the response carried no message");
  return { text: assembly.text(), usage };
}

/** The error a non-streaming caller gets for a provider's `error` event (its data as sent). */
function streamError(data: string): ConnectError {
  const type = (JSON.parse(data) as { error?: { type?: unknown } }).error?.type;
  if (type === "overloaded_error") return upstreamOverloaded();
  if (type === "rate_limit_error") return upstreamRejected(429, data, undefined);
  if (type === "invalid_request_error") return upstreamRejected(400, data, undefined);
  return upstreamError(`the provider's stream failed (${String(type)})`);
}

/** The call as it goes to the provider, asked for as a stream. */
function streamedBody(prepared: PreparedCall): string {
  return JSON.stringify({ ...messagesBody(prepared.sent), stream: true });
}
