import { Code, type ConnectError } from "@connectrpc/connect";
import { errorInfo, reasonError } from "../errors.js";
import { type RateLimitDecision, refusalMetadata, retryAfterSeconds } from "../ports/rate-limits.js";

/** The request names a model the gateway does not serve (404 not_found_error on the facade). */
export const modelNotFound = (model: string, allowed: readonly string[]): ConnectError =>
  reasonError(
    Code.NotFound,
    "MODEL_NOT_FOUND",
    `model: ${JSON.stringify(model)} is not served here; use one of ${allowed.join(", ")}.`,
    { model, allowed: allowed.join(",") },
  );

/** The key is over its request rate; metadata says when to come back. */
export const rateLimited = (decision: RateLimitDecision, now: number): ConnectError =>
  reasonError(
    Code.ResourceExhausted,
    "RATE_LIMITED",
    `Rate limit of ${decision.limit} requests per minute for this key reached; retry in ${retryAfterSeconds(decision)} s.`,
    { ...refusalMetadata(decision, now), remaining: "0" },
  );

/**
 * A text call the wallet cannot cover (402 billing_error): the billing refusal, plus the
 * largest `max_tokens` the balance covers for this same request (metadata
 * `max_tokens_affordable`; 0 when not even one output token fits).
 */
export const insufficientFundsForCall = (
  refusal: ConnectError,
  affordable: bigint,
  onePass = false,
): ConnectError => {
  const metadata = { ...(errorInfo(refusal)?.metadata ?? {}), max_tokens_affordable: `${affordable}` };
  // A call held pass by pass was refused on its first pass alone: the later ones are raised as it runs.
  const pass = onePass
    ? " That is one pass of the call (its tools' later passes are held as they start, docs/billing.md)."
    : "";
  const hint =
    affordable > 0n
      ? ` This request would fit with max_tokens up to ${affordable}.`
      : " Not even max_tokens 1 would fit: the request's input alone needs more.";
  return reasonError(refusal.code, "INSUFFICIENT_FUNDS", `${refusal.rawMessage}${pass}${hint}`, metadata);
};

/** The deployment admits only the Claude Code CLI for text calls. */
export const clientNotAllowed = (): ConnectError =>
  reasonError(
    Code.PermissionDenied,
    "CLIENT_NOT_ALLOWED",
    "This gateway only admits the Claude Code CLI for text calls (client policy coding-agent-only).",
  );

/** The operator token is not an account: it cannot pay for calls. */
export const payingCallerRequired = (): ConnectError =>
  reasonError(
    Code.PermissionDenied,
    "OPERATOR_ONLY",
    "Model calls are billed to an account: present an API key, not the operator token.",
  );

/** The provider answered 4xx: the caller gets its status and body verbatim. */
export const upstreamRejected = (
  status: number,
  body: string,
  retryAfter: string | undefined,
): ConnectError =>
  reasonError(rejectionCode(status), "UPSTREAM_REJECTED", upstreamMessage(body, status), {
    status: `${status}`,
    body,
    ...(retryAfter === undefined ? {} : { retry_after: retryAfter }),
  });

/** The provider answered 529. */
export const upstreamOverloaded = (): ConnectError =>
  reasonError(
    Code.Unavailable,
    "UPSTREAM_OVERLOADED",
    "The upstream provider is overloaded; nothing was charged. Retry shortly.",
  );

/** The provider failed (5xx, refused the gateway's credentials, unreachable, cut off). */
export const upstreamError = (detail: string): ConnectError =>
  reasonError(
    Code.Unavailable,
    "UPSTREAM_ERROR",
    `The upstream provider failed (${detail}); nothing was charged.`,
    { detail },
  );

/** The provider did not answer in time. */
export const upstreamTimeout = (): ConnectError =>
  reasonError(
    Code.DeadlineExceeded,
    "UPSTREAM_TIMEOUT",
    "The upstream provider did not answer in time; nothing was charged.",
  );

function rejectionCode(status: number): Code {
  switch (status) {
    case 404:
      return Code.NotFound;
    case 409:
      return Code.Aborted;
    case 429:
      return Code.ResourceExhausted;
    default:
      return Code.InvalidArgument;
  }
}

/** The provider's own error message, for gRPC callers (REST callers get the body itself). */
function upstreamMessage(body: string, status: number): string {
  try {
    const message = (JSON.parse(body) as { error?: { message?: unknown } }).error?.message;
    if (typeof message === "string") return message;
  } catch {
    // Not the format's envelope: fall through to a generic message.
  }
  return `The upstream provider refused the request (HTTP ${status}).`;
}
