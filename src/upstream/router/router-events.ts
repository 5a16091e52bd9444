/**
 * What a router tells the outside about its endpoints (metrics: src/metrics/; health:
 * src/core/health-service.ts), and what it shows of its breakers.
 */
/** Told of every attempt and its fate; the gateway counts them in metrics. */
export interface RouterEvents {
  /** A call was sent to `endpoint` for `model`. */
  attempted(endpoint: string, model: string): void;
  /** That attempt failed before content (`reason`: a status, `stream_error`, or a failure kind). */
  failed(endpoint: string, model: string, reason: string): void;
  /** The call left `endpoint` for the next one. */
  failedOver(endpoint: string, model: string): void;
}

/** A breaker's state as health and metrics show it (breaker.ts). */
export type BreakerState = "closed" | "open" | "half-open";

/** One breaker as health and metrics show it. */
export interface BreakerView {
  readonly endpoint: string;
  readonly model: string;
  readonly state: BreakerState;
}

/** Events that go nowhere (tests, tools). */
export const NO_ROUTER_EVENTS: RouterEvents = {
  attempted() {},
  failed() {},
  failedOver() {},
};
