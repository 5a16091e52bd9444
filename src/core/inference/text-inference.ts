import { Code, type ConnectError } from "@connectrpc/connect";
import type { BillingCounters } from "../billing/billing-counters.js";
import type { CallBilling } from "../billing/call-billing.js";
import type { DeliveredUsage, TextCallSpec } from "../billing/pricing.js";
import type { X402Authorisation, X402Payments } from "../billing/x402.js";
import { x402NotTaken } from "../errors.js";
import type { HoldRow, HoldState } from "../ports/ledger.js";
import type { Log } from "../ports/log.js";
import type { Metrics } from "../ports/metrics.js";
import {
  type SseFrame,
  type TextUpstream,
  type UpstreamCall,
  UpstreamFailure,
  type UpstreamResponse,
} from "../ports/providers.js";
import type { RateLimitDecision, RateLimiter } from "../ports/rate-limits.js";
import type { X402Settlement } from "../ports/x402.js";
import { readBillableFeatures } from "./billable-features.js";
import { type ClientPolicy, clientAllowed } from "./client-policy.js";
import {
  clientNotAllowed,
  insufficientFundsForCall,
  modelNotFound,
  rateLimited,
  upstreamError,
} from "./inference-errors.js";
import { inputTokenBound } from "./input-bound.js";
import { withKeepAlive } from "./keep-alive.js";
import {
  encodeMessagesRequest,
  type MessagesRequest,
  messagesBody,
  parseMessagesRequest,
} from "./messages-request.js";
import type { ModelCatalog, TextModel } from "./model-catalog.js";
import { readBody } from "./read-body.js";
import { repairView } from "./repair.js";
import { StreamShape } from "./stream-shape.js";
import { type UpstreamErrorSink, upstreamFailureError, upstreamStatusError } from "./upstream-errors.js";
import {
  billedUsage,
  contentTexts,
  type ModelResolver,
  readMessage,
  StreamMeter,
  usageProblem,
} from "./usage.js";

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

/** A paying caller's text call, as the Inference service hands it over. */
export interface TextCall {
  /** "" for a call without a key: it pays with {@link payment} (x402). */
  readonly accountId: string;
  readonly keyId: string;
  readonly requestId: string;
  readonly body: Uint8Array;
  readonly anthropicVersion: string;
  readonly anthropicBeta: string;
  readonly billingChain: string;
  readonly userAgent: string;
  /** A keyless call's x402 payment (the PAYMENT-SIGNATURE value); "" when none. */
  readonly payment: string;
  /** The gateway's origin as the facade saw it, for an x402 offer's resource URL. */
  readonly origin: string | undefined;
}

/** Everything known before the first byte of an answer. */
export interface MessageHead {
  readonly requestId: string;
  readonly billingChain: string;
  readonly model: string;
  readonly repairedParams: readonly string[];
  /** The client's max_tokens when it was clamped, else undefined. */
  readonly clampedFrom: number | undefined;
  readonly rateLimit: RateLimitDecision;
  readonly stream: boolean;
  readonly upstreamRequestId: string;
}

/**
 * One piece of an answer: the head first, then one message or a run of events, then — when the
 * call ran to its end — what it was charged (in the chain's ledger units), once settled.
 */
export type MessagePart =
  | { readonly kind: "head"; readonly head: MessageHead }
  | { readonly kind: "message"; readonly body: Uint8Array }
  | { readonly kind: "event"; readonly event: string; readonly data: string }
  | { readonly kind: "comment"; readonly text: string }
  | {
      readonly kind: "settled";
      readonly charge: bigint;
      readonly state: HoldState;
      /** An x402 call's collection, as its PAYMENT-RESPONSE header says it (non-streaming only). */
      readonly paymentResponse?: string;
    };

/** A count_tokens answer. */
export interface TokenCount {
  readonly inputTokens: number;
  readonly body: Uint8Array;
  readonly rateLimit: RateLimitDecision;
  readonly repairedParams: readonly string[];
}

