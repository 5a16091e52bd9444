import type { HealthProbe } from "../core/health-service.js";
import type { RateLimiterFactory } from "../core/ports/rate-limits.js";
import { memoryRateLimiter } from "../limits/memory.js";
import type { Assembly } from "./resources.js";

/**
 * Per-key limits and failed authentications per address: in this process's memory, or in
 * Redis (TOLLGATE_REDIS_URL), shared by every host; then Redis joins the health probes.
 */
export async function openRateLimits(a: Assembly, probes: HealthProbe[]): Promise<RateLimiterFactory> {
  const { redisUrl } = a.config;
  if (redisUrl === undefined) return memoryRateLimiter;
  const { connectRedis, redisRateLimiter } = await import("../limits/redis.js");
  const redis = await connectRedis(redisUrl);
  a.stack.defer(async () => {
    await redis.quit().catch(() => redis.disconnect());
  });
  probes.push({
    name: "redis",
    required: false,
    check: async () => `${await redis.ping()} (rate limits)`,
  });
  return redisRateLimiter(redis, (reason) => a.log.error({ component: "rate-limits" }, reason));
}
