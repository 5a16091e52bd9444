/**
 * The in-memory rate-limit store, the default: counters in this process's memory, so each
 * gateway process counts on its own. `memoryRateLimiter` is a `RateLimiterFactory` of the core's
 * port (src/core/ports/rate-limits.ts).
 */
import { type RateLimiterAbstract, RateLimiterMemory, RateLimiterRes } from "rate-limiter-flexible";
import type { RateLimiter, RateLimitOptions } from "../core/ports/rate-limits.js";

/**
 * A fixed-window limit of `limit` requests per `windowMs` per key, in this process's memory
 * (rate-limiter-flexible's RateLimiterMemory, whose Redis sibling shares the same interface).
 */
export function memoryRateLimiter(
  _name: string,
  limit: number,
  windowMs: number,
  options: RateLimitOptions = {},
): RateLimiter {
  return rateLimiterOver(new RateLimiterMemory(limiterOptions(limit, windowMs, options)), limit);
}

/** rate-limiter-flexible's options (seconds) for a limit of the port (milliseconds). */
export function limiterOptions(limit: number, windowMs: number, { blockMs }: RateLimitOptions) {
  return { points: limit, duration: windowMs / 1000, blockDuration: (blockMs ?? 0) / 1000 };
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
    peek: async (key) => {
      // Null: nothing counted for the key in this window.
      const res = await limiter.get(key);
      const consumed = res?.consumedPoints ?? 0;
      return {
        // Over the limit only once a request was refused (the library counts that one too).
        allowed: consumed <= limit,
        limit,
        remaining: Math.max(0, limit - consumed),
        resetMs: res?.msBeforeNext ?? 0,
      };
    },
  };
}
