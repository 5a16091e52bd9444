import type { ConnectError } from "@connectrpc/connect";
import type { Log } from "../ports/log.js";
import type { Metrics } from "../ports/metrics.js";
import {
  type TextUpstream,
  type UpstreamCall,
  UpstreamFailure,
  type UpstreamResponse,
} from "../ports/providers.js";
import type { TextModel } from "./model-catalog.js";
import { readBody } from "./read-body.js";
import { type UpstreamErrorSink, upstreamFailureError, upstreamStatusError } from "./upstream-errors.js";
import { readMessage } from "./usage.js";

/** What calling the provider needs. */
export interface ProviderDeps {
  readonly upstream: TextUpstream;
  /** Told how long the provider took to answer each call. */
  readonly metrics: Metrics;
  /** Told of the provider's failures masked for the caller. */
  readonly log: Log;
}

/**
 * What a router chooses a call's endpoint by (docs/providers.md): the gateway model and the
 * server tools the request carries. Sent on every provider request, the counts included.
 */
export interface ProviderRoute {
  readonly model: TextModel;
  readonly serverTools: readonly string[];
}

/** The protocol headers a call to the provider carries. */
export interface ProviderHeaders {
  readonly anthropicVersion: string;
  readonly anthropicBeta: string;
  readonly requestId?: string | undefined;
}

const DEFAULT_ANTHROPIC_VERSION = "2023-06-01";
/** Why a call's provider request is aborted once the call is over. */
const CALL_ENDED = Object.freeze(new Error("the call ended"));
/** An error body from the provider is read up to this size; more is a broken provider. */
const ERROR_BODY_LIMIT = 1024 * 1024;
/** A non-streaming answer is read up to this size (128k output tokens is well under). */
const MESSAGE_BODY_LIMIT = 64 * 1024 * 1024;

/**
 * The provider request of one call: aborted when the caller's `signal` is, and by {@link end}
 * once the call is over. {@link close} also stops following the caller's signal.
 */
export class ProviderRequest {
  private readonly abort = new AbortController();
  private readonly onAbort = () => this.abort.abort();

  constructor(private readonly caller: AbortSignal) {
    caller.addEventListener("abort", this.onAbort, { once: true });
  }

  get signal(): AbortSignal {
    return this.abort.signal;
  }

  /**
   * Frees the provider connection if the answer was cut short (a no-op after a full read). A
   * shared reason: abort() without one builds a DOMException and its stack every call.
   */
  end(): void {
    this.abort.abort(CALL_ENDED);
  }

  close(): void {
    this.caller.removeEventListener("abort", this.onAbort);
    this.end();
  }
}

/** A provider's 200 to a messages call, and the request id it gave it ("" when none). */
export interface ProviderAnswer {
  readonly response: UpstreamResponse;
  readonly upstreamRequestId: string;
  /** The configured name of the endpoint that answered; "" when there is no router. */
  readonly endpoint: string;
}

/** Sends a messages call of `body` to the provider; anything but a 200 is the matching error. */
export async function sendMessages(
  deps: ProviderDeps,
  body: string | Uint8Array,
  headers: ProviderHeaders,
  route: ProviderRoute,
  request: ProviderRequest,
  signal: AbortSignal,
): Promise<ProviderAnswer> {
  const response = await send(
    deps,
    {
      path: "/v1/messages",
      body,
      anthropicVersion: headers.anthropicVersion || DEFAULT_ANTHROPIC_VERSION,
      anthropicBeta: headers.anthropicBeta,
      signal: request.signal,
      ...routeOf(route),
    },
    signal,
    headers.requestId,
  );
  return {
    response,
    upstreamRequestId: headerValue(response.headers["request-id"]),
    endpoint: response.endpoint ?? "",
  };
}

/** Reports the provider's latency for a call sent at `sentAt` (performance.now()). */
export function providerAnswered(deps: ProviderDeps, requestId: string, sentAt: number): void {
  deps.metrics.providerAnswered(requestId, "text", (performance.now() - sentAt) / 1000);
}

/**
 * A non-streaming answer, read whole and checked to be a message: a body cut short, too large
 * or not a message is the provider failing (nothing delivered, nothing charged).
 */
export async function readAnswer(
  deps: ProviderDeps,
  response: UpstreamResponse,
  signal: AbortSignal,
  requestId: string,
) {
  try {
    const text = await readBody(response.body, MESSAGE_BODY_LIMIT);
    return { text, message: readMessage(text) };
  } catch (error) {
    if (error instanceof UpstreamFailure && error.kind === "malformed")
      deps.log.error({ err: error, requestId }, "provider answered 200 with no message");
    throw providerFailure(deps, error, signal, requestId);
  }
}

/** Calls the provider's count endpoint; returns its JSON text. */
export async function countWithProvider(
  deps: ProviderDeps,
  body: string | Uint8Array,
  headers: ProviderHeaders,
  route: ProviderRoute,
  signal?: AbortSignal,
): Promise<string> {
  const response = await send(
    deps,
    {
      path: "/v1/messages/count_tokens",
      body,
      anthropicVersion: headers.anthropicVersion || DEFAULT_ANTHROPIC_VERSION,
      anthropicBeta: headers.anthropicBeta,
      signal,
      ...routeOf(route),
    },
    undefined,
    headers.requestId,
  );
  return readBody(response.body, ERROR_BODY_LIMIT).catch((error: unknown) => {
    throw providerFailure(deps, error, undefined, headers.requestId);
  });
}

/** The input tokens of a count answer's JSON text; throws when it has no whole count. */
export function inputTokensOf(text: string): number {
  const tokens = (JSON.parse(text) as { input_tokens?: unknown }).input_tokens;
  if (typeof tokens !== "number" || !Number.isSafeInteger(tokens) || tokens < 0)
    throw new Error(`a count without a whole input_tokens: ${JSON.stringify(tokens)}`);
  return tokens;
}

/** A failure without an HTTP answer, as the caller sees it. */
export function providerFailure(
  deps: ProviderDeps,
  error: unknown,
  signal?: AbortSignal,
  requestId?: string,
): ConnectError {
  return upstreamFailureError(error, signal, sink(deps, requestId));
}

/** A header's (first) value, "" when absent. */
export function headerValue(value: string | string[] | undefined): string {
  return (Array.isArray(value) ? value[0] : value) ?? "";
}

/** The routing fields of a provider request. */
function routeOf(route: ProviderRoute): Pick<UpstreamCall, "model" | "serverTools"> {
  return {
    model: { id: route.model.id, sent: route.model.upstreamId },
    serverTools: route.serverTools,
  };
}

/** Sends to the provider; anything but a 200 becomes the matching error (the body is read). */
async function send(
  deps: ProviderDeps,
  upstreamCall: UpstreamCall,
  signal?: AbortSignal,
  requestId?: string,
): Promise<UpstreamResponse> {
  let response: UpstreamResponse;
  try {
    response = await deps.upstream.send(upstreamCall);
  } catch (error) {
    throw providerFailure(deps, error, signal, requestId);
  }
  if (response.status === 200) return response;
  const body = await readBody(response.body, ERROR_BODY_LIMIT).catch(() => "");
  throw upstreamStatusError(
    response.status,
    body,
    headerValue(response.headers["retry-after"]),
    sink(deps, requestId),
  );
}

/** Where the provider's masked failures of request `requestId` are logged. */
function sink(deps: ProviderDeps, requestId: string | undefined): UpstreamErrorSink {
  return (error, context) => deps.log.error({ err: error, requestId }, context);
}
