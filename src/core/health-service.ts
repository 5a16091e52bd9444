import type { ServiceImpl } from "@connectrpc/connect";
import type { HealthService } from "../gen/tollgate/health/v1/health_pb.js";

/** One dependency check: resolves to a short detail when healthy, throws when not. */
export interface HealthProbe {
  readonly name: string;
  readonly required: boolean;
  check(): Promise<string> | string;
}

/** The HealthService RPC over a list of probes; later issues add upstreams and chains. */
export function createHealthService(probes: readonly HealthProbe[]): ServiceImpl<typeof HealthService> {
  return {
    async check() {
      const dependencies = await Promise.all(
        probes.map(async (probe) => {
          const started = process.hrtime.bigint();
          let ok = true;
          let detail: string;
          try {
            detail = await probe.check();
          } catch (error) {
            ok = false;
            detail = error instanceof Error ? error.message : String(error);
          }
          const latencyMicros = Number((process.hrtime.bigint() - started) / 1000n);
          return { name: probe.name, ok, required: probe.required, detail, latencyMicros };
        }),
      );
      return { ready: dependencies.every((d) => d.ok || !d.required), dependencies };
    },
  };
}
