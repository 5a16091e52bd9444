import Anthropic from "@anthropic-ai/sdk";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config/config.js";
import { connectRedis, REDIS_KEY_PREFIX, redisRateLimiter } from "../../src/limits/redis.js";
import { openRuntime } from "../../src/runtime/runtime.js";
import { type RedisServer, startRedis } from "../helpers/redis.js";
import { startTextGateway } from "../helpers/text-gateway.js";

const HELLO = { role: "user" as const, content: "hello" };

let redis: RedisServer;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
});

/** Two clients on one server: what two gateway hosts hold. */
async function twoHosts(): Promise<[Redis, Redis]> {
  return [await connectRedis(redis.url), await connectRedis(redis.url)];
}

describe("rate limits in Redis", () => {
  it("one key's limit is counted once across hosts; other keys and other limits count apart", async () => {
    const [a, b] = await twoHosts();
    try {
      const fallbacks: string[] = [];
      const hostA = redisRateLimiter(a, (reason) => fallbacks.push(reason))("messages", 3, 60_000);
      const hostB = redisRateLimiter(b, (reason) => fallbacks.push(reason))("messages", 3, 60_000);
      expect(await hostA.consume("key_1")).toMatchObject({ allowed: true, remaining: 2 });
      expect(await hostB.consume("key_1")).toMatchObject({ allowed: true, remaining: 1 });
      expect(await hostA.consume("key_1")).toMatchObject({ allowed: true, remaining: 0 });
      const refused = await hostB.consume("key_1");
      expect(refused).toMatchObject({ allowed: false, remaining: 0, limit: 3 });
      expect(refused.resetMs).toBeGreaterThan(0);
      expect(refused.resetMs).toBeLessThanOrEqual(60_000);
      // Another key, and another limit of the same key, have counters of their own.
      expect(await hostB.consume("key_2")).toMatchObject({ allowed: true, remaining: 2 });
      const countTokens = redisRateLimiter(a, () => {})("count_tokens", 3, 60_000);
      expect(await countTokens.consume("key_1")).toMatchObject({ allowed: true, remaining: 2 });
      expect(await a.exists(`${REDIS_KEY_PREFIX}:messages:key_1`)).toBe(1);
      expect(fallbacks).toEqual([]);
    } finally {
      a.disconnect();
      b.disconnect();
    }
  });

  it("while Redis is down each host counts in memory and says so; shared counting resumes when it is back", async () => {
    const own = await startRedis();
    const client = await connectRedis(own.url);
    try {
      const fallbacks: string[] = [];
      const limit = redisRateLimiter(client, (reason) => fallbacks.push(reason))("messages", 2, 60_000);
      expect(await limit.consume("key_1")).toMatchObject({ allowed: true, remaining: 1 });
      await own.stop();
      // Calls go on, still limited: the per-host counter starts afresh.
      expect(await limit.consume("key_1")).toMatchObject({ allowed: true, remaining: 1 });
      expect(await limit.consume("key_1")).toMatchObject({ allowed: true, remaining: 0 });
      expect(await limit.consume("key_1")).toMatchObject({ allowed: false });
      expect(fallbacks).toHaveLength(1);
      expect(fallbacks[0]).toMatch(/Redis is unavailable/);
      const back = await startRedis(own.port);
      try {
        await new Promise<void>((resolve) => client.once("ready", () => resolve()));
        expect(await limit.consume("key_2")).toMatchObject({ allowed: true, remaining: 1 });
        expect(await client.exists(`${REDIS_KEY_PREFIX}:messages:key_2`)).toBe(1);
      } finally {
        await back.stop();
      }
    } finally {
      client.disconnect();
      // Already stopped on the way through, unless an assertion failed before that.
      await own.stop();
    }
  });

  it("a gateway whose Redis does not answer refuses to start, naming TOLLGATE_REDIS_URL", async () => {
    const gone = await startRedis();
    await gone.stop();
    await expect(connectRedis(gone.url, 1_000)).rejects.toThrow(
      /TOLLGATE_REDIS_URL: Redis at redis:\/\/127\.0\.0\.1/,
    );
    expect(() => loadConfig({ TOLLGATE_REDIS_URL: "http://127.0.0.1:6379" })).toThrow(/TOLLGATE_REDIS_URL/);
  });

  it("two gateway hosts on one ledger and one Redis: a key's limit holds across them", async () => {
    const env = { TOLLGATE_REDIS_URL: redis.url, TOLLGATE_RATE_LIMIT_RPM: "4" };
    const t = await startTextGateway(env);
    // The second host: another runtime on the same data directory and the same Redis.
    const second = await openRuntime(loadConfig(hostEnv(t.gateway.app.config.dataDir, t.upstream.url, env)), {
      mode: "embedded",
    });
    try {
      const secondUrl = await second.facade!.listen({ host: "127.0.0.1", port: 0 });
      await t.credit(1_000_000n);
      const hosts = [t.baseUrl, secondUrl].map(
        (baseURL) => new Anthropic({ baseURL, apiKey: t.secret, maxRetries: 0 }),
      );
      const call = (i: number) =>
        hosts[i % 2]!.messages.create({
          model: "model-haiku-4-5",
          max_tokens: 5,
          messages: [HELLO],
        }).withResponse();
      const remaining: string[] = [];
      for (let i = 0; i < 4; i++) {
        remaining.push((await call(i)).response.headers.get("anthropic-ratelimit-requests-remaining")!);
      }
      expect(remaining).toEqual(["3", "2", "1", "0"]);
      const upstreamCalls = t.upstream.requests.length;
      for (const i of [4, 5]) {
        await expect(call(i)).rejects.toBeInstanceOf(Anthropic.RateLimitError);
      }
      // Refused calls never reach the provider and are not billed.
      expect(t.upstream.requests.length).toBe(upstreamCalls);
      expect((await t.usage()).length).toBe(4);
      const health = (await (await fetch(`${secondUrl}/v1/health`)).json()) as {
        dependencies: { name: string; ok: boolean }[];
      };
      expect(health.dependencies.find((d) => d.name === "redis")).toMatchObject({ ok: true });
      t.expectSoundLedger();
    } finally {
      await second.close(1_000);
      await t.close();
    }
  });
});

function hostEnv(dataDir: string, upstreamUrl: string, env: Record<string, string>): Record<string, string> {
  return {
    TOLLGATE_DATA_DIR: dataDir,
    TOLLGATE_ANTHROPIC_URL: upstreamUrl,
    TOLLGATE_DEV_CHAINS: "off",
    ...env,
  };
}
