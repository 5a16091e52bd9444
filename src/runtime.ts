import { setTimeout as sleep } from "node:timers/promises";
import { createRouterTransport, type Interceptor, type Transport } from "@connectrpc/connect";
import type { FastifyInstance } from "fastify";
import type { Logger } from "pino";
import type { ChainsRuntime } from "./chains/chains-runtime.js";
import type { ChainsSettings, ChainsWorker, ChainsWorkerSpec } from "./chains/chains-worker.js";
import { walletSignatures } from "./chains/wallet-signatures.js";
import { type Config, metricsPortOf, requireMasterSecret } from "./config.js";
import { FACADE_TOKEN_HEADER } from "./core/auth/facade-proof.js";
import type { BillingCounters } from "./core/billing/billing-counters.js";
import type { DevFaucet } from "./core/billing/funding.js";
import type { HoldSweeper } from "./core/billing/hold-sweeper.js";
import { receiptKeyFromMasterSecret } from "./core/billing/receipts.js";
import type { X402Payments } from "./core/billing/x402.js";
import type { X402SignIn } from "./core/billing/x402-sign-in.js";
import { operatorCallerResolver } from "./core/caller.js";
import { createCore } from "./core/core.js";
import type { HealthProbe } from "./core/health-service.js";
import { type Log, silentLog } from "./core/ports/log.js";
import type { Metrics } from "./core/ports/metrics.js";
import type { RateLimiterFactory } from "./core/ports/rate-limits.js";
import type { DevChains } from "./dev/chains/dev-chains.js";
import type { DevUpstream } from "./dev/provider/dev-upstream.js";
import { listenOrigins } from "./facade/listen-origins.js";
import type { ImageResources } from "./images-wiring.js";
import { memoryRateLimiter } from "./limits/memory.js";
import { chainsLogging, type LogLevel, lazyLog, openLogger } from "./logger.js";
import type { MetricsEndpoint } from "./metrics/endpoint.js";
import { createInProcessTransport } from "./serving/in-process-transport.js";
import type { CoreServer } from "./serving/server.js";
import { dataDirReceiptKey } from "./store/shared/receipt-key-file.js";
import { storageProbe } from "./store/shared/storage-probe.js";
import type { StoreChoice, Stores } from "./store/shared/store-set.js";
import type { Db } from "./store/sqlite/database.js";
import { openStores } from "./store/stores.js";
import type { AnthropicUpstream } from "./upstream/anthropic/client.js";

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
  /** The SQLite database, when the store is SQLite. */
  readonly db: Db | undefined;
  /** Voids orphaned holds; started here (it sweeps once before the first request). */
  readonly sweeper: HoldSweeper | undefined;
  /** Billing anomalies counted by the core (unpriced or missing usage, capped charges). */
  readonly counters: BillingCounters | undefined;
  /**
   * The Prometheus metrics (TOLLGATE_METRICS_PORT; on by default in dev mode): the facade and the
   * core report to it; `main` starts its listener, and closing the runtime stops it.
   */
  readonly metrics: MetricsEndpoint | undefined;
  /** The text provider's connection pool. */
  readonly textUpstream: AnthropicUpstream | undefined;
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

/** `serve` or `worker` without what production needs: the message names every missing variable. */
export class ServeRefused extends Error {
  constructor(
    readonly missing: readonly string[],
    command: "serve" | "worker" = "serve",
  ) {
    super(
      `${command} refuses to start without:\n${missing.map((m) => `  ${m}`).join("\n")}\n` +
        "Run `tollgate dev` (what `make run` runs) for the local provider, chains and faucet instead.",
    );
    this.name = "ServeRefused";
  }
}

const MISSING_CHAINS = "TOLLGATE_CHAINS (the chain registry file: chains, assets, RPC endpoints)";
const MISSING_SECRET =
  "TOLLGATE_MASTER_SECRET (hex, at least 32 bytes: deposit and treasury keys derive from it)";
