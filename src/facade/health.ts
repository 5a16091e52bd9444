import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { Client } from "@connectrpc/connect";
import type { FastifyPluginAsync } from "fastify";
import type { HealthService } from "../gen/tollgate/health/v1/health_pb.js";

/** What the health route needs. */
export interface HealthRoutesDeps {
  readonly health: Client<typeof HealthService>;
  /** Where the core is: "in-process" or its URL. Logged when the core does not answer; never sent. */
  readonly coreLocation: string;
}

const CORE_TIMEOUT_MS = 2_000;

/** One component in the public answer: whether it is up, and what its being down means. */
interface PublicDependency {
  readonly name: string;
  readonly ok: boolean;
  readonly required: boolean;
  /** "ready"; "degraded" when an optional one is down; "down" when a required one is. */
  readonly status: "ready" | "degraded" | "down";
}

/**
 * `GET /v1/health`, unauthenticated: whether the core answered, then the core's dependencies as
 * its last background round found them (HealthService.Check: no check runs per request). 200 when
 * every required dependency is up ("ok", or "degraded" when an optional one such as the data
 * disk's free space is not), 503 otherwise. Public, so it names components and their state and
 * nothing else: no address, balance, error text or core URL (the operator's HealthService.Inspect
 * has those).
 */
export const healthRoutes: FastifyPluginAsync<HealthRoutesDeps> = async (scope, { health, coreLocation }) => {
  scope.get("/v1/health", async (request, reply) => {
    try {
      const report = await health.check({}, { timeoutMs: CORE_TIMEOUT_MS });
      const dependencies = [
        dependency("core", true, true),
        ...report.dependencies.map((d) => dependency(d.name, d.ok, d.required)),
      ];
      return reply.code(report.ready ? 200 : 503).send({
        status: statusOf(report.ready, dependencies),
        checked_at: report.checkedAt === undefined ? null : timestampDate(report.checkedAt).toISOString(),
        dependencies,
      });
    } catch (error) {
      request.log.warn({ err: error, core: coreLocation }, "health: the core did not answer");
      return reply.code(503).send({
        status: "unavailable",
        checked_at: null,
        dependencies: [dependency("core", false, true)],
      });
    }
  });
};

function dependency(name: string, ok: boolean, required: boolean): PublicDependency {
  return { name, ok, required, status: ok ? "ready" : required ? "down" : "degraded" };
}

/**
 * "ok" when every dependency is up, "degraded" when only optional ones are down (the disk is
 * full, Redis is away: the gateway serves, with some calls refused or limits kept locally),
 * "unavailable" when a required one is down.
 */
function statusOf(ready: boolean, dependencies: readonly { ok: boolean }[]): string {
  if (!ready) return "unavailable";
  return dependencies.every((d) => d.ok) ? "ok" : "degraded";
}