const DEFAULT_ANTHROPIC_VERSION = "2023-06-01";
/** Why a call's provider request is aborted once the call is over. */
const CALL_ENDED = Object.freeze(new Error("the call ended"));
/** An error body from the provider is read up to this size; more is a broken provider. */
const ERROR_BODY_LIMIT = 1024 * 1024;
/** A non-streaming answer is read up to this size (128k output tokens is well under). */
const MESSAGE_BODY_LIMIT = 64 * 1024 * 1024;
const GATEWAY_PING = JSON.stringify({ type: "ping" });
/**
 * How long the provider's counter is given when the gateway measures a call itself (a cut
 * stream's output, an answer without believable usage); past it, the character estimate. Short:
 * the provider is misbehaving already, and the call must settle well before its hold expires.
 */
const MEASURE_TIMEOUT_MS = 10_000;
/** The request fields the provider's token counter takes (docs/protocols.md, "Counting tokens"). */
const COUNT_FIELDS = ["model", "messages", "system", "tools", "tool_choice", "thinking", "output_config"];

/**
 * Text calls, end to end: policy, rate limit, validation and repair, the hold, the provider
 * call, the relay, and the settlement of what was delivered. Transport-free: the Inference
 * service adapts it to RPCs.
 */
export class TextInference {
  /** Provider model names → gateway ids, for pricing each pass at its own model. */
  private readonly resolveModel: ModelResolver;

