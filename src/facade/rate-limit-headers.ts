import type { RateLimit } from "../gen/tollgate/inference/v1/inference_pb.js";

/**
 * A key's request limit as the facade reports it, whichever way the core said it: with a call's
 * head (the proto `RateLimit`, {@link limitOfHead}) or with a RATE_LIMITED refusal (its error
 * metadata, {@link limitOfRefusal}, built by the core's `refusalMetadata`). One type, turned into
 * the format's headers by one function, {@link rateLimitHeaders}.
 */
export interface RequestLimit {
  /** Requests allowed per window. */
  readonly limit: string;
  /** Requests left in the window. */
  readonly remaining: string;
  /** When the window refills, ISO 8601 ("" when the core did not say). */
  readonly reset: string;
  /** Seconds to wait before retrying: a refusal's only. */
  readonly retryAfter?: string | undefined;
}

/** The limit a call's head carries (undefined when it carries none). */
export function limitOfHead(limit: RateLimit | undefined): RequestLimit | undefined {
  if (limit === undefined) return undefined;
  return {
    limit: `${limit.limit}`,
    remaining: `${limit.remaining}`,
    reset: limit.reset === undefined ? "" : new Date(Number(limit.reset.seconds) * 1000).toISOString(),
  };
}

/** The limit a RATE_LIMITED refusal carries in its metadata (a minute's wait when it names none). */
export function limitOfRefusal(metadata: Readonly<Record<string, string>>): RequestLimit {
  return {
    limit: metadata.limit ?? "",
    remaining: metadata.remaining ?? "0",
    reset: metadata.reset ?? "",
    retryAfter: metadata.retry_after ?? "60",
  };
}

/**
 * The request-limit headers (docs/protocols.md, "Response headers"): `retry-after` for a refusal,
 * then the `anthropic-ratelimit-requests-*` trio.
 */
export function rateLimitHeaders(limit: RequestLimit | undefined): Record<string, string> {
  if (limit === undefined) return {};
  return {
    ...(limit.retryAfter === undefined ? {} : { "retry-after": limit.retryAfter }),
    "anthropic-ratelimit-requests-limit": limit.limit,
    "anthropic-ratelimit-requests-remaining": limit.remaining,
    "anthropic-ratelimit-requests-reset": limit.reset,
  };
}
