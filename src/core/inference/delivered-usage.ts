import type { BillingCounters } from "../billing/billing-counters.js";
import type { DeliveredUsage } from "../billing/pricing.js";
import type { Log } from "../ports/log.js";
import { type MessagesRequest, messagesBody } from "./messages-request.js";
import type { ModelCatalog, TextModel } from "./model-catalog.js";
import {
  countWithProvider,
  inputTokensOf,
  type ProviderDeps,
  type ProviderHeaders,
} from "./provider-call.js";
import { billedUsage, contentTexts, type readMessage, type StreamMeter, usageProblem } from "./usage.js";

/** What measuring a call's usage needs. */
export interface UsageDeps extends ProviderDeps {
  readonly models: ModelCatalog;
  /** Where billing anomalies are counted (missing usage). */
  readonly counters: BillingCounters;
  readonly log: Log;
}

/** A call as its usage is measured: who sent it, the request as sent, its model. */
export interface MeasuredCall {
  readonly call: ProviderHeaders & { readonly requestId: string };
  readonly request: MessagesRequest;
  readonly model: TextModel;
  /** The server tools the request carries (its count goes where they can be counted). */
  readonly serverTools: readonly string[];
}

/**
 * How long the provider's counter is given when the gateway measures a call itself (a cut
 * stream's output, an answer without believable usage); past it, the character estimate. Short:
 * the provider is misbehaving already, and the call must settle well before its hold expires.
 */
const MEASURE_TIMEOUT_MS = 10_000;
/** The request fields the provider's token counter takes (docs/protocols.md, "Counting tokens"). */
const COUNT_FIELDS = ["model", "messages", "system", "tools", "tool_choice", "thinking", "output_config"];

/**
 * What a non-streaming answer delivered: its own usage when believable, else the gateway's own
 * count ({@link measured}).
 */
export async function answerUsage(
  deps: UsageDeps,
  measuredCall: MeasuredCall,
  message: ReturnType<typeof readMessage>,
): Promise<DeliveredUsage> {
  const delivered = contentTexts(message.content);
  const problem = usageProblem(message.usage, delivered.length > 0);
  return problem === undefined
    ? billedUsage(message.usage ?? {}, message.model, resolver(deps))
    : await measured(deps, measuredCall, delivered, problem);
}

/**
 * What a stream delivered to the client, or undefined when it is owed nothing: nothing delivered,
 * or a provider failure before any content. A finished message bills its final usage; a stream
 * cut by the client, or failing after some content, its input in full (it was consumed) plus the
 * delivered output, counted with the provider's own counter. A stream whose usage is missing or
 * cannot be true is measured the same way (never a silent $0).
 */
export async function streamUsage(
  deps: UsageDeps,
  measuredCall: MeasuredCall,
  meter: StreamMeter,
): Promise<DeliveredUsage | undefined> {
  if (!meter.started || (meter.failed && !meter.deliveredContent)) return undefined;
  const problem = meter.usageProblem;
  if (problem !== undefined) return measured(deps, measuredCall, meter.deliveredBlocks(), problem);
  if (meter.finished) return meter.reported(resolver(deps));
  const outputTokens = await countDelivered(deps, meter.deliveredBlocks(), measuredCall);
  return { ...meter.reported(resolver(deps)), outputTokens };
}

/** Provider model names → gateway ids, for pricing each pass at its own model. */
function resolver(deps: UsageDeps) {
  return (name: string) => deps.models.resolve(name)?.id ?? name;
}

/**
 * The usage of an answer whose own usage is missing or cannot be true (`problem` says why):
 * the request's input by the provider's own counter, and the delivered output counted the
 * same way (a character estimate when the counter cannot be reached, or answers nonsense).
 * Counted and logged: a provider that stops reporting usage is an incident, not a free call.
 */
async function measured(
  deps: UsageDeps,
  measuredCall: MeasuredCall,
  delivered: string[],
  problem: string,
): Promise<DeliveredUsage> {
  const { call, request } = measuredCall;
  deps.counters.add("missing_usage");
  deps.log.error(
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
      inputTokensOf(
        await countWithProvider(deps, text, call, measuredCall, AbortSignal.timeout(MEASURE_TIMEOUT_MS)),
      ),
    );
    // Every request reads some input: a count of none is the counter failing too.
    if (inputTokens === 0n) throw new Error("the counter says the request has no input");
  } catch (error) {
    deps.log.error(
      { err: error, requestId: call.requestId },
      "counting the input of an answer without usage failed",
    );
    inputTokens = estimate([text]);
  }
  return {
    inputTokens,
    outputTokens: await countDelivered(deps, delivered, measuredCall),
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
async function countDelivered(
  deps: UsageDeps,
  blocks: string[],
  measuredCall: MeasuredCall,
): Promise<bigint> {
  if (blocks.length === 0) return 0n;
  const { model, call } = measuredCall;
  // Text blocks only: no tool goes with these counts.
  const route = { model, serverTools: [] };
  const body = (extra: string[]) =>
    JSON.stringify({
      model: model.upstreamId,
      messages: [{ role: "user", content: [".", ...extra].map((text) => ({ type: "text", text })) }],
    });
  try {
    const signal = AbortSignal.timeout(MEASURE_TIMEOUT_MS);
    const [withBlocks, alone] = await Promise.all([
      countWithProvider(deps, body(blocks), call, route, signal),
      countWithProvider(deps, body([]), call, route, signal),
    ]);
    const tokens = inputTokensOf(withBlocks) - inputTokensOf(alone);
    if (tokens < 1) throw new Error(`the counter says delivered text has ${tokens} tokens`);
    return BigInt(tokens);
  } catch (error) {
    deps.log.error({ err: error, requestId: call.requestId }, "counting delivered output failed");
    return estimate(blocks);
  }
}

/** The gateway's own token estimate of texts: one token per four characters, rounded up. */
function estimate(texts: readonly string[]): bigint {
  return BigInt(Math.ceil(texts.reduce((n, text) => n + text.length, 0) / 4));
}