  constructor(private readonly deps: TextInferenceDeps) {
    this.resolveModel = (name) => deps.models.resolve(name)?.id ?? name;
  }

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
    this.checkClient(given.userAgent);
    const keyless = given.accountId === "";
    if (keyless && this.deps.x402 === undefined) throw x402NotTaken();
    // A keyless call is limited per payer, once its payment says who pays.
    let rateLimit = keyless ? undefined : await this.admit(this.deps.messagesLimit, given.keyId);
    const request = parseMessagesRequest(given.body, "create");
    const model = this.model(request.view.model);
    const { sent, repaired, repair, features } = this.prepare(request, model);
    const spec: TextCallSpec = {
      kind: "text",
      model: model.id,
      inputTokens: inputTokenBound(given.body.byteLength, request.rest, model),
      // max_tokens is at least 1 (parseMessagesRequest): the hold is never zero-sized.
      maxTokens: BigInt(repair.maxTokens),
      ...features,
    };
    let call = given;
    let payment: X402Authorisation | undefined;
    if (keyless) {
      // x402 `upto`: the payment must authorise at least the call's worst case.
      payment = await this.deps.x402!.pay({
        header: given.payment,
        route: { kind: "text", path: "/x402/v1/messages" },
        chainField: given.billingChain,
        requestId: given.requestId,
        origin: given.origin,
        quote: (chain) => this.deps.billing.quoteOn(chain, spec),
      });
      call = { ...given, accountId: payment.accountId, billingChain: payment.chain.id };
    }
    let hold: HoldState;
    try {
      rateLimit ??= await this.admit(this.deps.messagesLimit, `x402:${payment!.payer}`);
      hold = await this.hold(call, spec);
    } catch (error) {
      if (payment !== undefined) await this.deps.x402!.close(payment, 0n, undefined);
      throw error;
    }
    const placed = hold.hold;
    const billed: BilledCall = { placed, call, request: sent, model, outputCap: outputCap(spec) };
    const upstreamAbort = new AbortController();
    const onAbort = () => upstreamAbort.abort();
    signal.addEventListener("abort", onAbort, { once: true });
    const meter = new StreamMeter();
    let outcome: "pending" | "settled" = "pending";
    const sentAt = performance.now();
    try {
      const response = await this.send(
        {
          path: "/v1/messages",
          body: this.outgoingBody(request, sent, call.body),
          anthropicVersion: call.anthropicVersion || DEFAULT_ANTHROPIC_VERSION,
          anthropicBeta: call.anthropicBeta,
          signal: upstreamAbort.signal,
        },
        signal,
        call.requestId,
      );
      yield {
        kind: "head",
        head: {
          requestId: call.requestId,
          billingChain: hold.hold.chain,
          model: model.id,
          repairedParams: repaired,
          clampedFrom: repair.clampedFrom,
          rateLimit,
          stream: request.view.stream,
          upstreamRequestId: headerValue(response.headers["request-id"]),
        },
      };
      if (request.view.stream) this.providerAnswered(call, sentAt);
      else {
        const { text, message } = await this.readAnswer(response, signal, call.requestId);
        this.providerAnswered(call, sentAt);
        const delivered = contentTexts(message.content);
        const problem = usageProblem(message.usage, delivered.length > 0);
        const usage =
          problem === undefined
            ? billedUsage(message.usage ?? {}, message.model, this.resolveModel)
            : await this.measured(billed, delivered, problem);
        // x402: the charge is collected before the answer is handed over; a payment the chain
        // refuses gets nothing (402, the hold released in `finally`). Once collected, the hold
        // is the recovery pass's should the settle below not happen: never released.
        let collected: X402Settlement | undefined;
        if (payment !== undefined) {
          const charge = this.deps.billing.chargeFor(placed, capOutput(usage, billed.outputCap));
          if (charge > 0n) {
            // Collected or refused, the hold is no longer this call's to release.
            outcome = "settled";
            collected = await this.deps.x402!.collectBeforeDelivery(payment, charge, () =>
              this.deps.billing.release(placed.id),
            );
          }
        }
        const state = await this.settle(billed, usage);
        outcome = "settled";
        const paymentResponse =
          payment === undefined ? undefined : await this.closePaid(payment, state, collected);
        yield { kind: "message", body: Buffer.from(text) };
        yield { kind: "settled", charge: chargeOf(state), state, paymentResponse };
        return;
      }
      yield* this.relay(response, meter, signal, call.requestId);
      // The caller left (the relay ends quietly): settled below, with nobody left to tell.
      if (signal.aborted) return;
      upstreamAbort.abort(CALL_ENDED);
      outcome = "settled";
      const state = await this.finish(billed, meter);
      // A stream's headers went out: its collection runs on, and its receipt says how it went.
      if (payment !== undefined && state !== undefined)
        this.deps.x402!.collectLater(payment, chargeOf(state), call.requestId);
      if (state !== undefined && !signal.aborted) yield { kind: "settled", charge: chargeOf(state), state };
    } finally {
      signal.removeEventListener("abort", onAbort);
      // Frees the provider connection if the answer was cut short (a no-op after a full read).
      // A shared reason: abort() without one builds a DOMException and its stack every call.
      upstreamAbort.abort(CALL_ENDED);
      if (outcome === "pending") {
        const state = await this.finish(billed, meter);
        if (payment !== undefined && state !== undefined)
          this.deps.x402!.collectLater(payment, chargeOf(state), call.requestId);
        if (meter.started && state !== undefined)
          this.deps.log.info(
            { requestId: call.requestId, chain: placed.chain, charge: `${chargeOf(state)}` },
            "settled after its caller stopped reading",
          );
      }
    }
  }

  /**
   * Closes a settled non-streaming call's payment, collected before (`collected`, undefined when
   * the call charged nothing); the PAYMENT-RESPONSE value, or undefined when nothing was
   * collected. A failure to record it is logged (the payment stays collected, for the recovery
   * pass), never turned into a failed answer: the call was delivered and paid.
   */
  private async closePaid(
    payment: X402Authorisation,
    state: HoldState,
    collected: X402Settlement | undefined,
  ): Promise<string | undefined> {
    try {
      await this.deps.x402!.close(payment, chargeOf(state), collected);
    } catch (error) {
      this.deps.log.error(
        { err: error, requestId: state.hold.requestId, payment: payment.id },
        "recording an x402 payment failed",
      );
    }
    return collected === undefined ? undefined : this.deps.x402!.responseHeader(collected);
  }

  /** Reports the provider's latency for a call sent at `sentAt` (performance.now()). */
  private providerAnswered(call: TextCall, sentAt: number): void {
    this.deps.metrics.providerAnswered(call.requestId, "text", (performance.now() - sentAt) / 1000);
  }

  /**
   * A non-streaming answer, read whole and checked to be a message: a body cut short, too large
   * or not a message is the provider failing (nothing delivered, nothing charged).
   */
  private async readAnswer(response: UpstreamResponse, signal: AbortSignal, requestId: string) {
    try {
      const text = await readBody(response.body, MESSAGE_BODY_LIMIT);
      return { text, message: readMessage(text) };
    } catch (error) {
      if (error instanceof UpstreamFailure && error.kind === "malformed")
        this.deps.log.error({ err: error, requestId }, "provider answered 200 with no message");
      throw this.failure(error, signal, requestId);
    }
  }

  /**
   * Holds the call's worst case. When the wallet cannot cover it, the refusal also says the
   * largest max_tokens it could cover for this same request (0 when not even one token fits).
   */
  private async hold(call: TextCall, spec: TextCallSpec) {
    const input = {
      accountId: call.accountId,
      requestId: call.requestId,
      keyId: call.keyId,
      chain: call.billingChain,
      call: spec,
    };
    const held = await this.deps.billing.holdOrFit(input);
    if (held.kind === "held") return held.state;
    throw insufficientFundsForCall(held.refusal, held.maxTokensThatFit ?? 0n);
  }

  /** Counts a request's input tokens with the provider's counter; not funds-gated, not billed. */
  async countTokens(
    call: Omit<TextCall, "accountId" | "billingChain" | "requestId" | "payment" | "origin"> & {
      readonly requestId?: string;
    },
  ): Promise<TokenCount> {
    this.checkClient(call.userAgent);
    const rateLimit = await this.admit(this.deps.countTokensLimit, call.keyId);
    const request = parseMessagesRequest(call.body, "count_tokens");
    const model = this.model(request.view.model);
    // The same repair, tool checks and model names as a call: what can be counted can be sent.
    const { sent, repaired } = this.prepare(request, model);
    const text = await this.count(this.outgoingBody(request, sent, call.body), call);
    let inputTokens: number;
    try {
      inputTokens = inputTokensOf(text);
    } catch (error) {
      this.deps.log.error(
        { err: error, requestId: call.requestId },
        "provider answered count_tokens with no count",
      );
      throw upstreamError("a count without input_tokens");
    }
    return { inputTokens, body: Buffer.from(text), rateLimit, repairedParams: repaired };
  }

  /**
   * Repairs a parsed request for its model and reads its billable features: the request as it
   * goes upstream, and every change made (the x-gateway-repaired-params list).
   */
  private prepare(request: MessagesRequest, model: TextModel) {
    const repair = repairView(request.view, model, request.call);
    const billable = readBillableFeatures(request.rest, this.deps.models, this.deps.webSearchMaxUses);
    const sent: MessagesRequest = { ...request, view: repair.view, rest: billable.rest };
    const repaired = [...repair.repaired, ...billable.repaired];
    return { sent, repaired, repair, features: billable.features };
  }

  /**
   * The body the provider gets. When repair and the feature reader changed nothing (they hand
   * back their very inputs), the caller's bytes go as they came: no re-serialisation of what can
   * be a 100 KB body, and what the client sent is what is billed.
   */
  private outgoingBody(
    request: MessagesRequest,
    sent: MessagesRequest,
    body: Uint8Array,
  ): string | Uint8Array {
    const untouched = sent.view === request.view && sent.rest === request.rest;
    return untouched ? body : encodeMessagesRequest(sent);
  }

  /**
   * Relays events as they arrive, recording each one the consumer took. Each event is checked
   * to be the format's before it goes out ({@link StreamShape}); `message_stop` or `error` ends
   * the relay (whatever follows is read and dropped). A stream
   * that turns to garbage, breaks, stalls past the idle timeout, runs past the response timeout
   * or ends before `message_stop` ends with the gateway's own `error` event instead.
   */
  private async *relay(
    response: UpstreamResponse,
    meter: StreamMeter,
    signal: AbortSignal,
    requestId: string,
  ): AsyncGenerator<MessagePart> {
    const frames = withKeepAlive<SseFrame, "ping">(
      this.deps.upstream.frames(response.body),
      this.deps.streamPingMs,
      "ping",
    );
    const shape = new StreamShape();
    try {
      for await (const frame of frames) {
        if (shape.ended) {
          // Read to its end, so the connection can be reused; a provider silent past one ping
          // interval after the end is left (the abort at the call's end closes it).
          if (frame === "ping") return;
          continue;
        }
        if (frame === "ping") {
          yield { kind: "event", event: "ping", data: GATEWAY_PING };
        } else if (frame.kind === "comment") {
          yield { kind: "comment", text: frame.text };
        } else {
          shape.check(frame.event, frame.data);
          yield { kind: "event", event: frame.event, data: frame.data };
          // Reached only once the consumer asked for more: this event was delivered.
          meter.delivered(frame.event, frame.data);
        }
      }
      if (!shape.ended) throw new UpstreamFailure("broken", "upstream stream ended before message_stop");
    } catch (error) {
      // After message_stop the client has its whole answer: what the provider does next is its own.
      if (signal.aborted || shape.ended) return;
      const failure = this.failure(error, signal, requestId);
      this.deps.log.error({ err: error, requestId }, "provider stream broke off");
      const data = JSON.stringify({
        type: "error",
        error: {
          type: failure.code === Code.DeadlineExceeded ? "timeout_error" : "api_error",
          message: failure.rawMessage.replace("nothing was charged", "only what was delivered is charged"),
        },
      });
      yield { kind: "event", event: "error", data };
      meter.delivered("error", data);
    }
  }

  /**
   * Settles a stream for what reached the client, returning the charge (undefined when the
   * settle failed: the hold is then left to the sweeper). A finished message bills its final usage.
   * Otherwise: nothing delivered, or a provider failure before any content → nothing charged;
   * a stream cut by the client, or failing after some content → its input in full (it was
   * consumed) plus the delivered output, counted with the provider's own counter. A stream whose
   * usage is missing or cannot be true is measured the same way (never a silent $0).
   */
  private async finish(billed: BilledCall, meter: StreamMeter): Promise<HoldState | undefined> {
    const { placed, call } = billed;
    try {
      if (!meter.started || (meter.failed && !meter.deliveredContent)) {
        return await this.deps.billing.release(placed.id);
      }
      const problem = meter.usageProblem;
      if (problem !== undefined) {
        return await this.settle(billed, await this.measured(billed, meter.deliveredBlocks(), problem));
      }
      if (meter.finished) return await this.settle(billed, meter.reported(this.resolveModel));
      const outputTokens = await this.countDelivered(meter.deliveredBlocks(), billed);
      return await this.settle(billed, { ...meter.reported(this.resolveModel), outputTokens });
    } catch (error) {
      this.deps.log.error(
        { err: error, requestId: call.requestId, holdId: placed.id },
        "settling a stream failed",
      );
      return undefined;
    }
  }

  /**
   * The usage of an answer whose own usage is missing or cannot be true (`problem` says why):
   * the request's input by the provider's own counter, and the delivered output counted the
   * same way (a character estimate when the counter cannot be reached, or answers nonsense).
   * Counted and logged: a provider that stops reporting usage is an incident, not a free call.
   */
  private async measured(billed: BilledCall, delivered: string[], problem: string): Promise<DeliveredUsage> {
    const { call, request } = billed;
    this.deps.counters.add("missing_usage");
    this.deps.log.error(
      { requestId: call.requestId, problem },
      "the provider's usage cannot be billed; charging the gateway's own count",
    );
    const sent = messagesBody(request);
    const countBody: Record<string, unknown> = {};
    for (const field of COUNT_FIELDS) if (sent[field] !== undefined) countBody[field] = sent[field];
    const text = JSON.stringify(countBody);
    let inputTokens: bigint;
    try {
      inputTokens = BigInt(
        inputTokensOf(await this.count(text, call, AbortSignal.timeout(MEASURE_TIMEOUT_MS))),
      );
      // Every request reads some input: a count of none is the counter failing too.
      if (inputTokens === 0n) throw new Error("the counter says the request has no input");
    } catch (error) {
      this.deps.log.error(
        { err: error, requestId: call.requestId },
        "counting the input of an answer without usage failed",
      );
      inputTokens = estimate([text]);
    }
    return {
      inputTokens,
      outputTokens: await this.countDelivered(delivered, billed),
      cacheWrite5mTokens: 0n,
      cacheWrite1hTokens: 0n,
      cacheReadTokens: 0n,
      images: 0,
    };
  }

  /**
   * Output tokens in the delivered blocks, by the provider's counter: the count of a message
   * holding them as text blocks after a one-character block, less the count of that
   * one-character message alone. Falls back to a character estimate (4 per token) when the
   * counter cannot be reached in {@link MEASURE_TIMEOUT_MS}, or says delivered text has none.
   */
  private async countDelivered(blocks: string[], billed: BilledCall): Promise<bigint> {
    if (blocks.length === 0) return 0n;
    const { model, call } = billed;
    const body = (extra: string[]) =>
      JSON.stringify({
        model: model.upstreamId,
        messages: [{ role: "user", content: [".", ...extra].map((text) => ({ type: "text", text })) }],
      });
    try {
      const signal = AbortSignal.timeout(MEASURE_TIMEOUT_MS);
      const [withBlocks, alone] = await Promise.all([
        this.count(body(blocks), call, signal),
        this.count(body([]), call, signal),
      ]);
      const tokens = inputTokensOf(withBlocks) - inputTokensOf(alone);
      if (tokens < 1) throw new Error(`the counter says delivered text has ${tokens} tokens`);
      return BigInt(tokens);
    } catch (error) {
      this.deps.log.error({ err: error, requestId: call.requestId }, "counting delivered output failed");
      return estimate(blocks);
    }
  }

  /** Calls the provider's count endpoint; returns its JSON text. */
  private async count(
    body: string | Uint8Array,
    call: { anthropicVersion: string; anthropicBeta: string; requestId?: string },
    signal?: AbortSignal,
  ) {
    const response = await this.send(
      {
        path: "/v1/messages/count_tokens",
        body,
        anthropicVersion: call.anthropicVersion || DEFAULT_ANTHROPIC_VERSION,
        anthropicBeta: call.anthropicBeta,
        signal,
      },
      undefined,
      call.requestId,
    );
    return readBody(response.body, ERROR_BODY_LIMIT).catch((error: unknown) => {
      throw this.failure(error, undefined, call.requestId);
    });
  }

  /** Sends to the provider; anything but a 200 becomes the matching error (the body is read). */
  private async send(
    upstreamCall: UpstreamCall,
    signal?: AbortSignal,
    requestId?: string,
  ): Promise<UpstreamResponse> {
    let response: UpstreamResponse;
    try {
      response = await this.deps.upstream.send(upstreamCall);
    } catch (error) {
      throw this.failure(error, signal, requestId);
    }
    if (response.status === 200) return response;
    const body = await readBody(response.body, ERROR_BODY_LIMIT).catch(() => "");
    throw upstreamStatusError(
      response.status,
      body,
      headerValue(response.headers["retry-after"]),
      this.sink(requestId),
    );
  }

  /** A failure without an HTTP answer, as the caller sees it. */
  private failure(error: unknown, signal?: AbortSignal, requestId?: string): ConnectError {
    return upstreamFailureError(error, signal, this.sink(requestId));
  }

  /** Where the provider's masked failures of request `requestId` are logged. */
  private sink(requestId: string | undefined): UpstreamErrorSink {
    return (error, context) => this.deps.log.error({ err: error, requestId }, context);
  }

  /**
   * Settles what was delivered; anything the price could not account for is counted and logged.
   * A single-pass call is never charged more output than its max_tokens allows (a provider
   * reporting more went beyond its own limits); every call is capped at its hold.
   */
  private async settle(billed: BilledCall, delivered: DeliveredUsage): Promise<HoldState> {
    const { placed, call } = billed;
    const usage = capOutput(delivered, billed.outputCap);
    const { state, capped, priced } = await this.deps.billing.settleDelivered(placed, usage);
    if (priced.unpriced.length > 0) {
      this.deps.counters.add("unpriced_usage");
      this.deps.log.error(
        { requestId: call.requestId, holdId: placed.id, unpriced: priced.unpriced },
        "usage the gateway cannot price; charged what it knows",
      );
    }
    if (capped || usage !== delivered) {
      this.deps.counters.add("capped_charge");
      this.deps.log.error(
        { requestId: call.requestId, holdId: placed.id, maxTokens: billed.outputCap },
        capped
          ? "the delivered usage exceeded the call's hold; the charge was capped at the hold"
          : "the provider reported more output than max_tokens; charged max_tokens",
      );
    }
    return state;
  }

  private checkClient(userAgent: string): void {
    if (!clientAllowed(this.deps.clientPolicy, userAgent)) throw clientNotAllowed();
  }

  private async admit(limiter: RateLimiter, keyId: string): Promise<RateLimitDecision> {
    const decision = await limiter.consume(keyId);
    if (!decision.allowed) throw rateLimited(decision, this.deps.now());
    return decision;
  }

  private model(name: string): TextModel {
    const model = this.deps.models.resolve(name);
    if (model === undefined)
      throw modelNotFound(
        name,
        this.deps.models.models.map((m) => m.id),
      );
    return model;
  }
}

