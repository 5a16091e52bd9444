import { describe, expect, it } from "vitest";
import { memoryRateLimiter } from "./memory.js";

describe("memoryRateLimiter", () => {
  it("allows `limit` requests per key and window, then refuses with the time to reset", async () => {
    const limiter = memoryRateLimiter("test", 2, 60_000);
    const first = await limiter.consume("key_a");
    const second = await limiter.consume("key_a");
    const third = await limiter.consume("key_a");
    expect([first.allowed, second.allowed, third.allowed]).toEqual([true, true, false]);
    expect([first.remaining, second.remaining, third.remaining]).toEqual([1, 0, 0]);
    expect(third.limit).toBe(2);
    expect(third.resetMs).toBeGreaterThan(59_000);
    expect(third.resetMs).toBeLessThanOrEqual(60_000);
  });

  it("counts each key on its own", async () => {
    const limiter = memoryRateLimiter("test", 1, 60_000);
    expect((await limiter.consume("key_a")).allowed).toBe(true);
    expect((await limiter.consume("key_a")).allowed).toBe(false);
    expect((await limiter.consume("key_b")).allowed).toBe(true);
  });

  it("refills once the window has passed", async () => {
    const limiter = memoryRateLimiter("test", 1, 200);
    expect((await limiter.consume("k")).allowed).toBe(true);
    expect((await limiter.consume("k")).allowed).toBe(false);
    await new Promise((r) => setTimeout(r, 250));
    expect((await limiter.consume("k")).allowed).toBe(true);
  });
});

describe("memoryRateLimiter peek", () => {
  it("reads a key's standing without counting; refused only once a request was refused", async () => {
    const limiter = memoryRateLimiter("test", 2, 60_000);
    expect(await limiter.peek("k")).toMatchObject({ allowed: true, remaining: 2 });
    await limiter.consume("k");
    await limiter.consume("k");
    for (let i = 0; i < 3; i++)
      expect(await limiter.peek("k")).toMatchObject({ allowed: true, remaining: 0 });
    expect((await limiter.consume("k")).allowed).toBe(false);
    const refused = await limiter.peek("k");
    expect(refused).toMatchObject({ allowed: false, remaining: 0, limit: 2 });
    expect(refused.resetMs).toBeGreaterThan(59_000);
  });

  it("keeps a key over its limit refused for blockMs from the request that went over", async () => {
    const limiter = memoryRateLimiter("test", 1, 60_000, { blockMs: 300 });
    await limiter.consume("k");
    const over = await limiter.consume("k");
    expect(over.allowed).toBe(false);
    expect(over.resetMs).toBeLessThanOrEqual(300);
    expect((await limiter.peek("k")).allowed).toBe(false);
    await new Promise((r) => setTimeout(r, 350));
    expect((await limiter.peek("k")).allowed).toBe(true);
    expect((await limiter.consume("k")).allowed).toBe(true);
  });
});
