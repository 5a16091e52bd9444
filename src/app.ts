import type { Interceptor, Transport } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { FastifyInstance } from "fastify";
import type { ChainsRuntime } from "./chains/chains-runtime.js";
import type { Config } from "./config.js";
import type { BillingCounters } from "./core/billing/billing-counters.js";
import type { DevFaucet } from "./core/billing/funding.js";
import type { HoldSweeper } from "./core/billing/hold-sweeper.js";
import { createCore } from "./core/core.js";
import { createInProcessTransport } from "./core/in-process-transport.js";
import { buildCoreServer, type CoreServer } from "./core/server.js";
import { buildFacade } from "./facade/facade.js";
import { type ImageResources, imageResources } from "./images-wiring.js";
import { memoryRateLimiter } from "./limits/memory.js";
import { type Db, openDatabase } from "./store/database.js";
import { openSqliteLedger, type SqliteLedger } from "./store/sqlite-ledger.js";
import { AnthropicUpstream } from "./upstream/anthropic/client.js";

/** A built gateway: the facade, and (unless facade-only) the core server and its database. */
export interface App {
  readonly facade: FastifyInstance;
  /** Absent in facade-only mode. */
  readonly core: CoreServer | undefined;
  /** Absent in facade-only mode. */
  readonly db: Db | undefined;
  /** The ledger, its writes in a worker thread (group-committed there); absent in facade-only mode. */
  readonly ledger?: SqliteLedger | undefined;
  /** Voids orphaned holds; started by buildApp (it sweeps once at start-up), stopped by shutdown. */
  readonly sweeper: HoldSweeper | undefined;
  /** Billing anomalies counted by the core (unpriced or missing usage, capped charges); undefined when facade-only. */
  readonly counters?: BillingCounters | undefined;
  /** The text provider's connection pool; absent in facade-only mode or with no provider URL. */
  readonly textUpstream: AnthropicUpstream | undefined;
  /** Image providers and the `url` image sweeper; absent in facade-only mode. */
  readonly images?: ImageResources | undefined;
  /**
   * The chain adapters behind deposit addresses, address checks and chain health; absent unless
   * built with `onchain`. Its watcher and settlement loops do not run here: the chains worker
   * runs them (`tollgate worker`, or the chains thread of `tollgate dev`).
   */
  readonly chains: ChainsRuntime | undefined;
}

/** Extra knobs for building an app, mostly for tests. */
export interface BuildOptions {
  readonly logger?: boolean | { readonly level: string };
  readonly now?: () => number;
  /**
   * Serve the onchain RPCs (deposit addresses, address checks, chain health) against
   * `config.chains` with this master secret. Absent: no chain is contacted and onchain RPCs
   * refuse (see main.ts for who passes it).
   */
  readonly onchain?: {
    readonly masterSecret: Uint8Array;
    readonly startAt: "genesis" | "finalized";
    /** Run only these chains (dev mode: those with a local dev chain). */
    readonly only?: ReadonlySet<string>;
    /** Dev mode: the dev chains' mint, behind BillingService.RequestTestFunds. */
    readonly faucet?: DevFaucet;
  };
}

/**
 * Builds the gateway from its configuration: opens the store and builds the core unless
 * `coreUrl` points at a remote one, then the facade over a typed client to that core. Never
 * listens (see main.ts).
 */
