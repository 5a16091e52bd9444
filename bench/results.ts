/**
 * The shape of one `make bench` run as kept in bench/results/*.json; docs/benchmarks.md is
 * regenerated from it (bench/report.ts).
 */
import type { HoldSettleResult } from "./hold-settle.js";
import type { RateResult, SaturateResult } from "./load.js";

/**
 * Who the client talks to: (a) the fake upstream, (b) the pass-through proxy, (c) the gateway,
 * (d) the peer gateway (Portkey's).
 */
export type TargetId = "direct" | "proxy" | "gateway" | "peer";

/** What is sent. `idle` is a stream the upstream opens and then leaves silent. */
export type Scenario = "messages" | "stream" | "count_tokens" | "image" | "idle";

/** A saturation run against one target. */
export interface SaturationFigure extends SaturateResult {
  readonly target: TargetId;
  readonly scenario: Scenario;
  /** CPU time the server process spent per request (utime + stime), when the harness knows its pid. */
  readonly cpuPerRequestMs: number | undefined;
}

/** An open-loop run against one target. */
export interface RateFigure extends RateResult {
  readonly target: TargetId;
  readonly scenario: Scenario;
}

/** Idle streams held open through one target. */
export interface IdleFigure {
  readonly target: TargetId;
  /** Streams asked for (--streams). */
  readonly requested: number;
  /** Streams attempted: the request, capped by the file-descriptor limit. */
  readonly streams: number;
  readonly opened: number;
  readonly failed: number;
  readonly openingMs: number;
  readonly rssBeforeBytes: number;
  readonly rssHeldBytes: number;
}

/**
 * One store configuration under load: billed calls per second at saturation, and latency at
 * 300 and 500 requests/s beside the pass-through measured in the same phase. `-many`
 * configurations spread the calls over many accounts (a key each, in turn); the others make
 * every call with one account's key.
 */
export interface StoreFigure {
  readonly config:
    | "sqlite-1"
    | "postgres-1"
    | "postgres-2"
    | "sqlite-1-many"
    | "postgres-1-many"
    | "postgres-2-many";
  readonly label: string;
  readonly hosts: number;
  /** Accounts the calls are spread over; absent (one) in runs before 2026-11-28's many-account rows. */
  readonly accounts?: number;
  readonly saturate: SaturateResult;
  readonly rate: RateResult;
  /** The pass-through proxy at the same rate, measured just before. */
  readonly floor: RateResult;
  /** The same at 300 requests/s (issue 32's target rate); absent in runs before 2026-11-28. */
  readonly rate300?: RateResult;
  readonly floor300?: RateResult;
}

/** One run of the harness. */
export interface BenchResults {
  readonly version: 1;
  readonly startedAt: string;
  finishedAt: string;
  readonly machine: {
    readonly cores: number;
    readonly cpuModel: string;
    readonly memoryBytes: number;
    readonly node: string;
    /** 1, 5 and 15-minute load averages when the run started and ended (a shared machine). */
    readonly loadBefore: number[];
    loadAfter: number[];
    readonly fdLimit: number;
  };
  readonly gateway: { readonly name: string; readonly url: string; readonly commit: string };
  /** The peer measured as (d); absent in runs from before it was added. */
  readonly peer?: { readonly name: string; readonly package: string } | undefined;
  readonly settings: {
    readonly seconds: number;
    readonly upstreamLatencyMs: number;
    readonly saturationConnections: number;
    readonly quick: boolean;
    /**
     * The store phase ran with the gateway target and the peer stopped (bench/run.ts); absent
     * in runs from before 2026-11-29 20:45, where both sat idle beside it.
     */
    storesAlone?: boolean;
  };
  readonly saturation: SaturationFigure[];
  readonly rates: RateFigure[];
  readonly ttfb: RateFigure[];
  readonly idle: IdleFigure[];
  holdSettle: HoldSettleResult | undefined;
  /** The store phase; absent in runs from before it was added. */
  readonly stores?: StoreFigure[];
  /**
   * The guard's verdict against the last kept run (bench/guard.ts), as printed; absent when there
   * was none, and in runs from before the guard.
   */
  guard?: string[];
}