/** One running call as settlement needs it: its hold, the request as sent, and the output cap. */
interface BilledCall {
  readonly placed: HoldRow;
  readonly call: TextCall;
  readonly request: MessagesRequest;
  readonly model: TextModel;
  /** The most output tokens the call can bill; undefined when several passes may write. */
  readonly outputCap: bigint | undefined;
}

/**
 * The output ceiling of a call that samples once: its (clamped) max_tokens. A server-tool loop,
 * fallbacks, an advisor or compaction write several passes, each up to its own limit: those calls
 * are bounded by their hold only.
 */
function outputCap(spec: TextCallSpec): bigint | undefined {
  const passes =
    spec.serverToolLoop === true ||
    (spec.fallbacks?.length ?? 0) > 0 ||
    spec.defaultFallback === true ||
    spec.advisor !== undefined ||
    spec.compaction === true;
  return passes ? undefined : spec.maxTokens;
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

/** The gateway's own token estimate of texts: one token per four characters, rounded up. */
function estimate(texts: readonly string[]): bigint {
  return BigInt(Math.ceil(texts.reduce((n, text) => n + text.length, 0) / 4));
}

function headerValue(value: string | string[] | undefined): string {
  return (Array.isArray(value) ? value[0] : value) ?? "";
}

function inputTokensOf(text: string): number {
  const tokens = (JSON.parse(text) as { input_tokens?: unknown }).input_tokens;
  if (typeof tokens !== "number" || !Number.isSafeInteger(tokens) || tokens < 0)
    throw new Error(`a count without a whole input_tokens: ${JSON.stringify(tokens)}`);
  return tokens;
}

/** What a resolved call was charged (0 when released). */
function chargeOf(state: HoldState): bigint {
  return state.resolution?.amount ?? 0n;
}
