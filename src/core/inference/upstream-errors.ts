/**
 * How a provider's failures reach the caller, shared by text and image calls: a non-200 answer
 * and a failure without an answer, each mapped to the core's error vocabulary. None of them
 * charges anything.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { UpstreamFailure } from "../ports/providers.js";
import { upstreamError, upstreamOverloaded, upstreamRejected, upstreamTimeout } from "./inference-errors.js";

/** Told of failures that the caller sees only masked (the gateway's own provider key refused). */
export type UpstreamErrorSink = (error: unknown, context: string) => void;

/** The error for a non-200 provider answer with this status and body. */
export function upstreamStatusError(
  status: number,
  body: string,
  retryAfter: string | undefined,
  onError: UpstreamErrorSink,
): ConnectError {
  if (status === 529) return upstreamOverloaded();
  if (status === 401 || status === 403) {
    // The provider refused the gateway's own key: not the caller's fault, and not a reason
    // for a client to drop its (valid) gateway key.
    onError(new Error(`provider answered ${status}: ${body}`), "provider credentials");
    return upstreamError(`HTTP ${status} for the gateway's provider credentials`);
  }
  if (status >= 400 && status < 500) return upstreamRejected(status, body, retryAfter || undefined);
  return upstreamError(`HTTP ${status}`);
}

/** A failure without an HTTP answer, as the caller sees it. */
export function upstreamFailureError(
  error: unknown,
  signal: AbortSignal | undefined,
  onError: UpstreamErrorSink,
): ConnectError {
  if (error instanceof ConnectError) return error;
  if (signal?.aborted) return new ConnectError("The client cancelled the call.", Code.Canceled);
  if (error instanceof UpstreamFailure) {
    if (error.kind === "timeout") return upstreamTimeout();
    if (error.kind === "aborted") return new ConnectError("The call was cancelled.", Code.Canceled);
    // The caller gets no provider detail (nor its address); the text path logs it.
    if (error.kind === "malformed") return upstreamError("the response was not in the provider's format");
    return upstreamError(error.kind === "broken" ? "the response broke off" : "unreachable");
  }
  onError(error, "provider call");
  return upstreamError("an unexpected failure");
}
