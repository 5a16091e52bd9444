import { describe, expect, it } from "vitest";
import { loadConfig } from "../config/config.js";
import { silentLog } from "../core/ports/log.js";
import type { TextUpstream } from "../core/ports/providers.js";
import type { RateLimiterFactory } from "../core/ports/rate-limits.js";
import { coreDeps, type OpenedForCore } from "./core-deps.js";

/** Stand-ins for what a runtime opens: nothing here opens a socket, a file or a thread. */
function opened(overrides: Partial<OpenedForCore> = {}): OpenedForCore {
  const limiters: string[] = [];
  const rateLimiter = ((name: string) => {
    limiters.push(name);
    return { consume: async () => ({ allowed: true }) };
  }) as unknown as RateLimiterFactory;
  return {
    stores: { accounts: {}, sessions: {}, ledger: {}, idempotency: {} } as unknown as OpenedForCore["stores"],
    onchain: undefined,
    chains: undefined,
    textUpstream: undefined,
    images: undefined,
    rateLimiter,
    probes: [],
    x402: { payments: undefined, signIn: undefined },
    receiptKey: undefined,
    metrics: undefined,
    log: silentLog,
    listenOrigins: () => ["http://127.0.0.1:8787"],
    now: undefined,
    ...overrides,
  };
}

describe("coreDeps: the core's dependencies from the configuration and what was opened", () => {
  it("the operator's core throttles nobody and is not in dev mode", () => {
    const deps = coreDeps(loadConfig({}, "/srv"), "operator", opened());
    expect(deps.authFailures).toBeUndefined();
    expect(deps.anonymousLimits).toBeUndefined();
    expect(deps.devMode).toBe(false);
    expect(deps.inference).toBeUndefined();
  });

  it("a serving core throttles failed authentications and keyless work, as configured", () => {
    const config = loadConfig({}, "/srv");
    const deps = coreDeps(config, "embedded", opened());
    expect(deps.authFailures).toMatchObject({
      perMinute: config.authFailuresPerMinute,
      blockMs: config.authBlockMs,
    });
    expect(deps.anonymousLimits).toMatchObject({
      callsPerMinute: config.anonymousCallsPerMinute,
      noncesPerMinute: config.signInNoncesPerMinute,
    });
    expect(deps.devMode).toBe(false);
    expect(coreDeps(config, "dev", opened()).devMode).toBe(true);
  });

  it("serves inference only with a text provider, images with it", () => {
    const textUpstream = {} as TextUpstream;
    const images = { upstreams: {}, store: {}, urlTtlMs: 1, routes: {}, perMinute: 1 } as never;
    const deps = coreDeps(loadConfig({}, "/srv"), "serve", opened({ textUpstream, images }));
    expect(deps.inference?.textUpstream).toBe(textUpstream);
    expect(deps.inference?.images).toBe(images);
  });

  it("dashboard sign-ins name the public URL when configured, else where the facade listens", () => {
    const withUrl = loadConfig({ TOLLGATE_PUBLIC_URL: "https://gw.example.com" }, "/srv");
    const deps = coreDeps(withUrl, "serve", opened());
    expect(deps.signInOrigins?.()).toEqual(["https://gw.example.com"]);
    expect(deps.publicOrigin).toBe("https://gw.example.com");
    expect(coreDeps(loadConfig({}, "/srv"), "dev", opened()).signInOrigins?.()).toEqual([
      "http://127.0.0.1:8787",
    ]);
  });
});