const MISSING_PUBLIC_URL =
  "TOLLGATE_PUBLIC_URL (the gateway's public origin, e.g. https://gw.example.com: dashboard sign-ins must name it)";
const MISSING_FACADE_TOKEN =
  "TOLLGATE_FACADE_TOKEN (at least 32 characters, the same as the core's: it vouches for this tier's clients)";

/**
 * What production cannot run without: a model provider, a chain registry and the master secret
 * (the worker: the last two), and the public URL; a facade-only tier needs the public URL and the
 * facade token instead. Each is named with the variable that supplies it.
 */
function missingForProduction(config: Config, mode: "serve" | "worker"): string[] {
  const missing: string[] = [];
  if (mode === "serve" && config.coreUrl !== undefined) {
    if (config.images.publicUrl === undefined) missing.push(MISSING_PUBLIC_URL);
    if (config.facadeToken === undefined) missing.push(MISSING_FACADE_TOKEN);
    return missing;
  }
  if (mode === "serve" && config.anthropic.url === undefined) {
    missing.push("TOLLGATE_ANTHROPIC_API_KEY (the model provider's key; or TOLLGATE_ANTHROPIC_URL)");
  }
  if (config.onchain.mode !== "configured") missing.push(MISSING_CHAINS);
  if (config.onchain.masterSecret === undefined) missing.push(MISSING_SECRET);
  if (mode === "serve" && config.images.publicUrl === undefined) missing.push(MISSING_PUBLIC_URL);
  return missing;
}

/** How a resource is closed: with the drain budget left, when it has one. */
type Closer = (drain: { readonly deadline: number; readonly reason: string }) => Promise<void> | void;

/**
 * Resources in the order they were opened, closed in reverse. A closer that fails does not stop
 * the ones after it; the first failure is rethrown once all have run.
 */
class ResourceStack {
  private readonly closers: Closer[] = [];
  private closing: Promise<void> | undefined;

  defer(closer: Closer): void {
    this.closers.push(closer);
  }

  close(timeoutMs: number, reason: string): Promise<void> {
    this.closing ??= (async () => {
      const drain = { deadline: Date.now() + timeoutMs, reason };
      let failure: unknown;
      for (const closer of this.closers.reverse()) {
        try {
          await closer(drain);
        } catch (error) {
          failure ??= error;
        }
      }
      if (failure !== undefined) throw failure;
    })();
    return this.closing;
  }
}

/**
 * The composition root: builds the gateway (or, by mode, the operator's core or the chains
 * worker) from its configuration, owning every resource it opens. Never listens. If building
 * fails, whatever was opened is closed before the error is thrown.
 */
