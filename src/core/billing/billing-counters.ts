/** A billing anomaly the operator must hear about, counted for the metrics endpoint. */
export type BillingAnomaly =
  /** The provider reported usage the gateway could not price (an unknown field, model or type). */
  | "unpriced_usage"
  /** A charge above its hold was capped: the provider went beyond its documented limits. */
  | "capped_charge"
  /** A 200 answer without usage: the charge was measured by the gateway instead. */
  | "missing_usage"
  /**
   * A call held pass by pass ended paused at a pass boundary: the raise its next pass needed was
   * declined (the provider may still bill the pass it was in, within the hold that covered it).
   */
  | "paused_turn";

/**
 * Counts of billing anomalies since start. Each is also logged with its request id where it
 * happens; these totals are what a metrics exporter scrapes.
 */
export class BillingCounters {
  private readonly counts = new Map<BillingAnomaly, number>();

  /** Counts one occurrence. */
  add(anomaly: BillingAnomaly): void {
    this.counts.set(anomaly, (this.counts.get(anomaly) ?? 0) + 1);
  }

  /** How many of `anomaly` were counted. */
  count(anomaly: BillingAnomaly): number {
    return this.counts.get(anomaly) ?? 0;
  }

  /** Every count, including zeros, for an exporter. */
  snapshot(): Readonly<Record<BillingAnomaly, number>> {
    return {
      unpriced_usage: this.count("unpriced_usage"),
      capped_charge: this.count("capped_charge"),
      missing_usage: this.count("missing_usage"),
      paused_turn: this.count("paused_turn"),
    };
  }
}
