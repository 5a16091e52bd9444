/**
 * Rate limits in Redis (TOLLGATE_REDIS_URL): one counter per key and limit shared by every
 * gateway host, so a key's limit holds across hosts. rate-limiter-flexible's RateLimiterRedis
 * (an atomic INCR + PEXPIRE script per request) over an ioredis client; a `RateLimiterFactory`
 * of the core's port (src/core/ports/rate-limits.ts).
 */

import { Redis } from "ioredis";
import { RateLimiterMemory, RateLimiterRedis } from "rate-limiter-flexible";
import { maskedUrl } from "../config/read.js";
import type { RateLimiterFactory } from "../core/ports/rate-limits.js";
import { limiterOptions, rateLimiterOver } from "./memory.js";

/**
 * Where every counter lives in Redis: `tollgate:rl:<limit name>:<key>` (the key is a key id, or
 * a client address for `auth_failures`).
 */
export const REDIS_KEY_PREFIX = "tollgate:rl";

/**
 * Limits counted in Redis. While Redis cannot answer (down, or not yet connected), each host
 * counts in its own memory instead — the same limit per host, so calls go on and are still
 * limited — and `onFallback` is told, at most once until Redis is ready again.
 */
export function redisRateLimiter(client: Redis, onFallback: (reason: string) => void): RateLimiterFactory {
  let fellBack = false;
  client.on("ready", () => {
    fellBack = false;
  });
  return (name, limit, windowMs, options = {}) => {
    const shape = limiterOptions(limit, windowMs, options);
    const fallBack = () => {
      if (fellBack) return;
      fellBack = true;
      onFallback(
        `Redis is unavailable (${client.status}): rate limits are counted per host until it is back`,
      );
    };
    const limiter = new RateLimiterRedis({
      storeClient: client,
      keyPrefix: `${REDIS_KEY_PREFIX}:${name}`,
      ...shape,
      // Not ready: answer from memory at once instead of queueing behind a reconnect.
      rejectIfRedisNotReady: true,
      // The library consults it only when Redis failed.
      insuranceLimiter: new ReportingMemoryLimiter(shape, fallBack),
    });
    return rateLimiterOver(limiter, limit);
  };
}

/** The per-host limiter used while Redis is unavailable; tells `onUse` each time it answers. */
class ReportingMemoryLimiter extends RateLimiterMemory {
  constructor(
    options: ConstructorParameters<typeof RateLimiterMemory>[0],
    private readonly onUse: () => void,
  ) {
    super(options);
  }

  override consume(
    ...args: Parameters<RateLimiterMemory["consume"]>
  ): ReturnType<RateLimiterMemory["consume"]> {
    this.onUse();
    return super.consume(...args);
  }

  override get(...args: Parameters<RateLimiterMemory["get"]>): ReturnType<RateLimiterMemory["get"]> {
    this.onUse();
    return super.get(...args);
  }
}

/**
 * Connects to Redis at `url`, failing if it does not answer within `timeoutMs`: a gateway
 * configured for shared limits does not start on per-host ones. After start, ioredis reconnects
 * on its own and the limits fall back to memory meanwhile.
 */
export async function connectRedis(url: string, timeoutMs = 5_000): Promise<Redis> {
  const client = new Redis(url, {
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    connectTimeout: timeoutMs,
  });
  // Errors while reconnecting are reported through the fallback; without a listener ioredis
  // would print each one.
  client.on("error", () => {});
  try {
    await client.connect();
    await client.ping();
  } catch (error) {
    client.disconnect();
    throw new Error(
      `TOLLGATE_REDIS_URL: Redis at ${maskedUrl(url)} did not answer: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
  return client;
}