export async function openRuntime(config: Config, options: RuntimeOptions): Promise<Runtime> {
  const { mode } = options;
  if (mode === "serve" || mode === "worker") {
    const missing = missingForProduction(config, mode);
    if (missing.length > 0) throw new ServeRefused(missing, mode);
  }
  const stack = new ResourceStack();
  const parts: Mutable<Omit<Runtime, "close" | "mode" | "config">> = {
    facade: undefined,
    core: undefined,
    transport: undefined,
    stores: undefined,
    db: undefined,
    sweeper: undefined,
    counters: undefined,
    metrics: undefined,
    textUpstream: undefined,
    images: undefined,
    chains: undefined,
    chainsWorker: undefined,
    dev: { images: false },
    log: silentLog,
  };
  try {
    config = await assemble(config, options, stack, parts);
  } catch (error) {
    await stack.close(0, "start-up failed").catch(() => {});
    throw error;
  }
  return {
    ...parts,
    mode,
    config,
    close: (timeoutMs = 0, reason = "shutdown") => stack.close(timeoutMs, reason),
  };
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

/** Opens each part in order, deferring its close on `stack`; returns the configuration in force. */
async function assemble(
  config: Config,
  { mode, chainAdapters = true, logger: logging = false, now }: RuntimeOptions,
  stack: ResourceStack,
  parts: Mutable<Omit<Runtime, "close" | "mode" | "config">>,
): Promise<Config> {
  const logLevel = logging === false ? "error" : logging.level;
  // Unlogged runtimes (the CLI's operator mode, tests) keep errors off stdout, where a command's
  // --json output goes.
  const logger = logging === false ? undefined : openLogger(logLevel);
  const log: Log = logger ?? lazyLog(() => openLogger(logLevel, 2));
  parts.log = log;
  if (mode === "worker") {
    const { runChainsWorker } = await import("./chains/chains-worker.js");
    const worker = await runChainsWorker(
      chainsWorkerSpec(
        config,
        { masterSecret: config.onchain.masterSecret!, startAt: "finalized" },
        logLevel,
      ),
    );
    parts.chainsWorker = worker;
    stack.defer(() => worker.stop());
    return config;
  }
  const metricsPort = mode === "operator" ? undefined : metricsPortOf(config, mode === "dev");
  if (metricsPort !== undefined) {
    // Loaded only by the gateways that serve metrics: prom-client stays out of the CLI.
    const { openMetricsEndpoint } = await import("./metrics/endpoint.js");
    const endpoint = openMetricsEndpoint(metricsPort);
    parts.metrics = endpoint;
    stack.defer(() => endpoint.close());
  }
  if (config.coreUrl !== undefined && mode !== "operator") {
    parts.transport = remoteCoreTransport(config.coreUrl, undefined, config.facadeToken);
    // The remote core decides whether it takes x402; the door is served when configured so.
    await openFacade(config, parts.transport, config.coreUrl, logger, stack, parts, config.onchain.x402);
    return config;
  }
  if (config.coreUrl !== undefined) {
    // The operator's commands against a remote core: over gRPC with the operator token.
    parts.transport = remoteCoreTransport(config.coreUrl, config.adminToken);
    return config;
  }

  // Chains: the configured registry's RPCs, or in dev mode local dev chains started here; never
  // the shipped registry's public RPCs unless configured. Embedded runtimes run none.
  let onchain: OnchainSetup | undefined;
  if (mode === "serve" || mode === "dev") {
    if (config.onchain.mode !== "off") {
      // Only dev chains run on the public dev secret (serve has refused without a secret, and
      // configured chains without one stop here).
      const masterSecret =
        config.onchain.masterSecret ?? requireMasterSecret(config.onchain, await devMasterSecret());
      let devChains: DevChains | undefined;
      if (config.onchain.mode === "dev") {
        const { startDevChains } = await import("./dev/chains/dev-chains.js");
        devChains = await startDevChains(config.chains, {
          dataDir: config.dataDir,
          log: (line) => log.info({ component: "dev-chains" }, line),
        });
        stack.defer(() => devChains!.close());
        parts.dev = { ...parts.dev, chains: devChains };
        config = { ...config, chains: devChains.registry };
      }
      onchain = {
        masterSecret,
        startAt: devChains === undefined ? "finalized" : "genesis",
        only: devChains?.running,
        faucet:
          devChains === undefined
            ? undefined
            : { chains: devChains.running, mint: devChains.mint.bind(devChains) },
      };
    }
  } else if (mode === "operator") {
    // Deposit addresses and address checks need the chain adapters (derivation only: nothing is
    // contacted). In dev mode the registry of running dev chains, if any, is the one that counts.
    const { onchain: settings } = config;
    if (settings.mode !== "off" && (settings.masterSecret !== undefined || settings.mode === "dev")) {
      if (settings.mode === "dev") {
        const { readDevChainsFile } = await import("./dev/chains/dev-chains-file.js");
        config = { ...config, chains: readDevChainsFile(config.dataDir)?.registry ?? config.chains };
      }
      onchain = {
        masterSecret: settings.masterSecret ?? (await devMasterSecret()),
        startAt: "finalized",
      };
    }
  }
  if (mode === "dev" && config.anthropic.url === undefined) {
    // No provider configured: text calls go to the built-in stand-in, and the ready line says so.
    const upstream = await startDevUpstreamOnce(stack, parts);
    config = { ...config, anthropic: { ...config.anthropic, url: upstream.url } };
  }
  if (mode === "dev" && !hasImageProvider(config)) {
    // No image provider either: images go to the same stand-in (it speaks the Gemini format too).
    // In production the image routes are simply not served.
    const upstream = await startDevUpstreamOnce(stack, parts);
    config = {
      ...config,
      images: { ...config.images, gemini: { ...config.images.gemini, url: upstream.url } },
    };
    parts.dev = { ...parts.dev, images: true };
  }

  // The operator's command does a few writes: committed on this thread (a writer thread would cost more).
  const stores = await openStores(storeChoice(config), { serving: mode !== "operator" });
  parts.stores = stores;
  parts.db = stores.db;
  stack.defer(() => stores.close());

  let chains: ChainsRuntime | undefined;
  if (onchain !== undefined && chainAdapters) {
    // Loaded only when chains run: viem and friends stay out of chain-less processes.
    const { ChainsRuntime } = await import("./chains/chains-runtime.js");
    chains = await ChainsRuntime.create({
      ...chainsSettings(config, onchain),
      store: stores.chainWork,
      now,
      ...chainsLogging(log),
    });
    parts.chains = chains;
    stack.defer(() => chains!.stop());
  }

  let textUpstream: AnthropicUpstream | undefined;
  let images: ImageResources | undefined;
  if (mode !== "operator") {
    // Loaded here, not at the top: the operator's commands never load the provider clients.
    const { AnthropicUpstream } = await import("./upstream/anthropic/client.js");
    const { imageResources } = await import("./images-wiring.js");
    const { anthropic } = config;
    if (anthropic.url !== undefined) {
      const upstream = new AnthropicUpstream({
        baseUrl: anthropic.url,
        apiKey: anthropic.apiKey,
        connectTimeoutMs: anthropic.connectTimeoutMs,
        headersTimeoutMs: anthropic.headersTimeoutMs,
        idleTimeoutMs: anthropic.idleTimeoutMs,
        responseTimeoutMs: anthropic.responseTimeoutMs,
        // Every streaming call holds its own HTTP/1.1 connection for as long as it runs.
        connections: config.upstreamConnections === 0 ? null : config.upstreamConnections,
      });
      textUpstream = upstream;
      parts.textUpstream = upstream;
      stack.defer(() => upstream.close());
    }
    const opened = imageResources(config);
    images = opened;
    parts.images = opened;
    stack.defer(() => opened.close());
  }

  const probes: HealthProbe[] = [stores.probe, storageProbe(config.dataDir), ...(chains?.probes() ?? [])];
  // Per-key limits and failed authentications per address: in this process's memory, or in
  // Redis, shared by every host.
  let rateLimiter: RateLimiterFactory = memoryRateLimiter;
  if (mode !== "operator" && config.redisUrl !== undefined) {
    const { connectRedis, redisRateLimiter } = await import("./limits/redis.js");
    const redis = await connectRedis(config.redisUrl);
    stack.defer(async () => {
      await redis.quit().catch(() => redis.disconnect());
    });
    rateLimiter = redisRateLimiter(redis, (reason) => log.error({ component: "rate-limits" }, reason));
    probes.push({
      name: "redis",
      required: false,
      check: async () => `${await redis.ping()} (rate limits)`,
    });
  }
  // x402: keyless calls paid per request on the chains that run (docs/x402.md).
  let x402: X402Payments | undefined;
  if (mode !== "operator" && onchain !== undefined && chains !== undefined && config.onchain.x402) {
    x402 = await openX402(
      config,
      onchain,
      stores,
      parts.dev.chains,
      now ?? Date.now,
      log,
      parts.metrics?.registry,
    );
    if (x402 !== undefined) {
      const payments = x402;
      // Deferred before the facade: run after it drained, so every collection it started ends.
      stack.defer(() => payments.drain());
    }
  }
  // Keyless receipts: the payer signs in with x402's sign-in-with-x (docs/receipts.md).
  const x402SignIn =
    x402 === undefined ? undefined : await openX402SignIn(config, stores, mode, parts, now ?? Date.now);
  // Receipts are signed with a key derived from the master secret (every host alike); without
  // one (chains off), with a key kept in the data dir. The operator's CLI signs none: it reads
  // and creates no key file (a read-only command creates nothing).
  const receiptSecret = onchain?.masterSecret ?? config.onchain.masterSecret;
  const receiptKey =
    mode === "operator"
      ? undefined
      : receiptSecret === undefined
        ? dataDirReceiptKey(config.dataDir)
        : receiptKeyFromMasterSecret(receiptSecret);
  const publicUrl = config.images.publicUrl;
  const core = createCore({
    wallets: walletSignatures(),
    receiptKey,
    publicOrigin: publicUrl,
    // Sign-in checks the gateway's configured origin, or (dev, tests) where its facade listens.
    signInOrigins: publicUrl === undefined ? () => listenOrigins(parts.facade?.server) : () => [publicUrl],
    facadeToken: config.facadeToken,
    accounts: stores.accounts,
    sessions: stores.sessions,
    ledger: stores.ledger,
    onchain: stores.ledger,
    idempotency: stores.idempotency,
    // Failed authentications per client address, in the same store as the rate limits.
    authFailures:
      mode === "operator" || config.authFailuresPerMinute === 0
        ? undefined
        : { rateLimiter, perMinute: config.authFailuresPerMinute, blockMs: config.authBlockMs },
    // Work without a key per client address (keyless calls, sign-in nonces), in the same store.
    anonymousLimits:
      mode === "operator"
        ? undefined
        : {
            rateLimiter,
            callsPerMinute: config.anonymousCallsPerMinute,
            noncesPerMinute: config.signInNoncesPerMinute,
          },
    maxLiveKeys: config.maxLiveKeys,
    adminToken: config.adminToken,
    now,
    chains: config.chains,
    catalog: config.catalog,
    maxCallMs: config.maxCallMs,
    holdSweepIntervalMs: config.holdSweepIntervalMs,
    healthIntervalMs: config.healthIntervalMs,
    webSearchMaxUses: config.webSearchMaxUses,
    inference:
      textUpstream === undefined
        ? undefined
        : {
            textUpstream,
            rateLimiter,
            clientPolicy: config.clientPolicy,
            messagesPerMinute: config.rateLimitPerMinute,
            countTokensPerMinute: config.countTokensPerMinute,
            streamPingMs: config.streamPingMs,
            images: images?.deps,
          },
    log: logger?.child({ component: "core" }) ?? log,
    chainDirectory: chains,
    faucet: onchain?.faucet,
    devMode: mode === "dev",
    withdrawalLimit: rateLimiter("withdrawals", config.onchain.withdrawalsPerHour, 3_600_000),
    metrics: parts.metrics?.registry,
    probes,
    x402,
    x402SignIn,
  });
  parts.counters = core.counters;
  if (parts.metrics !== undefined) {
    const { watchCore } = await import("./metrics/endpoint.js");
    const running = chains;
    watchCore(parts.metrics, {
      counters: core.counters,
      chains:
        running === undefined
          ? undefined
          : {
              ids: config.chains.chains.map((c) => c.id).filter((id) => running.adapter(id) !== undefined),
              adapter: (id) => running.adapter(id),
              store: stores.chainWork,
            },
      now: now ?? Date.now,
    });
  }
  if (mode === "operator") {
    parts.transport = createRouterTransport(core.routes, {
      router: core.routerOptionsFor(operatorCallerResolver),
    });
    return config;
  }

  // Dev mode runs the chains worker (deposit watchers, settlement) in a thread of this process;
  // production runs it as `tollgate worker`, a process of its own. Never on the request loop.
  if (mode === "dev" && onchain !== undefined) {
    const { startChainsThread } = await import("./chains/chains-worker.js");
    const worker = await startChainsThread(chainsWorkerSpec(config, onchain, logLevel));
    parts.chainsWorker = worker;
    stack.defer(() => worker.stop());
    const devChains = parts.dev.chains;
    if (devChains !== undefined && chains !== undefined) await fundDevTreasuries(devChains, chains, log);
  }

  // Dependencies are checked in the background; health requests read the last round.
  core.health.start();
  stack.defer(() => core.health.stop());
  // Holds orphaned by a crash are voided before the first request is served.
  await core.sweeper.start();
  parts.sweeper = core.sweeper;
  stack.defer(() => core.sweeper.stop());
  // x402 payments a crash left open are collected or closed, once their calls are over.
  if (x402 !== undefined) {
    const payments = x402;
    payments.startRecovery(config.holdSweepIntervalMs);
    stack.defer(() => payments.stopRecovery());
  }
  // The facade calls the core's services in this process without a protobuf round trip.
  parts.transport = createInProcessTransport(core.routes, core.routerOptions.interceptors ?? []);
  const { buildCoreServer } = await import("./serving/server.js");
  const coreServer = await buildCoreServer(core, { logger });
  parts.core = coreServer;
  // Closed after the facade has drained (the reverse of this order): calls in flight through the
  // facade still reach the core in process, and network callers get the same drain budget.
  stack.defer(async ({ deadline }) => {
    coreServer.stopAccepting();
    while (coreServer.inFlight() > 0 && Date.now() < deadline) await sleep(10);
    await coreServer.server.close();
  });
  images?.startSweeper((error) => log.error({ err: error }, "the image sweeper failed"));
  await openFacade(config, parts.transport, "in-process", logger, stack, parts, x402 !== undefined);
  return config;
}

/** What running chains needs beyond the configuration. */
interface OnchainSetup {
  readonly masterSecret: Uint8Array;
  readonly startAt: "genesis" | "finalized";
  /** Run only these chains (dev mode: those with a local dev chain). */
  readonly only?: ReadonlySet<string> | undefined;
  /** Dev mode: the dev chains' mint, behind BillingService.RequestTestFunds. */
  readonly faucet?: DevFaucet | undefined;
}

/** Builds the facade and defers its drain: the first thing closed. */
async function openFacade(
  config: Config,
  transport: Transport,
  coreLocation: string,
  logger: Logger | undefined,
  stack: ResourceStack,
  parts: { facade: FastifyInstance | undefined; metrics: MetricsEndpoint | undefined },
  x402: boolean,
): Promise<void> {
  // Fastify and the facade's routes: loaded only by the runtimes that serve them.
  const { buildFacade } = await import("./facade/facade.js");
  const facade = await buildFacade({
    transport,
    coreLocation,
    metrics: parts.metrics?.registry,
    logger,
    images: config.images,
    publicUrl: config.images.publicUrl === undefined ? undefined : new URL(config.images.publicUrl),
    clientTimeouts: config.clientTimeouts,
    trustProxy: config.trustProxy,
    x402,
    unpaidBodyBytes: config.unpaidBodyBytes,
  });
  parts.facade = facade;
  stack.defer(async ({ deadline, reason }) => {
    const timeoutMs = Math.max(deadline - Date.now(), 0);
    facade.log.info({ reason, timeoutMs }, "shutting down: draining in-flight requests");
    const force = setTimeout(() => facade.server.closeAllConnections(), timeoutMs);
    force.unref();
    // A connection whose request finishes during the drain turns idle but stays kept alive;
    // close those as they appear instead of waiting for the client's keep-alive to lapse.
    const reap = setInterval(() => facade.server.closeIdleConnections(), 25);
    // Fastify's close stops the listener, answers 503 on kept-alive connections and waits for
    // in-flight requests; the timer above bounds that wait.
    try {
      await facade.close();
    } finally {
      clearInterval(reap);
      clearTimeout(force);
    }
  });
}

/**
 * Wallet sign-in for keyless payers' receipts, bound to TOLLGATE_PUBLIC_URL, else under
 * `tollgate dev` to the facade's own listen origin (asked once it listens); never to a request's
 * Host. Under `serve` without TOLLGATE_PUBLIC_URL there is no origin: keyless receipts answer
 * 503 naming the variable (fail closed), and keyed ones are unaffected.
 */
async function openX402SignIn(
  config: Config,
  stores: Stores,
  mode: RuntimeMode,
  parts: { facade: FastifyInstance | undefined },
  now: () => number,
): Promise<X402SignIn> {
  const { X402SignIn } = await import("./core/billing/x402-sign-in.js");
  const { createSignInWithX } = await import("./chains/x402/sign-in-with-x.js");
  const configured = config.images.publicUrl;
  return new X402SignIn({
    nonces: stores.sessions,
    origin: () => configured ?? (mode === "dev" ? listenOrigin(parts.facade) : undefined),
    chains: config.chains.chains.filter((c) => c.enabled),
    proofs: createSignInWithX(),
    now,
  });
}

/** The origin a listening facade answers at (`http://127.0.0.1:8787`); undefined before it listens. */
function listenOrigin(facade: FastifyInstance | undefined): string | undefined {
  const address = facade?.server.address();
  if (address === null || address === undefined || typeof address === "string") return undefined;
  // A wildcard listener is reached through loopback on the machine `tollgate dev` runs on.
  const host =
    address.address === "0.0.0.0" ? "127.0.0.1" : address.address === "::" ? "::1" : address.address;
  return `http://${host.includes(":") ? `[${host}]` : host}:${address.port}`;
}

/** The public dev master secret, from the dev wing (loaded only when dev chains need it). */
async function devMasterSecret(): Promise<Uint8Array> {
  const { DEV_MASTER_SECRET } = await import("./dev/chains/dev-chains-file.js");
  return DEV_MASTER_SECRET;
}

/** The dev provider, started at most once per runtime (text and images share it). */
async function startDevUpstreamOnce(
  stack: ResourceStack,
  parts: { dev: Runtime["dev"] },
): Promise<DevUpstream> {
  if (parts.dev.upstream !== undefined) return parts.dev.upstream;
  const { startDevUpstream } = await import("./dev/provider/dev-upstream.js");
  const upstream = await startDevUpstream({ host: "127.0.0.1", port: 0 });
  stack.defer(() => upstream.close());
  parts.dev = { ...parts.dev, upstream };
  return upstream;
}

/**
 * x402 payments over the local facilitator (or TOLLGATE_X402_FACILITATOR_URL's), on every chain
 * that runs; undefined when none does. On dev chains the facilitator's signers get gas and fees.
 */
async function openX402(
  config: Config,
  onchain: OnchainSetup,
  stores: Stores,
  devChains: DevChains | undefined,
  now: () => number,
  log: Log,
  metrics: Metrics | undefined,
): Promise<X402Payments | undefined> {
  const { setUpX402 } = await import("./chains/x402/facilitator.js");
  const { X402Payments } = await import("./core/billing/x402.js");
  const setup = await setUpX402(config.chains, onchain.masterSecret, {
    only: onchain.only,
    facilitatorUrl: config.onchain.x402FacilitatorUrl,
    openTokenAccount:
      devChains === undefined ? undefined : (chain, owner) => devChains.openTokenAccount(chain, owner),
    log,
  });
  if (setup.chains.length === 0) return undefined;
  // Dev chains: the facilitator's signers get gas (EVM) and fees (Solana).
  if (devChains !== undefined) {
    for (const [chain, signer] of setup.signers) await devChains.fundFees(chain, signer);
  }
  return await X402Payments.create({
    store: stores.ledger,
    ledger: stores.ledger,
    maxCallMs: config.maxCallMs,
    accounts: stores.accounts,
    registry: config.chains,
    gateway: setup.gateway,
    chains: setup.chains,
    // A payment must outlive the longest call, with room to collect after it.
    maxTimeoutSeconds: Math.ceil(config.maxCallMs / 1000) + 300,
    publicOrigin: config.images.publicUrl,
    maxAuthorisation: config.onchain.x402MaxAuthorisation,
    metrics,
    now,
    log,
  });
}

/** The treasury pays every settlement's fees: give it dev gas on each local chain. */
async function fundDevTreasuries(devChains: DevChains, chains: ChainsRuntime, log: Log): Promise<void> {
  for (const id of devChains.running) {
    const treasury = chains.adapter(id)?.treasuryAddress();
    if (treasury === undefined) continue;
    await devChains
      .fundFees(id, treasury)
      .catch((error: unknown) =>
        log.warn({ component: "dev-chains", chain: id, err: error }, "could not fund the treasury's fees"),
      );
  }
}

/** The chains' settings, for the adapters built here and for the chains worker. */
function chainsSettings(config: Config, onchain: OnchainSetup): ChainsSettings {
  return {
    registry: config.chains,
    masterSecret: onchain.masterSecret,
    settlement: { mode: config.onchain.settlementMode, batchWindowMs: config.onchain.batchWindowMs },
    pollMs: config.onchain.pollMs,
    scanRange: config.onchain.scanRange,
    startAt: onchain.startAt,
    only: onchain.only,
  };
}

/** The chains worker's job for this gateway's configuration and chains. */
function chainsWorkerSpec(config: Config, onchain: OnchainSetup, logLevel: LogLevel): ChainsWorkerSpec {
  return { store: storeChoice(config), logLevel, ...chainsSettings(config, onchain) };
}

/** The configured store: PostgreSQL when TOLLGATE_DATABASE_URL names one, else SQLite in the data dir. */
function storeChoice(config: Config): StoreChoice {
  return config.databaseUrl === undefined
    ? { kind: "sqlite", dataDir: config.dataDir }
    : { kind: "postgres", url: config.databaseUrl, poolSize: config.databasePoolSize };
}

/**
 * A gRPC transport to a core elsewhere (facade-only mode, and the CLI with TOLLGATE_CORE_URL).
 * With `bearer`, every call presents it (the CLI's operator token); with `facadeToken`, every
 * call proves it comes from a facade tier (TOLLGATE_FACADE_TOKEN). The HTTP/2 client
 * (@connectrpc/connect-node) is loaded at the first call, so that processes on a local core,
 * such as the CLI's commands, start without it.
 */
export function remoteCoreTransport(baseUrl: string, bearer?: string, facadeToken?: string): Transport {
  const interceptors: Interceptor[] = [];
  if (bearer !== undefined) {
    interceptors.push((next) => (req) => {
      req.header.set("authorization", `Bearer ${bearer}`);
      return next(req);
    });
  }
  if (facadeToken !== undefined) {
    interceptors.push((next) => (req) => {
      req.header.set(FACADE_TOKEN_HEADER, facadeToken);
      return next(req);
    });
  }
  let grpc: Promise<Transport> | undefined;
  const opened = () =>
    (grpc ??= import("@connectrpc/connect-node").then(({ createGrpcTransport }) =>
      createGrpcTransport({ baseUrl, interceptors }),
    ));
  return {
    async unary(method, signal, timeoutMs, header, input, contextValues) {
      return await (await opened()).unary(method, signal, timeoutMs, header, input, contextValues);
    },
    async stream(method, signal, timeoutMs, header, input, contextValues) {
      return await (await opened()).stream(method, signal, timeoutMs, header, input, contextValues);
    },
  };
}

/** Whether any image provider is configured (Gemini or OpenAI-images format). */
function hasImageProvider(config: Config): boolean {
  return config.images.gemini.url !== undefined || config.images.openai.url !== undefined;
}
