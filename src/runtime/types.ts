/**
 * What a runtime is: its modes, the options it is opened with, and the running gateway it hands
 * back (runtime.ts opens it). Types only, so that the recipes and builders can name them
 * without importing the mode switch that imports them.
 */
import type { Transport } from "@connectrpc/connect";
import type { FastifyInstance } from "fastify";
import type { ChainsRuntime } from "../chains/chains-runtime.js";
import type { Config } from "../config/config.js";
import type { BillingCounters } from "../core/billing/billing-counters.js";
import type { HoldSweeper } from "../core/billing/hold-sweeper.js";
import type { Log } from "../core/ports/log.js";
import type { TextUpstream } from "../core/ports/providers.js";
import type { DevChains } from "../dev/chains/dev-chains.js";
import type { DevUpstream } from "../dev/provider/dev-upstream.js";
import type { LogLevel } from "../logger.js";
import type { MetricsEndpoint } from "../metrics/endpoint.js";
import type { CoreServer } from "../serving/server.js";
import type { Stores } from "../store/shared/store-set.js";
import type { ChainsWorker } from "./chains-worker.js";
import type { ImageResources } from "./images.js";

/**
 * What a runtime runs:
 * - `serve`: production. Refuses to start without a provider, a chain registry and a master
 *   secret (ServeRefused names each missing variable); chains on the configured RPCs, their
 *   watchers and settlement left to `tollgate worker`.
 * - `dev`: local stand-ins fill in what is not configured (the dev provider for text and images,
 *   dev chains and their faucet, the public dev secret), and the chains worker runs in a thread.
 * - `embedded`: exactly what the configuration names and nothing else: no stand-in, no chain
 *   (tests and in-process tools build gateways this way).
 * - `operator`: the core alone over the local database, as the operator (the CLI's commands),
 *   its ledger committing on this thread; no facade, no listener.
 * - `worker`: the chains worker alone (`tollgate worker`): every configured chain's deposit
 *   watcher and settlement worker on a connection of its own. Refuses without a chain registry
 *   and a master secret.
 */
export type RuntimeMode = "serve" | "dev" | "embedded" | "operator" | "worker";

/** Extra knobs, mostly for tests. */
export interface RuntimeOptions {
  readonly mode: RuntimeMode;
  /**
   * The level of the JSON log (src/logger.ts); with `false`, the core and the chains log their
   * errors only and the facade logs nothing (embedded runtimes in tests).
   */
  readonly logger?: false | { readonly level: LogLevel };
  readonly now?: () => number;
  /**
   * Operator mode: whether to build the chain adapters (deposit addresses, address checks,
   * treasury addresses). Default true; the CLI's commands that use none pass false and start
   * without loading the chain libraries (viem, @solana/*).
   */
  readonly chainAdapters?: boolean;
}

/**
 * A running gateway (or the part of one its mode builds) and every resource it opened. Nothing
 * listens until the caller says so; {@link Runtime.close} drains and closes it all.
 */
export interface Runtime {
  readonly mode: RuntimeMode;
  /** The configuration in force: in dev mode, with the stand-ins' URLs and registry filled in. */
  readonly config: Config;
  /** The REST facade; absent in operator and worker modes. */
  readonly facade: FastifyInstance | undefined;
  /** The core's gRPC/Connect server; absent when facade-only, operator or worker. */
  readonly core: CoreServer | undefined;
  /**
   * The core's services as a typed-client transport: in process (the facade's, or the
   * operator's in operator mode), or gRPC to the remote core when facade-only.
   */
  readonly transport: Transport | undefined;
  /**
   * The store (SQLite, or PostgreSQL with TOLLGATE_DATABASE_URL); absent when facade-only or
   * worker. On SQLite the ledger's writes are group-committed in a writer thread (on this thread
   * in operator mode).
   */
  readonly stores: Stores | undefined;
  /** Voids orphaned holds; started here (it sweeps once before the first request). */
  readonly sweeper: HoldSweeper | undefined;
  /** Billing anomalies counted by the core (unpriced or missing usage, capped charges). */
  readonly counters: BillingCounters | undefined;
  /**
   * The Prometheus metrics (TOLLGATE_METRICS_PORT; on by default in dev mode): the facade and the
   * core report to it; `main` starts its listener, and closing the runtime stops it.
   */
  readonly metrics: MetricsEndpoint | undefined;
  /** The text provider: its connection pool, or the router over a providers file's endpoints. */
  readonly textUpstream: TextUpstream | undefined;
  /** Image providers and the `url` image sweeper. */
  readonly images: ImageResources | undefined;
  /**
   * The chain adapters behind deposit addresses, address checks and chain health. Their
   * watcher and settlement loops never run on this loop: {@link Runtime.chainsWorker} does.
   */
  readonly chains: ChainsRuntime | undefined;
  /** The deposit watchers and settlement: a thread in dev mode, this process in worker mode. */
  readonly chainsWorker: ChainsWorker | undefined;
  /** The local stand-ins dev mode started, for the ready line. */
  readonly dev: { readonly upstream?: DevUpstream; readonly chains?: DevChains; readonly images: boolean };
  /** The gateway's JSON log (src/logger.ts): for what happens outside a request, up to its exit. */
  readonly log: Log;
  /**
   * Stops accepting, lets in-flight requests finish for at most `timeoutMs`, then closes every
   * resource in the reverse order of opening. Safe to call more than once.
   */
  close(timeoutMs?: number, reason?: string): Promise<void>;
}
