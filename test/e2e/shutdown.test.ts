import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { startTestGateway } from "../helpers/app.js";

describe("graceful shutdown", () => {
  it("lets an in-flight request finish, then stops accepting and closes the database", async () => {
    // Shutdown starts once the request has reached the server, not after a guessed delay (a
    // loaded machine can take longer than that to deliver it).
    let arrived!: () => void;
    const reached = new Promise<void>((resolve) => {
      arrived = resolve;
    });
    const gw = await startTestGateway({}, (app) => {
      // A test-only slow route standing in for a long model call.
      app.facade!.get("/test/slow", async () => {
        arrived();
        await sleep(400);
        return { done: true };
      });
    });
    const inFlight = fetch(`${gw.facadeUrl}/test/slow`).then(async (r) => ({
      status: r.status,
      body: await r.json(),
    }));
    await reached;
    const stopped = gw.app.close(5_000);
    expect(await inFlight).toEqual({ status: 200, body: { done: true } });
    await stopped;
    await expect(fetch(`${gw.facadeUrl}/v1/health`)).rejects.toThrow();
    await expect(gw.app.stores!.ledger.balances("acct_x")).rejects.toThrow();
    gw.removeData();
  });

  it("is bounded: a request that never ends is cut at the timeout", async () => {
    let arrived!: () => void;
    const reached = new Promise<void>((resolve) => {
      arrived = resolve;
    });
    const gw = await startTestGateway({}, (app) => {
      app.facade!.get("/test/hang", () => {
        arrived();
        return new Promise(() => {});
      });
    });
    const hanging = fetch(`${gw.facadeUrl}/test/hang`).then(
      () => "answered",
      () => "cut",
    );
    await reached;
    const started = Date.now();
    await gw.app.close(300);
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(await hanging).toBe("cut");
    gw.removeData();
  });
});
