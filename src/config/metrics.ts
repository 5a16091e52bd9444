import { type Env, optional, optionalPort } from "./read.js";

/** The metrics port `tollgate dev` serves when TOLLGATE_METRICS_PORT is unset (Prometheus's exporter range). */
export const DEV_METRICS_PORT = 9464;

/** The Prometheus endpoint (docs/operations.md). */
export interface MetricsConfig {
  /**
   * Port of the Prometheus metrics endpoint (`GET /metrics`, docs/operations.md); 0 picks a free
   * port. `off` serves none; unset is the mode's default (`dev`: {@link DEV_METRICS_PORT}, else off).
   */
  readonly metricsPort: number | "off" | undefined;
  /** Address the metrics endpoint binds to. */
  readonly metricsHost: string;
}

export function metricsConfig(env: Env): MetricsConfig {
  return {
    metricsPort:
      optional(env, "TOLLGATE_METRICS_PORT") === "off" ? "off" : optionalPort(env, "TOLLGATE_METRICS_PORT"),
    metricsHost: optional(env, "TOLLGATE_METRICS_HOST") ?? "127.0.0.1",
  };
}

/**
 * The metrics port a gateway serves: the configured one, else {@link DEV_METRICS_PORT} in dev
 * mode; undefined when off (the default of `serve`).
 */
export function metricsPortOf(config: MetricsConfig, devMode: boolean): number | undefined {
  if (config.metricsPort === "off") return undefined;
  return config.metricsPort ?? (devMode ? DEV_METRICS_PORT : undefined);
}
