import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import type { BillingAnomaly, BillingCounters } from "../core/billing/billing-counters.js";
import type {
  CallKind,
  HoldOutcome,
  LedgerBatches,
  Metrics,
  X402CollectionOutcome,
} from "../core/ports/metrics.js";
import type { FinishedRequest, RequestMetrics } from "../facade/metrics-hook.js";

/** Latency buckets in seconds: a millisecond to two minutes (a long generation). */
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
/**
 * Provider times kept until the facade's answer takes them. Bounded: calls made by network
 * callers straight to the core (no facade here) would otherwise leave theirs behind forever.
 */
const PENDING_PROVIDER_TIMES = 10_000;

const ANOMALY_METRICS: Readonly<Record<BillingAnomaly, { name: string; help: string }>> = {
  unpriced_usage: {
    name: "tollgate_unpriced_usage_calls_total",
    help: "Settled calls whose reported usage had parts the gateway could not price (charged what it knows).",
  },
  capped_charge: {
    name: "tollgate_capped_charges_total",
    help: "Settlements capped at their hold: the provider reported more than its documented limits.",
  },
  missing_usage: {
    name: "tollgate_missing_usage_calls_total",
    help: "Answers without believable usage, charged by the gateway's own count instead.",
  },
  paused_turn: {
    name: "tollgate_paused_turns_total",
    help: "Calls held pass by pass that the gateway ended paused at a pass boundary: the raise of the hold was declined.",
  },
};

/**
 * The gateway's metrics in a prom-client registry of its own (several gateways may share a test
 * process): the core's counts through the {@link Metrics} port, the facade's requests through
 * {@link RequestMetrics}, and collect-time gauges added by whoever knows their values
 * ({@link registry}). Amounts are kept as exact bigints and turned into a float only when scraped.
 */
export class PrometheusMetrics implements Metrics, RequestMetrics {
  readonly registry = new Registry();
  private readonly requests: Counter<"route" | "method" | "status" | "reason">;
  private readonly paymentRequired: Counter<"route" | "reason">;
  private readonly duration: Histogram<"route">;
  private readonly added: Histogram<"route">;
  private readonly firstByte: Histogram<"route">;
  private readonly provider: Histogram<"kind">;
  private readonly holdsPlaced: Counter<"kind">;
  private readonly holdsEnded: Counter<"outcome">;
  private readonly x402Collections: Counter<"outcome">;
  private readonly endpointEvents: Counter<"endpoint" | "model" | "event" | "reason">;
  /** Ledger units charged per `chain\0model`, exact, with the chain's ledger scale. */
  private readonly chargedTotals = new Map<string, { amount: bigint; decimals: number }>();
  private readonly providerTimes = new Map<string, number>();

