import type { Client } from "@connectrpc/connect";
import type { FastifyPluginAsync } from "fastify";
import type { HealthService } from "../gen/tollgate/health/v1/health_pb.js";

/** What the health route needs. */
export interface HealthRoutesDeps {
  readonly health: Client<typeof HealthService>;
  /** Where the core is: "in-process" or its URL. Shown in the report. */
  readonly coreLocation: string;
}

const CORE_TIMEOUT_MS = 2_000;

/**
 * `GET /v1/health`, unauthenticated: the core's own dependency checks, preceded by whether the
 * core answered at all. 200 when every required dependency is up ("ok", or "degraded" when an
 * optional one such as the data disk's free space is not), 503 otherwise.
 */
export const healthRoutes: FastifyPluginAsync<HealthRoutesDeps> = async (scope, { health, coreLocation }) => {
  scope.get("/v1/health", async (_request, reply) => {
    const started = performance.now();
    try {
      const report = await health.check({}, { timeoutMs: CORE_TIMEOUT_MS });
      const core = {
        name: "core",
        ok: true,
        required: true,
        detail: coreLocation,
        latency_ms: elapsed(started),
      };
      const dependencies = report.dependencies.map((d) => ({
        name: d.name,
        ok: d.ok,
        required: d.required,
        detail: d.detail,
        latency_ms: d.latencyMicros / 1000,
      }));
      return reply
        .code(report.ready ? 200 : 503)
        .send({ status: statusOf(report.ready, dependencies), dependencies: [core, ...dependencies] });
    } catch (error) {
      const detail = `${coreLocation}: ${error instanceof Error ? error.message : String(error)}`;
      return reply.code(503).send({
        status: "unavailable",
        dependencies: [{ name: "core", ok: false, required: true, detail, latency_ms: elapsed(started) }],
      });
    }
  });
};

/**
 * "ok" when every dependency is up, "degraded" when only optional ones are down (the disk is
 * full, Redis is away: the gateway serves, with some calls refused or limits kept locally),
 * "unavailable" when a required one is down.
 */
function statusOf(ready: boolean, dependencies: readonly { ok: boolean }[]): string {
  if (!ready) return "unavailable";
  return dependencies.every((d) => d.ok) ? "ok" : "degraded";
}

function elapsed(started: number): number {
  return Math.round((performance.now() - started) * 1000) / 1000;
}
