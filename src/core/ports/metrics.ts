/**
 * The metrics port: what the core tells an exporter as it happens (src/metrics/prometheus.ts
 * serves it as Prometheus metrics). Every method is a cheap, synchronous count: the core never
 * waits on metrics, and a gateway without an exporter uses {@link NO_METRICS}.
 */

/** How a hold ended: charged, voided by its call, or expired by the sweeper. */
export type HoldOutcome = "settled" | "released" | "swept";

/**
 * How an x402 collection went: `settled` (collected onchain), `refused` (refused before its
 * answer was handed over: nothing delivered, nothing charged), `failed` (refused after a stream
 * was delivered: the charge is owed, and its payer is refused until an operator clears it).
 */
export type X402CollectionOutcome = "settled" | "refused" | "failed";

/** A model call's kind, as holds record it. */
export type CallKind = "text" | "image";

/** The core's side of the gateway's metrics. */
export interface Metrics {
  /** A hold was placed for a new call. */
  holdPlaced(kind: CallKind): void;
  /** `count` holds ended with `outcome` (the sweeper voids many at once). */
  holdsResolved(outcome: HoldOutcome, count: number): void;
  /**
   * A settlement charged `amount` on `chain` for `model`, in the chain's ledger units of
   * 10^-`ledgerDecimals` (micro-dollars on the shipped 6-decimal stablecoins).
   */
  charged(chain: string, model: string, amount: bigint, ledgerDecimals: number): void;
  /**
   * The provider answered call `requestId` after `seconds`: for a stream, its response head;
   * otherwise its whole answer (what the gateway waited for before it could answer). The facade,
   * in this process, subtracts it from its own time to get the latency the gateway added.
   */
  providerAnswered(requestId: string, kind: CallKind, seconds: number): void;
  /** An x402 payment's collection ended with `outcome`. */
  x402Collected(outcome: X402CollectionOutcome): void;
}

/** Metrics nobody reads: the operator CLI, and gateways without TOLLGATE_METRICS_PORT. */
export const NO_METRICS: Metrics = {
  holdPlaced: () => {},
  holdsResolved: () => {},
  charged: () => {},
  providerAnswered: () => {},
  x402Collected: () => {},
};

/** Batches of two or more sent, the items they carried, and the items sent again alone. */
export interface BatchTotals {
  readonly batches: number;
  readonly items: number;
  readonly retried: number;
}

/**
 * A host's ledger batches by kind since it started: PostgreSQL's holds and resolutions sent
 * together (docs/store.md, "Batches"), read by the metrics at each scrape.
 */
export interface LedgerBatches {
  readonly holds: BatchTotals;
  readonly resolutions: BatchTotals;
}
