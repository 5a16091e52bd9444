/**
 * The in-memory rate-limit store, the default: counters in this process's memory, so each
 * gateway process counts on its own. `memoryRateLimiter` is a `RateLimiterFactory` of the core's
 * port (src/core/ports/rate-limits.ts).
 */
import { type RateLimiterAbstract, RateLimiterMemory, RateLimiterRes } from "rate-limiter-flexible";
import type { RateLimiter } from "../core/ports/rate-limits.js";

/**
 * A fixed-window limit of `limit` requests per `windowMs` per key, in this process's memory
 * (rate-limiter-flexible's RateLimiterMemory, whose Redis sibling shares the same interface).
 */
export function memoryRateLimiter(_name: string, limit: number, windowMs: number): RateLimiter {
  return rateLimiterOver(new RateLimiterMemory({ points: limit, duration: windowMs / 1000 }), limit);
}

/** The core's RateLimiter over one of rate-limiter-flexible's limiters (memory or Redis). */
export function rateLimiterOver(limiter: RateLimiterAbstract, limit: number): RateLimiter {
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