export async function buildApp(
  config: Config,
  { logger = false, now, onchain }: BuildOptions = {},
): Promise<App> {
  if (config.coreUrl !== undefined) {
    const transport = remoteCoreTransport(config.coreUrl);
    return {
      facade: await buildFacade({
        transport,
        coreLocation: config.coreUrl,
        logger,
        images: config.images,
        publicUrl: dashboardPublicUrl(config),
      }),
      core: undefined,
      db: undefined,
      sweeper: undefined,
      textUpstream: undefined,
      images: undefined,
      chains: undefined,
    };
  }
  const db = openDatabase(config.dataDir);
  const { anthropic } = config;
  const textUpstream =
    anthropic.url === undefined
      ? undefined
      : new AnthropicUpstream({
          baseUrl: anthropic.url,
          apiKey: anthropic.apiKey,
          connectTimeoutMs: anthropic.connectTimeoutMs,
          headersTimeoutMs: anthropic.headersTimeoutMs,
          idleTimeoutMs: anthropic.idleTimeoutMs,
          // Every streaming call holds its own HTTP/1.1 connection for as long as it runs.
          connections: config.upstreamConnections === 0 ? null : config.upstreamConnections,
        });
  const images = imageResources(config);
  let chains: ChainsRuntime | undefined;
  let ledger: SqliteLedger | undefined;
  try {
    ledger = await openSqliteLedger(db, config.dataDir, { thread: true });
    if (onchain !== undefined) {
      // Loaded only when chains run: viem and friends stay out of chain-less processes.
      const { ChainsRuntime } = await import("./chains/chains-runtime.js");
      chains = await ChainsRuntime.create({
        db,
        registry: config.chains,
        masterSecret: onchain.masterSecret,
        settlement: { mode: config.onchain.settlementMode, batchWindowMs: config.onchain.batchWindowMs },
        pollMs: config.onchain.pollMs,
        scanRange: config.onchain.scanRange,
        startAt: onchain.startAt,
        only: onchain.only,
        now,
        log: (line) => console.error(line),
        onError: (error, context) =>
          console.error(
            `${context}: ${error instanceof Error ? error.message.split("\n")[0] : String(error)}`,
          ),
      });
    }
    const core = createCore({
      db,
      ledger,
      onchain: ledger,
      adminToken: config.adminToken,
      now,
      chains: config.chains,
      catalog: config.catalog,
      maxCallMs: config.maxCallMs,
      holdSweepIntervalMs: config.holdSweepIntervalMs,
      webSearchMaxUses: config.webSearchMaxUses,
      inference:
        textUpstream === undefined
          ? undefined
          : {
              textUpstream,
              rateLimiter: memoryRateLimiter,
              clientPolicy: config.clientPolicy,
              messagesPerMinute: config.rateLimitPerMinute,
              countTokensPerMinute: config.countTokensPerMinute,
              streamPingMs: config.streamPingMs,
              images: images.deps,
            },
      onInternalError: (error, procedure) => console.error(`internal error in ${procedure}:`, error),
      chainDirectory: chains,
      faucet: onchain?.faucet,
      chainProbes: chains?.probes(),
    });
    // The facade calls the core's services in this process without a protobuf round trip.
    const transport: Transport = createInProcessTransport(core.routes, core.routerOptions.interceptors ?? []);
    const facade = await buildFacade({
      transport,
      coreLocation: "in-process",
      logger,
      images: config.images,
      publicUrl: dashboardPublicUrl(config),
    });
    const coreServer = await buildCoreServer(core, { logger });
    // Holds orphaned by a crash are voided before the first request is served.
    await core.sweeper.start();
    images.startSweeper((error) => console.error("internal error in the image sweeper:", error));
    return {
      facade,
      core: coreServer,
      db,
      ledger,
      sweeper: core.sweeper,
      counters: core.counters,
      textUpstream,
      images,
      chains,
    };
  } catch (error) {
    await chains?.stop();
    await ledger?.close();
    db.close();
    await textUpstream?.close();
    await images.close();
    throw error;
  }
}

/**
 * A gRPC transport to a core elsewhere (facade-only mode, and the CLI with TOLLGATE_CORE_URL).
 * With `bearer`, every call presents it (the CLI's operator token).
 */
export function remoteCoreTransport(baseUrl: string, bearer?: string): Transport {
  const interceptors: Interceptor[] = [];
  if (bearer !== undefined) {
    interceptors.push((next) => (req) => {
      req.header.set("authorization", `Bearer ${bearer}`);
      return next(req);
    });
  }
  return createGrpcTransport({ baseUrl, interceptors });
}

/** The public origin the dashboard's sign-in messages must name (TOLLGATE_PUBLIC_URL), if set. */
function dashboardPublicUrl(config: Config): URL | undefined {
  return config.images.publicUrl === undefined ? undefined : new URL(config.images.publicUrl);
}
