import { afterAll, describe, expect, it } from "vitest";
import { startGateway, tempDir } from "../helpers/process.js";

// `tollgate dev` as `make run` starts it: the metrics endpoint is on (on a port of its own), its
// URL is in the ready line, and shutting down closes it with the rest.

const dir = tempDir();
afterAll(() => dir.cleanup());

describe("tollgate dev's metrics port", () => {
  it("is announced in the ready line, counts requests and closes on SIGTERM", async () => {
    const gateway = await startGateway({ TOLLGATE_DATA_DIR: dir.path });
    const url = /tollgate ready: .* metrics (http:\/\/\S+\/metrics) /.exec(gateway.stdout())?.[1];
    expect(url).toBeDefined();
    expect(new URL(url!).port).not.toBe(new URL(gateway.facadeUrl).port);
    try {
      const health = await fetch(`${gateway.facadeUrl}/v1/health`);
      await health.text();
      const text = await (await fetch(url!)).text();
      expect(text).toMatch(
        new RegExp(
          `^tollgate_http_requests_total\\{route="/v1/health",method="GET",status="${health.status}",reason="[a-z_]+"\\} 1$`,
          "m",
        ),
      );
    } finally {
      expect(await gateway.stop()).toBe(0);
    }
    await expect(fetch(url!)).rejects.toThrow();
  });

  it("is off with TOLLGATE_METRICS_PORT=off", async () => {
    const gateway = await startGateway({ TOLLGATE_DATA_DIR: dir.path, TOLLGATE_METRICS_PORT: "off" });
    try {
      expect(gateway.stdout()).not.toContain("metrics");
    } finally {
      await gateway.stop();
    }
  });
});
