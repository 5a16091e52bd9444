import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig, requireMasterSecret } from "./config.js";
import { maskedUrl } from "./read.js";

describe("loadConfig", () => {
  it("has embedded defaults", () => {
    const config = loadConfig({}, "/srv");
    expect(config).toMatchObject({
      host: "127.0.0.1",
      port: 8787,
      coreHost: "127.0.0.1",
      corePort: 8788,
      dataDir: "/srv/data",
      coreUrl: undefined,
      adminToken: undefined,
      facadeToken: undefined,
    });
  });

  it.each([
    ["TOLLGATE_PORT", "eighty"],
    ["TOLLGATE_PORT", "70000"],
    ["TOLLGATE_CORE_PORT", "-1"],
    ["TOLLGATE_CORE_URL", "not a url"],
    ["TOLLGATE_CORE_URL", "ftp://core"],
    ["TOLLGATE_ADMIN_TOKEN", "short"],
    ["TOLLGATE_FACADE_TOKEN", "short"],
    ["TOLLGATE_LOG_LEVEL", "loud"],
    ["TOLLGATE_SHUTDOWN_TIMEOUT_MS", "1.5"],
    ["TOLLGATE_ANTHROPIC_URL", "api.example"],
    ["TOLLGATE_ANTHROPIC_URL", "ftp://api.example"],
    ["TOLLGATE_RATE_LIMIT_RPM", "0"],
    ["TOLLGATE_COUNT_TOKENS_RPM", "many"],
    ["TOLLGATE_CLIENT_POLICY", "claude-only"],
    ["TOLLGATE_STREAM_PING_MS", "300000"],
    ["TOLLGATE_UPSTREAM_CONNECT_TIMEOUT_MS", "0"],
    ["TOLLGATE_UPSTREAM_CONNECTIONS", "-5"],
    ["TOLLGATE_UPSTREAM_CONNECTIONS", "lots"],
    ["TOLLGATE_PUBLIC_URL", "gateway.example"],
    ["TOLLGATE_AUTH_FAILURES_PER_MINUTE", "-1"],
    ["TOLLGATE_AUTH_BLOCK_S", "0"],
    ["TOLLGATE_HEALTH_INTERVAL_S", "0"],
    ["TOLLGATE_HEALTH_INTERVAL_S", "often"],
    ["TOLLGATE_TRUST_PROXY", "proxy.internal"],
    ["TOLLGATE_TRUST_PROXY", "10.0.0.0/33"],
    ["TOLLGATE_TRUST_PROXY", "127.0.0.1,"],
  ])("refuses %s=%s, naming the variable", (name, value) => {
    expect(() => loadConfig({ [name]: value })).toThrow(ConfigError);
    expect(() => loadConfig({ [name]: value })).toThrow(new RegExp(`^${name}: `));
  });

  it("runs the built-in dev upstream only when no provider is configured", () => {
    expect(loadConfig({}).anthropic).toMatchObject({ url: undefined, apiKey: "" });
    expect(loadConfig({ TOLLGATE_ANTHROPIC_API_KEY: "sk-1" }).anthropic).toMatchObject({
      url: "https://api.anthropic.com",
      apiKey: "sk-1",
    });
    expect(loadConfig({ TOLLGATE_ANTHROPIC_URL: "http://127.0.0.1:9/v1/" }).anthropic.url).toBe(
      "http://127.0.0.1:9",
    );
  });

  it("admits every client and limits count_tokens more loosely by default", () => {
    const config = loadConfig({});
    expect(config.clientPolicy).toBe("any");
    expect(config.countTokensPerMinute).toBeGreaterThan(config.rateLimitPerMinute);
  });

  it("throttles 30 failed authentications a minute per address for 60 s, and believes no proxy, by default", () => {
    expect(loadConfig({})).toMatchObject({ authFailuresPerMinute: 30, authBlockMs: 60_000, trustProxy: [] });
    const config = loadConfig({
      TOLLGATE_AUTH_FAILURES_PER_MINUTE: "0",
      TOLLGATE_AUTH_BLOCK_S: "600",
      TOLLGATE_TRUST_PROXY: "10.0.0.0/8, 127.0.0.1,2001:db8::/32,loopback",
    });
    expect(config).toMatchObject({
      authFailuresPerMinute: 0,
      authBlockMs: 600_000,
      trustProxy: ["10.0.0.0/8", "127.0.0.1", "2001:db8::/32", "loopback"],
    });
  });

  it("limits anonymous work per address and live keys per account by default, and reads each limit", () => {
    expect(loadConfig({}, "/srv")).toMatchObject({
      anonymousCallsPerMinute: 300,
      signInNoncesPerMinute: 30,
      unpaidBodyBytes: { json: 1024 * 1024, upload: 4 * 1024 * 1024 },
      maxLiveKeys: 20,
    });
    const set = loadConfig(
      {
        TOLLGATE_ANONYMOUS_CALLS_PER_MINUTE: "0",
        TOLLGATE_SIGN_IN_NONCES_PER_MINUTE: "5",
        TOLLGATE_X402_UNPAID_BODY_BYTES: "65536",
        TOLLGATE_X402_UNPAID_UPLOAD_BYTES: "131072",
        TOLLGATE_MAX_LIVE_KEYS: "2",
      },
      "/srv",
    );
    expect(set).toMatchObject({
      anonymousCallsPerMinute: 0,
      signInNoncesPerMinute: 5,
      unpaidBodyBytes: { json: 65_536, upload: 131_072 },
      maxLiveKeys: 2,
    });
  });

  it.each([
    ["TOLLGATE_ANONYMOUS_CALLS_PER_MINUTE", "-1"],
    ["TOLLGATE_SIGN_IN_NONCES_PER_MINUTE", "some"],
    ["TOLLGATE_X402_UNPAID_BODY_BYTES", "100"],
    ["TOLLGATE_X402_UNPAID_BODY_BYTES", `${33 * 1024 * 1024}`],
    ["TOLLGATE_X402_UNPAID_UPLOAD_BYTES", `${61 * 1024 * 1024}`],
    ["TOLLGATE_MAX_LIVE_KEYS", "0"],
  ])("refuses %s=%s naming the variable", (name, value) => {
    expect(() => loadConfig({ [name]: value }, "/srv")).toThrow(name);
  });

  it("keeps the store in SQLite unless TOLLGATE_DATABASE_URL names a PostgreSQL database", () => {
    expect(loadConfig({})).toMatchObject({ databaseUrl: undefined, databasePoolSize: 10 });
    const url = "postgres://tollgate:pw@db.internal:5432/tollgate";
    expect(loadConfig({ TOLLGATE_DATABASE_URL: url, TOLLGATE_DATABASE_POOL_SIZE: "32" })).toMatchObject({
      databaseUrl: url,
      databasePoolSize: 32,
    });
    expect(() => loadConfig({ TOLLGATE_DATABASE_URL: "mysql://db/tollgate" })).toThrow(
      /TOLLGATE_DATABASE_URL.*postgres:\/\//,
    );
    expect(() => loadConfig({ TOLLGATE_DATABASE_URL: "not a url" })).toThrow(/TOLLGATE_DATABASE_URL/);
    expect(() => loadConfig({ TOLLGATE_DATABASE_POOL_SIZE: "0" })).toThrow(ConfigError);
  });

  it("masks a URL's password for output and leaves the rest as written, libpq's socket form included", () => {
    expect(maskedUrl("postgres://tollgate:s3cr:et@db.internal:5432/tollgate")).toBe(
      "postgres://tollgate:***@db.internal:5432/tollgate",
    );
    expect(maskedUrl("postgres://tollgate:pw@/tollgate?host=/var/run/postgresql")).toBe(
      "postgres://tollgate:***@/tollgate?host=/var/run/postgresql",
    );
    expect(maskedUrl("redis://:pw@cache:6379/0")).toBe("redis://:***@cache:6379/0");
    // No password, nothing to mask; an `@` or `:` after the host is not a password.
    for (const url of [
      "postgres://tollgate@db/x",
      "postgres:///x?host=/run/pg",
      "redis://cache:6379/0?a=b:c@d",
    ])
      expect(maskedUrl(url)).toBe(url);
  });

  it("takes PostgreSQL's Unix socket in libpq's forms, the host empty or named, and only that one empty host", () => {
    for (const url of [
      "postgres://tollgate:pw@/tollgate?host=/var/run/postgresql",
      "postgresql://tollgate@/tollgate?host=%2Fvar%2Frun%2Fpostgresql",
      "postgres://tollgate:pw@localhost/tollgate?host=/var/run/postgresql",
      "postgres:///tollgate?host=/var/run/postgresql",
    ]) {
      expect(loadConfig({ TOLLGATE_DATABASE_URL: url }).databaseUrl).toBe(url);
      expect(
        loadConfig({ TOLLGATE_DATABASE_URL: url, TOLLGATE_DATABASE_DIRECT_URL: url }).databaseDirectUrl,
      ).toBe(url);
    }
    // The allowance is for the host only: a scheme of another kind, or no URL, is still refused.
    for (const url of [
      "mysql://tollgate:pw@/tollgate",
      "tollgate:pw@/tollgate",
      "postgres://tollgate:pw@[::1/tollgate",
    ]) {
      expect(() => loadConfig({ TOLLGATE_DATABASE_URL: url })).toThrow(/TOLLGATE_DATABASE_URL/);
    }
  });

  it("takes a direct URL for the session-level connections only beside TOLLGATE_DATABASE_URL", () => {
    expect(loadConfig({}).databaseDirectUrl).toBeUndefined();
    const pooled = "postgres://tollgate:pw@pgbouncer.internal:6432/tollgate";
    const direct = "postgres://tollgate:pw@db.internal:5432/tollgate";
    expect(loadConfig({ TOLLGATE_DATABASE_URL: pooled, TOLLGATE_DATABASE_DIRECT_URL: direct })).toMatchObject(
      { databaseUrl: pooled, databaseDirectUrl: direct },
    );
    expect(() => loadConfig({ TOLLGATE_DATABASE_DIRECT_URL: direct })).toThrow(
      /TOLLGATE_DATABASE_DIRECT_URL.*TOLLGATE_DATABASE_URL is not/,
    );
    expect(() =>
      loadConfig({ TOLLGATE_DATABASE_URL: pooled, TOLLGATE_DATABASE_DIRECT_URL: "redis://db/0" }),
    ).toThrow(/TOLLGATE_DATABASE_DIRECT_URL.*postgres:\/\//);
  });

  it("opens as many provider connections as there are calls in flight unless capped", () => {
    expect(loadConfig({}).upstreamConnections).toBe(0);
    expect(loadConfig({ TOLLGATE_UPSTREAM_CONNECTIONS: "256" }).upstreamConnections).toBe(256);
  });

  it("ends a provider response before the call's hold may expire", () => {
    expect(loadConfig({}).anthropic.responseTimeoutMs).toBe(840_000);
    expect(loadConfig({ TOLLGATE_MAX_CALL_MS: "5000" }).anthropic.responseTimeoutMs).toBe(4_500);
    const set = { TOLLGATE_MAX_CALL_MS: "5000", TOLLGATE_UPSTREAM_RESPONSE_TIMEOUT_MS: "4999" };
    expect(loadConfig(set).anthropic.responseTimeoutMs).toBe(4_999);
    expect(() => loadConfig({ ...set, TOLLGATE_UPSTREAM_RESPONSE_TIMEOUT_MS: "5000" })).toThrow(
      /TOLLGATE_UPSTREAM_RESPONSE_TIMEOUT_MS/,
    );
  });

  describe("images", () => {
    it("has defaults: no provider (the dev upstream then), shipped routes, 1 h urls, 10/50 MiB uploads", () => {
      const config = loadConfig({});
      expect(config.images).toEqual({
        gemini: { url: undefined, apiKey: "" },
        openai: { url: undefined, apiKey: "" },
        // The image providers' own timeouts default to the text provider's.
        timeouts: {
          connectTimeoutMs: config.anthropic.connectTimeoutMs,
          headersTimeoutMs: config.anthropic.headersTimeoutMs,
          idleTimeoutMs: config.anthropic.idleTimeoutMs,
          responseTimeoutMs: config.anthropic.responseTimeoutMs,
        },
        routes: {},
        urlTtlMs: 3_600_000,
        maxFileBytes: 10 * 1024 * 1024,
        maxRequestBytes: 50 * 1024 * 1024,
      });
      // The public URL is the gateway's, not the images'.
      expect(config.publicUrl).toBeUndefined();
    });

    it("reads providers, routes, expiry, limits and the public origin", () => {
      const config = loadConfig({
        TOLLGATE_GEMINI_API_KEY: "g-key",
        TOLLGATE_OPENAI_IMAGES_URL: "http://images.internal:9000/v1/",
        TOLLGATE_OPENAI_IMAGES_API_KEY: "o-key",
        TOLLGATE_IMAGE_MODELS: "image-2=openai:gpt-image-1, image-pro=gemini:gemini-3-pro-image",
        TOLLGATE_IMAGE_URL_TTL_S: "600",
        TOLLGATE_IMAGE_MAX_FILE_BYTES: "1048576",
        TOLLGATE_IMAGE_MAX_REQUEST_BYTES: "4194304",
        TOLLGATE_PUBLIC_URL: "https://gateway.example.com/",
      });
      const { images } = config;
      expect(images).toEqual({
        gemini: { url: "https://generativelanguage.googleapis.com", apiKey: "g-key" },
        openai: { url: "http://images.internal:9000", apiKey: "o-key" },
        timeouts: {
          connectTimeoutMs: config.anthropic.connectTimeoutMs,
          headersTimeoutMs: config.anthropic.headersTimeoutMs,
          idleTimeoutMs: config.anthropic.idleTimeoutMs,
          responseTimeoutMs: config.anthropic.responseTimeoutMs,
        },
        routes: {
          "image-2": { adapter: "openai", upstreamModel: "gpt-image-1" },
          "image-pro": { adapter: "gemini", upstreamModel: "gemini-3-pro-image" },
        },
        urlTtlMs: 600_000,
        maxFileBytes: 1_048_576,
        maxRequestBytes: 4_194_304,
      });
      expect(config.publicUrl).toBe("https://gateway.example.com");
      expect(loadConfig({ TOLLGATE_GEMINI_URL: "http://127.0.0.1:9/v1beta" }).images.gemini.url).toBe(
        "http://127.0.0.1:9",
      );
    });

    it.each([
      ["TOLLGATE_GEMINI_URL", "nope"],
      ["TOLLGATE_OPENAI_IMAGES_URL", "ftp://images"],
      ["TOLLGATE_IMAGE_MODELS", "image-2"],
      ["TOLLGATE_IMAGE_MODELS", "image-2=dalle:gpt-image-1"],
      ["TOLLGATE_IMAGE_MODELS", "image-9=gemini:gemini-3-pro-image-preview"],
      ["TOLLGATE_IMAGE_URL_TTL_S", "0"],
      ["TOLLGATE_IMAGE_MAX_REQUEST_BYTES", "999999999"],
      ["TOLLGATE_PUBLIC_URL", "https://gateway.example.com/base"],
      ["TOLLGATE_IMAGE_CONNECT_TIMEOUT_MS", "0"],
      ["TOLLGATE_IMAGE_HEADERS_TIMEOUT_MS", "soon"],
      ["TOLLGATE_IMAGE_IDLE_TIMEOUT_MS", "-1"],
      ["TOLLGATE_IMAGE_RESPONSE_TIMEOUT_MS", "900000"],
    ])("refuses %s=%s, naming the variable", (name, value) => {
      expect(() => loadConfig({ [name]: value })).toThrow(new RegExp(`^${name}: `));
    });

    it("gives the image providers timeouts of their own, the text provider's by default", () => {
      const text = {
        TOLLGATE_UPSTREAM_CONNECT_TIMEOUT_MS: "2000",
        TOLLGATE_UPSTREAM_IDLE_TIMEOUT_MS: "7000",
      };
      expect(loadConfig(text).images.timeouts).toMatchObject({
        connectTimeoutMs: 2_000,
        idleTimeoutMs: 7_000,
      });
      const own = loadConfig({
        ...text,
        TOLLGATE_IMAGE_CONNECT_TIMEOUT_MS: "3000",
        TOLLGATE_IMAGE_HEADERS_TIMEOUT_MS: "120000",
        TOLLGATE_IMAGE_IDLE_TIMEOUT_MS: "60000",
        TOLLGATE_IMAGE_RESPONSE_TIMEOUT_MS: "300000",
      });
      expect(own.images.timeouts).toEqual({
        connectTimeoutMs: 3_000,
        headersTimeoutMs: 120_000,
        idleTimeoutMs: 60_000,
        responseTimeoutMs: 300_000,
      });
      expect(own.anthropic).toMatchObject({ connectTimeoutMs: 2_000, idleTimeoutMs: 7_000 });
    });

    it("lowers the default per-file limit to a smaller per-request limit", () => {
      expect(loadConfig({ TOLLGATE_IMAGE_MAX_REQUEST_BYTES: "4096" }).images.maxFileBytes).toBe(4096);
    });

    it("refuses a per-file limit above the per-request limit", () => {
      expect(() =>
        loadConfig({ TOLLGATE_IMAGE_MAX_REQUEST_BYTES: "2048", TOLLGATE_IMAGE_MAX_FILE_BYTES: "4096" }),
      ).toThrow(/^TOLLGATE_IMAGE_MAX_FILE_BYTES: /);
    });
  });
});

describe("loadConfig: chains", () => {
  const dev = new Uint8Array(32).fill(1);

  it("runs dev chains without TOLLGATE_CHAINS, the configured registry with it, nothing when off", () => {
    expect(loadConfig({}).onchain).toMatchObject({
      mode: "dev",
      masterSecret: undefined,
      settlementMode: "batch",
      batchWindowMs: 60_000,
    });
    expect(loadConfig({ TOLLGATE_DEV_CHAINS: "off" }).onchain.mode).toBe("off");
    // No file is read for the mode: TOLLGATE_CHAINS's presence decides (the file is checked elsewhere).
    expect(loadConfig({ TOLLGATE_DEV_CHAINS: "on" }).onchain.mode).toBe("dev");
  });

  it("reads the master secret as hex of at least 32 bytes, and refuses to run chains without it outside dev", () => {
    const secret = "ab".repeat(32);
    const onchain = loadConfig({ TOLLGATE_MASTER_SECRET: `0x${secret}` }).onchain;
    expect(Buffer.from(onchain.masterSecret!).toString("hex")).toBe(secret);
    expect(requireMasterSecret(onchain, dev)).toEqual(onchain.masterSecret);
    expect(requireMasterSecret(loadConfig({}).onchain, dev)).toBe(dev);
    expect(() => requireMasterSecret({ ...loadConfig({}).onchain, mode: "configured" }, dev)).toThrow(
      /^TOLLGATE_MASTER_SECRET: is required when TOLLGATE_CHAINS is set/,
    );
  });

  it.each([
    ["TOLLGATE_MASTER_SECRET", "ab".repeat(31)],
    ["TOLLGATE_MASTER_SECRET", "not hex at all, but long enough to be sixty-four characters long!!"],
    ["TOLLGATE_DEV_CHAINS", "yes"],
    ["TOLLGATE_SETTLEMENT_MODE", "hourly"],
    ["TOLLGATE_SETTLEMENT_BATCH_WINDOW_MS", "-5"],
    ["TOLLGATE_CHAIN_POLL_MS", "1"],
    ["TOLLGATE_CHAIN_SCAN_RANGE", "0"],
  ])("refuses %s=%s, naming the variable", (name, value) => {
    expect(() => loadConfig({ [name]: value })).toThrow(new RegExp(`^${name}: `));
  });
});
