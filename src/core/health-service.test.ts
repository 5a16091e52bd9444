import { toJsonString } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { CheckResponseSchema, HealthService } from "../gen/tollgate/health/v1/health_pb.js";
import { callerInterceptor, operatorCallerResolver } from "./caller.js";
import { createHealthService, HealthMonitor, type HealthProbe } from "./health-service.js";

/** A probe that counts its runs and answers `detail` (or fails with it). */
function counted(name: string, detail: string, ok = true, required = true) {
  let runs = 0;
  const probe: HealthProbe = {
    name,
    required,
    check: async () => {
      runs++;
      if (!ok) throw new Error(detail);
      return detail;
    },
  };
  return { probe, runs: () => runs };
}

function clients(monitor: HealthMonitor) {
  const anonymous = createRouterTransport(
    (router) => router.service(HealthService, createHealthService(monitor)),
    {
      router: { interceptors: [callerInterceptor(() => ({ kind: "anonymous" }))] },
    },
  );
  const operator = createRouterTransport(
    (router) => router.service(HealthService, createHealthService(monitor)),
    {
      router: { interceptors: [callerInterceptor(operatorCallerResolver)] },
    },
  );
  return {
    anonymous: createClient(HealthService, anonymous),
    operator: createClient(HealthService, operator),
  };
}

describe("HealthMonitor", () => {
  it("answers any number of questions from one round: no check runs per question", async () => {
    const db = counted("database", "sqlite ok");
    const chain = counted("chain:base", "treasury 0xabc holds 2 ETH", false, false);
    const monitor = new HealthMonitor([db.probe, chain.probe], { intervalMs: 60_000 });
    const { anonymous } = clients(monitor);
    const answers = await Promise.all(Array.from({ length: 300 }, () => anonymous.check({})));
    expect(db.runs()).toBe(1);
    expect(chain.runs()).toBe(1);
    expect(monitor.rounds).toBe(1);
    for (const answer of answers) {
      expect(answer.ready).toBe(true);
      expect(answer.dependencies.map((d) => [d.name, d.ok, d.required])).toEqual([
        ["database", true, true],
        ["chain:base", false, false],
      ]);
      // Nothing of the detail reaches the public answer.
      expect(toJsonString(CheckResponseSchema, answer)).not.toContain("0xabc");
    }
  });

  it("checks in the background on its interval once started, and not after it is stopped", async () => {
    const db = counted("database", "sqlite ok");
    const monitor = new HealthMonitor([db.probe], { intervalMs: 50 });
    monitor.start();
    await new Promise((resolve) => setTimeout(resolve, 400));
    monitor.stop();
    const runs = db.runs();
    expect(runs).toBeGreaterThanOrEqual(3);
    expect(monitor.rounds).toBe(runs);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(db.runs()).toBe(runs);
  });

  it("reports a check that does not answer in time as failed, and the round still ends", async () => {
    const hung: HealthProbe = {
      name: "chain:base",
      required: false,
      check: () => new Promise<string>(() => {}),
    };
    const monitor = new HealthMonitor([hung, counted("database", "ok").probe], {
      intervalMs: 60_000,
      probeTimeoutMs: 100,
    });
    const round = await monitor.latest();
    expect(round.ready).toBe(true);
    expect(round.dependencies[0]).toMatchObject({ ok: false, detail: "no answer within 100 ms" });
  });

  it("gives the detail to the operator only (Inspect)", async () => {
    const chain = counted("chain:base", "treasury 0xabc holds 2 ETH", false, false);
    const monitor = new HealthMonitor([chain.probe], { intervalMs: 60_000 });
    const { anonymous, operator } = clients(monitor);
    const refused = await anonymous.inspect({}).catch((error: unknown) => ConnectError.from(error));
    expect((refused as ConnectError).code).toBe(Code.Unauthenticated);
    const report = await operator.inspect({});
    expect(report.rounds).toBe(1n);
    expect(report.intervalMs).toBe(60_000);
    expect(report.dependencies[0]).toMatchObject({
      name: "chain:base",
      ok: false,
      detail: "treasury 0xabc holds 2 ETH",
    });
    expect(chain.runs()).toBe(1);
  });
});
