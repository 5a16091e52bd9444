import { RateLimiterMemory, RateLimiterRes } from "rate-limiter-flexible";

/** A rate limit as it stands after one request was counted. */
export interface RateLimitDecision {
  /** Whether this request is within the limit. */
  readonly allowed: boolean;
  /** Requests allowed per window. */
  readonly limit: number;
  /** Requests left in the current window (0 when refused). */
  readonly remaining: number;
  /** Milliseconds until the window refills. */
  readonly resetMs: number;
}

/**
 * The port rate limits sit behind: counts one request for a key and decides. The in-memory
 * implementation serves one process; a shared store (Redis) can replace it for several.
 */
export interface RateLimiter {
  /** Requests allowed per window. */
  readonly limit: number;
  /** Counts one request for `key` and says whether it is within the limit. */
  consume(key: string): Promise<RateLimitDecision>;
}

/**
 * A fixed-window limit of `limit` requests per `windowMs` per key, in this process's memory
 * (rate-limiter-flexible's RateLimiterMemory, whose Redis sibling shares the same interface).
 */
export function memoryRateLimiter(limit: number, windowMs: number): RateLimiter {
  const limiter = new RateLimiterMemory({ points: limit, duration: windowMs / 1000 });
  return {
    limit,
    consume: async (key) => {
      try {
        const res = await limiter.consume(key);
        return { allowed: true, limit, remaining: res.remainingPoints, resetMs: res.msBeforeNext };
      } catch (rejection) {
        // The library rejects with a RateLimiterRes when the key is over its limit.
        if (!(rejection instanceof RateLimiterRes)) throw rejection;
        return { allowed: false, limit, remaining: 0, resetMs: rejection.msBeforeNext };
      }
    },
  };
}
