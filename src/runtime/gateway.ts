import type { ChainsRuntime } from "../chains/chains-runtime.js";
import { type Core, createCore } from "../core/core.js";
import type { HealthProbe } from "../core/health-service.js";
import { listenOrigins } from "../facade/listen-origins.js";
import { memoryRateLimiter } from "../limits/memory.js";
import { storageProbe } from "../store/shared/storage-probe.js";
import type { Stores } from "../store/shared/store-set.js";
import { type OnchainSetup, openChainAdapters } from "./chains.js";
import { coreDeps } from "./core-deps.js";
import type { ImageResources } from "./images.js";
import { openRateLimits } from "./limits.js";
import { openProviders } from "./providers.js";
import type { Assembly } from "./resources.js";
import { openCoreServer, openFacade } from "./serving.js";
import { openGatewayStores, openReceiptKey } from "./stores.js";
import { openX402Parts, type X402Parts } from "./x402.js";

/** A core built over its store, chains and providers, not yet serving. */
export interface BuiltCore {
  readonly core: Core;
  readonly stores: Stores;
  readonly chains: ChainsRuntime | undefined;
  readonly x402: X402Parts;
  readonly images: ImageResources | undefined;
}

/**
 * Builds the core over what the configuration names: the store, the chain adapters (when chains
 * run), the providers and rate limits and x402 (not for the operator), then the core itself and
 * its metrics. Nothing is started.
 */
export async function buildCore(a: Assembly, onchain: OnchainSetup | undefined): Promise<BuiltCore> {
  const serving = a.mode !== "operator";
  const stores = await openGatewayStores(a);
  const chains =
    onchain !== undefined && a.chainAdapters ? await openChainAdapters(a, onchain, stores) : undefined;
  const providers = serving ? await openProviders(a, stores) : undefined;
  const probes: HealthProbe[] = [
    stores.probe,
    storageProbe(a.config.dataDir),
    ...(chains?.probes() ?? []),
    ...(providers?.probes ?? []),
  ];
  const rateLimiter = serving ? await openRateLimits(a, probes) : memoryRateLimiter;
  // x402: keyless calls paid per request on the chains that run (docs/x402.md).
  const x402: X402Parts = serving
    ? await openX402Parts(a, onchain, chains, stores)
    : { payments: undefined, signIn: undefined };
  const receiptKey = openReceiptKey(a, onchain?.masterSecret ?? a.config.onchain.masterSecret);
  const core = createCore(
    coreDeps(a.config, a.mode, {
      stores,
      onchain,
      chains,
      textUpstream: providers?.textUpstream,
      images: providers?.images.deps,
      rateLimiter,
      probes,
      x402,
      receiptKey,
      metrics: a.parts.metrics?.registry,
      log: a.logger?.child({ component: "core" }) ?? a.log,
      listenOrigins: () => listenOrigins(a.parts.facade?.server),
      now: a.now,
    }),
  );
  a.parts.counters = core.counters;
  await watchCore(a, core, stores, chains);
  return { core, stores, chains, x402, images: providers?.images };
}

/** The metrics endpoint, when open, reads the core's counters and each running chain's backlog. */
async function watchCore(a: Assembly, core: Core, stores: Stores, chains: ChainsRuntime | undefined) {
  const { metrics } = a.parts;
  if (metrics === undefined) return;
  const { watchCore } = await import("../metrics/endpoint.js");
  watchCore(metrics, {
    counters: core.counters,
    chains:
      chains === undefined
        ? undefined
        : {
            ids: a.config.chains.chains.map((c) => c.id).filter((id) => chains.adapter(id) !== undefined),
            adapter: (id) => chains.adapter(id),
            store: stores.chainWork,
          },
    now: a.now ?? Date.now,
    batches: stores.batches?.bind(stores),
  });
}

/**
 * Starts a built core and puts it in front of callers: its background health checks, the hold
 * sweeper (orphaned holds are voided before the first request), x402's recovery, its HTTP/2
 * server and in-process transport, the image sweeper, and the facade. Nothing listens yet.
 */
export async function serveCore(a: Assembly, { core, x402, images }: BuiltCore): Promise<void> {
  const { stack, parts } = a;
  // Dependencies are checked in the background; health requests read the last round.
  core.health.start();
  stack.defer(() => core.health.stop());
  // Holds orphaned by a crash are voided before the first request is served.
  await core.sweeper.start();
  parts.sweeper = core.sweeper;
  stack.defer(() => core.sweeper.stop());
  // x402 payments a crash left open are collected or closed, once their calls are over.
  const payments = x402.payments;
  if (payments !== undefined) {
    payments.startRecovery(a.config.holdSweepIntervalMs);
    stack.defer(() => payments.stopRecovery());
  }
  await openCoreServer(a, core);
  images?.startSweeper((error) => a.log.error({ err: error }, "the image sweeper failed"));
  await openFacade(a, parts.transport!, "in-process", payments !== undefined);
}
