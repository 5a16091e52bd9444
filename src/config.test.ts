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
  ])("refuses %s=%s, naming the variable", (name, value) => {
    expect(() => loadConfig({ [name]: value })).toThrow(ConfigError);
    expect(() => loadConfig({ [name]: value })).toThrow(new RegExp(`^${name}: `));
  });
});
