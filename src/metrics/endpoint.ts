import type { BillingCounters } from "../core/billing/billing-counters.js";
import type { ChainWorkStore } from "../core/ports/chain-work.js";
import type { ChainAdapter } from "../core/ports/chains.js";
import type { LedgerBatches } from "../core/ports/metrics.js";
import { addChainGauges } from "./chain-gauges.js";
import { PrometheusMetrics } from "./prometheus.js";
import { listenMetrics, type MetricsServer } from "./server.js";

/** A gateway's metrics: the registry its parts report to, and the listener `main` starts. */
export interface MetricsEndpoint {
  readonly registry: PrometheusMetrics;
  /** The configured port (0: a free one). */
  readonly port: number;
  /** Starts serving `GET /metrics`; resolves with its URL. */
  listen(host: string, port?: number): Promise<string>;
  /** Stops the listener, if started. */
  close(): Promise<void>;
}

/** What a gateway with a core adds to its metrics at scrape time. */
export interface CoreSources {
  readonly counters: BillingCounters;
  /** The chains running here; none in a chain-less gateway. */
  readonly chains?:
    | {
        readonly ids: readonly string[];
        readonly adapter: (chainId: string) => ChainAdapter | undefined;
        readonly store: ChainWorkStore;
      }
    | undefined;
  readonly now: () => number;
  /** The store's ledger batches (PostgreSQL), counted at each scrape. */
  readonly batches?: (() => LedgerBatches) | undefined;
}

/** A metrics endpoint for the configured `port`; nothing listens until {@link MetricsEndpoint.listen}. */
export function openMetricsEndpoint(port: number): MetricsEndpoint {
  const registry = new PrometheusMetrics();
  let server: MetricsServer | undefined;
  return {
    registry,
    port,
    async listen(host, at = port) {
      server = await listenMetrics(registry, host, at);
      return server.url;
    },
    async close() {
      await server?.close();
      server = undefined;
    },
  };
}

/** Adds the core's billing anomalies and, when chains run, the per-chain gauges. */
export function watchCore(endpoint: MetricsEndpoint, sources: CoreSources): void {
  endpoint.registry.countAnomalies(sources.counters);
  if (sources.batches !== undefined) endpoint.registry.countBatches(sources.batches);
  const { chains } = sources;
  if (chains !== undefined)
    addChainGauges(endpoint.registry, {
      chains: chains.ids,
      adapter: chains.adapter,
      store: chains.store,
      now: sources.now,
    });
}
