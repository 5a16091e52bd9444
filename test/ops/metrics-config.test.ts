import { describe, expect, it } from "vitest";
import { ConfigError, DEV_METRICS_PORT, loadConfig, metricsPortOf } from "../../src/config/config.js";

describe("TOLLGATE_METRICS_PORT", () => {
  it("is off in serve and 9464 in dev when unset", () => {
    const config = loadConfig({});
    expect(metricsPortOf(config, false)).toBeUndefined();
    expect(metricsPortOf(config, true)).toBe(DEV_METRICS_PORT);
    expect(DEV_METRICS_PORT).toBe(9464);
    expect(config.metricsHost).toBe("127.0.0.1");
  });

  it("takes a port (0 for a free one) in every mode, and off even in dev", () => {
    expect(metricsPortOf(loadConfig({ TOLLGATE_METRICS_PORT: "9100" }), false)).toBe(9100);
    expect(metricsPortOf(loadConfig({ TOLLGATE_METRICS_PORT: "0" }), true)).toBe(0);
    expect(metricsPortOf(loadConfig({ TOLLGATE_METRICS_PORT: "off" }), true)).toBeUndefined();
  });

  it("refuses anything else, naming the variable", () => {
    for (const value of ["on", "-1", "70000"])
      expect(() => loadConfig({ TOLLGATE_METRICS_PORT: value })).toThrow(
        expect.objectContaining({
          name: ConfigError.name,
          message: expect.stringContaining("TOLLGATE_METRICS_PORT"),
        }),
      );
  });
});
