/**
 * The rate-limit port: per-key counters the core consults before it admits a call, and the
 * per-address count of failed authentications (src/core/auth/auth-throttle.ts). The stores live
 * in src/limits/: in this process's memory by default (src/limits/memory.ts), or in Redis
 * (src/limits/redis.ts, TOLLGATE_REDIS_URL) so that a limit holds across gateway hosts.
 */

/** A rate limit as it stands after one request was counted. */
export interface RateLimitDecision {
  /** Whether this request is within the limit. */
  readonly allowed: boolean;
  /** Requests allowed per window. */
  readonly limit: number;
  /** Requests left in the current window (0 when refused). */
  readonly remaining: number;
  /** Milliseconds until the window refills (or, for a blocked key, until its block ends). */
  readonly resetMs: number;
}

/**
 * Seconds a refused caller should wait: until `decision`'s window (or block) ends, rounded up,
 * at least one.
 */
export function retryAfterSeconds(decision: RateLimitDecision): number {
  return Math.max(1, Math.ceil(decision.resetMs / 1000));
}

/**
 * What every refusal for a decision says in its error metadata (RATE_LIMITED, AUTH_THROTTLED,
 * ANONYMOUS_THROTTLED, WITHDRAWAL_RATE_LIMITED): the limit, when it resets (ISO 8601) and the
 * seconds to wait. The facade turns them into headers in one place (facade/rate-limit-headers.ts).
 */
export function refusalMetadata(
  decision: RateLimitDecision,
  now: number,
): { limit: string; retry_after: string; reset: string } {
  return {
    limit: `${decision.limit}`,
    retry_after: `${retryAfterSeconds(decision)}`,
    reset: new Date(now + decision.resetMs).toISOString(),
  };
}

/** One limit: counts one request for a key and decides. */
export interface RateLimiter {
  /** Requests allowed per window. */
  readonly limit: number;
  /** Counts one request for `key` and says whether it is within the limit. */
  consume(key: string): Promise<RateLimitDecision>;
  /**
   * The limit as it stands for `key`, counting nothing: refused once a request of `key` was
   * refused, until its window (or block) ends. Lets a caller count only some requests (failed
   * authentications) yet refuse every request of a key over the limit.
   */
  peek(key: string): Promise<RateLimitDecision>;
}

/** How a limit treats a key once it goes over. */
export interface RateLimitOptions {
  /**
   * Keep the key refused for this long from the request that went over, instead of until its
   * window ends.
   */
  readonly blockMs?: number | undefined;
}

/**
 * Builds a limit of `limit` requests per `windowMs` per key, in the store it belongs to. `name`
 * keeps the limits apart in a shared store (`messages`, `count_tokens`, `images`,
 * `auth_failures`).
 */
export type RateLimiterFactory = (
  name: string,
  limit: number,
  windowMs: number,
  options?: RateLimitOptions,
) => RateLimiter;
