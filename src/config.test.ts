import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "./config.js";

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
    });
  });

  it.each([
    ["TOLLGATE_PORT", "eighty"],
    ["TOLLGATE_PORT", "70000"],
    ["TOLLGATE_CORE_PORT", "-1"],
    ["TOLLGATE_CORE_URL", "not a url"],
    ["TOLLGATE_CORE_URL", "ftp://core"],
    ["TOLLGATE_ADMIN_TOKEN", "short"],
    ["TOLLGATE_LOG_LEVEL", "loud"],
    ["TOLLGATE_SHUTDOWN_TIMEOUT_MS", "1.5"],
    ["TOLLGATE_ANTHROPIC_URL", "api.example"],
    ["TOLLGATE_ANTHROPIC_URL", "ftp://api.example"],
    ["TOLLGATE_RATE_LIMIT_RPM", "0"],
    ["TOLLGATE_COUNT_TOKENS_RPM", "many"],
    ["TOLLGATE_CLIENT_POLICY", "claude-only"],
    ["TOLLGATE_STREAM_PING_MS", "300000"],
    ["TOLLGATE_UPSTREAM_CONNECT_TIMEOUT_MS", "0"],
    ["TOLLGATE_PUBLIC_URL", "gateway.example"],
    ["TOLLGATE_PUBLIC_URL", "https://gateway.example/dashboard"],
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

  it("takes the public origin for the dashboard's sign-in checks", () => {
    expect(loadConfig({}).publicUrl).toBeUndefined();
    const url = loadConfig({ TOLLGATE_PUBLIC_URL: "https://gateway.example" }).publicUrl;
    expect([url?.host, url?.origin]).toEqual(["gateway.example", "https://gateway.example"]);
  });
});