  constructor() {
    const registers = [this.registry];
    // Process CPU, memory, GC and event-loop delay (nodejs_eventloop_lag_seconds, …_p99_seconds).
    collectDefaultMetrics({ register: this.registry });
    this.requests = new Counter({
      name: "tollgate_http_requests_total",
      help: "Facade requests answered, by route pattern, method, status and error reason (none on success).",
      labelNames: ["route", "method", "status", "reason"],
      registers,
    });
    this.paymentRequired = new Counter({
      name: "tollgate_payment_required_total",
      help: "402 answers: calls the caller's funds could not cover, by route and reason.",
      labelNames: ["route", "reason"],
      registers,
    });
    this.duration = new Histogram({
      name: "tollgate_http_request_duration_seconds",
      help: "Facade requests from arrival to the last byte of the answer (a stream's whole length).",
      labelNames: ["route"],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.added = new Histogram({
      name: "tollgate_gateway_added_latency_seconds",
      help: "Model calls: time to the answer's head less the provider's own time (what the gateway adds).",
      labelNames: ["route"],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.firstByte = new Histogram({
      name: "tollgate_stream_first_byte_seconds",
      help: "Streamed answers: from arrival to the first event written to the client.",
      labelNames: ["route"],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.provider = new Histogram({
      name: "tollgate_provider_latency_seconds",
      help: "The provider's time per call: to its response head for a stream, to its whole answer otherwise.",
      labelNames: ["kind"],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.holdsPlaced = new Counter({
      name: "tollgate_holds_placed_total",
      help: "Holds placed for new model calls, by call kind.",
      labelNames: ["kind"],
      registers,
    });
    this.holdsEnded = new Counter({
      name: "tollgate_holds_resolved_total",
      help: "Holds ended: settled (charged), released (nothing charged) or swept (expired by the sweeper).",
      labelNames: ["outcome"],
      registers,
    });
    this.x402Collections = new Counter({
      name: "tollgate_x402_collections_total",
      help:
        "x402 collections: settled (collected), refused (before delivery: nothing delivered or charged), " +
        "failed (after a stream was delivered: owed, its payer refused until an operator clears it).",
      labelNames: ["outcome"],
      registers,
    });
    this.endpointEvents = new Counter({
      name: "tollgate_provider_endpoint_events_total",
      help:
        "Provider endpoints behind the router (docs/providers.md): requests sent, failures before content " +
        "(reason: status, stream_error, or a failure kind) and failovers to the next endpoint.",
      labelNames: ["endpoint", "model", "event", "reason"],
      registers,
    });
    const totals = this.chargedTotals;
    new Counter({
      name: "tollgate_charged_microdollars_total",
      help: "Amount charged, in ledger units (micro-dollars on 6-decimal stablecoins), by chain and model.",
      labelNames: ["chain", "model"],
      registers,
      collect() {
        this.reset();
        for (const [key, { amount, decimals }] of totals) {
          const [chain = "", model = ""] = key.split("\0");
          this.inc({ chain, model }, microdollars(amount, decimals));
        }
      },
    });
  }

  /** Counts one router event of a provider endpoint: `request`, `failure` (with its reason) or `failover`. */
  endpointEvent(
    endpoint: string,
    model: string,
    event: "request" | "failure" | "failover",
    reason = "",
  ): void {
    this.endpointEvents.inc({ endpoint, model, event, reason });
  }

  /** Exposes the core's billing anomaly counts (kept by the core since start) at scrape time. */
  countAnomalies(counters: BillingCounters): void {
    for (const [anomaly, { name, help }] of Object.entries(ANOMALY_METRICS)) {
      new Counter({
        name,
        help,
        registers: [this.registry],
        collect() {
          this.reset();
          this.inc(counters.count(anomaly as BillingAnomaly));
        },
      });
    }
  }

  /**
   * Exposes the store's ledger batches (PostgreSQL: holds and resolutions sent together) at
   * scrape time: the batches, the items they carried and the items sent again alone, by kind.
   */
  countBatches(read: () => LedgerBatches): void {
    const series = [
      [
        "tollgate_ledger_batches_total",
        "Batches of two or more holds (resolutions) sent as one statement.",
        "batches",
      ],
      ["tollgate_ledger_batch_items_total", "Holds (resolutions) that went in a batch.", "items"],
      [
        "tollgate_ledger_batch_retries_total",
        "Items a batch failed (a lock wait past its limit, a race lost, a deadlock) and sent again alone.",
        "retried",
      ],
    ] as const;
    for (const [name, help, field] of series)
      new Counter({
        name,
        help,
        labelNames: ["kind"],
        registers: [this.registry],
        collect() {
          this.reset();
          const { holds, resolutions } = read();
          this.inc({ kind: "hold" }, holds[field]);
          this.inc({ kind: "resolution" }, resolutions[field]);
        },
      });
  }

  /** Adds a gauge whose values are read at each scrape (chain backlog, balances, lag). */
  gauge<L extends string>(
    name: string,
    help: string,
    labelNames: readonly L[],
    read: (set: (labels: Record<L, string>, value: number) => void) => Promise<void>,
  ): void {
    new Gauge<L>({
      name,
      help,
      labelNames,
      registers: [this.registry],
      async collect() {
        this.reset();
        await read((labels, value) => this.set(labels as never, value));
      },
    });
  }

  /** The exposition text, and its content type. */
  async scrape(): Promise<{ text: string; contentType: string }> {
    return { text: await this.registry.metrics(), contentType: this.registry.contentType };
  }

  x402Collected(outcome: X402CollectionOutcome): void {
    this.x402Collections.inc({ outcome });
  }

  holdPlaced(kind: CallKind): void {
    this.holdsPlaced.inc({ kind });
  }

  holdsResolved(outcome: HoldOutcome, count: number): void {
    this.holdsEnded.inc({ outcome }, count);
  }

  charged(chain: string, model: string, amount: bigint, decimals: number): void {
    const key = `${chain}\0${model}`;
    const total = this.chargedTotals.get(key)?.amount ?? 0n;
    this.chargedTotals.set(key, { amount: total + amount, decimals });
  }

  providerAnswered(requestId: string, kind: CallKind, seconds: number): void {
    this.provider.observe({ kind }, seconds);
    if (this.providerTimes.size >= PENDING_PROVIDER_TIMES) {
      const oldest = this.providerTimes.keys().next().value;
      if (oldest !== undefined) this.providerTimes.delete(oldest);
    }
    this.providerTimes.set(requestId, seconds);
  }

  requestFinished(request: FinishedRequest): void {
    const { route, status, reason } = request;
    this.requests.inc({ route, method: request.method, status: String(status), reason });
    if (status === 402) this.paymentRequired.inc({ route, reason });
    this.duration.observe({ route }, request.seconds);
    if (request.firstByteSeconds !== undefined) this.firstByte.observe({ route }, request.firstByteSeconds);
    const provider = this.providerTimes.get(request.requestId);
    if (provider === undefined) return;
    this.providerTimes.delete(request.requestId);
    if (request.headSeconds !== undefined)
      this.added.observe({ route }, Math.max(request.headSeconds - provider, 0));
  }
}

/**
 * Ledger units of 10^-`decimals` as micro-dollars (a stablecoin unit is a dollar): exact on a
 * 6-decimal chain up to 2^53 µ$ (about $9 billion), a float's precision beyond, and on finer chains.
 */
export function microdollars(amount: bigint, decimals: number): number {
  return decimals === 6 ? Number(amount) : Number(amount) * 10 ** (6 - decimals);
}
