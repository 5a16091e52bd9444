import { describe, expect, it } from "vitest";
import { ConfigError, url } from "./read.js";

describe("url: the one reader of URL variables", () => {
  it("takes http(s) by default and keeps the value as set", () => {
    expect(url({ X: " http://core:8788 " }, "X")?.raw).toBe("http://core:8788");
    expect(url({}, "X")).toBeUndefined();
    expect(url({ X: "  " }, "X")).toBeUndefined();
  });

  it("quotes a value that is not a URL, or shows the expected shape", () => {
    expect(() => url({ X: "nope" }, "X")).toThrow(new ConfigError("X", 'not a URL: "nope"'));
    expect(() => url({ X: "nope" }, "X", { shape: "redis://host:port" })).toThrow(
      new ConfigError("X", "not a URL (redis://host:port)"),
    );
  });

  it("refuses another scheme with the rule's words", () => {
    expect(() => url({ X: "ftp://a" }, "X")).toThrow(
      new ConfigError("X", "must be an http:// or https:// URL"),
    );
    const redis = { schemes: ["redis:", "rediss:"], problem: "must be a redis:// or rediss:// URL" };
    expect(url({ X: "rediss://r:6380" }, "X", redis)?.url.port).toBe("6380");
    expect(() => url({ X: "http://r" }, "X", redis)).toThrow(/must be a redis:\/\/ or rediss:\/\/ URL/);
  });

  it("takes an origin without a path when asked", () => {
    const origin = { origin: true, problem: "an origin" };
    expect(url({ X: "https://gw.example.com/" }, "X", origin)?.url.origin).toBe("https://gw.example.com");
    expect(() => url({ X: "https://gw.example.com/base" }, "X", origin)).toThrow(/an origin/);
  });
});
