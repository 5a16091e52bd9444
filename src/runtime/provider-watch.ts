/**
 * What the gateway shows of its provider endpoints (docs/providers.md, "Watching endpoints"):
 * the router's events as metrics, its open breakers as a gauge, and a health probe whose detail
 * lists every breaker that is not closed.
 */
import type { HealthProbe } from "../core/health-service.js";
import type { PrometheusMetrics } from "../metrics/prometheus.js";
import type { BreakerView, RouterEvents } from "../upstream/router/router-events.js";

/** The router's events, counted in `metrics`. */
export function routerMetrics(metrics: PrometheusMetrics): RouterEvents {
  return {
    attempted: (endpoint, model) => metrics.endpointEvent(endpoint, model, "request"),
    failed: (endpoint, model, reason) => metrics.endpointEvent(endpoint, model, "failure", reason),
    failedOver: (endpoint, model) => metrics.endpointEvent(endpoint, model, "failover"),
  };
}

/** A gauge of the breakers open (1) or half-open (0.5), per endpoint and model. */
export function breakerGauge(
  metrics: PrometheusMetrics,
  breakers: () => readonly BreakerView[],
  kind: "text" | "image" = "text",
): void {
  metrics.gauge(
    kind === "text" ? "tollgate_provider_breaker_open" : "tollgate_image_provider_breaker_open",
    "Provider endpoint breakers (docs/providers.md): 1 open, 0.5 half-open (one probe allowed), 0 closed.",
    ["endpoint", "model"],
    async (set) => {
      for (const view of breakers()) {
        set(
          { endpoint: view.endpoint, model: view.model },
          view.state === "open" ? 1 : view.state === "half-open" ? 0.5 : 0,
        );
      }
    },
  );
}

/**
 * The providers' health: not required (a breaker open is what failover is for); failing, with
 * the breakers named, while any is open or half-open.
 */
export function breakerProbe(
  breakers: () => readonly BreakerView[],
  name = "provider endpoints",
): HealthProbe {
  return {
    name,
    required: false,
    check() {
      const all = breakers();
      const resting = all.filter((view) => view.state !== "closed");
      const list = (views: readonly BreakerView[]) =>
        views.map((view) => `${view.endpoint} for ${view.model}: ${view.state}`).join("; ");
      if (resting.length > 0) throw new Error(`breakers not closed: ${list(resting)}`);
      return all.length === 0 ? "no call routed yet" : `every breaker closed (${all.length})`;
    },
  };
}
