import type { ChainsRuntime } from "../chains/chains-runtime.js";
import { requireMasterSecret } from "../config/config.js";
import type { DevFaucet } from "../core/billing/funding.js";
import type { Log } from "../core/ports/log.js";
import type { DevChains } from "../dev/chains/dev-chains.js";
import { chainsLogging } from "../logger.js";
import type { Stores } from "../store/shared/store-set.js";
import type { ChainsSettings, ChainsWorkerSpec } from "./chains-worker.js";
import type { Assembly } from "./resources.js";
import { storeChoice } from "./stores.js";

/** What running chains needs beyond the configuration. */
export interface OnchainSetup {
  readonly masterSecret: Uint8Array;
  readonly startAt: "genesis" | "finalized";
  /** Run only these chains (dev mode: those with a local dev chain). */
  readonly only?: ReadonlySet<string> | undefined;
  /** Dev mode: the dev chains' mint, behind BillingService.RequestTestFunds. */
  readonly faucet?: DevFaucet | undefined;
}

/**
 * The chains a gateway runs (`serve`, `dev`): the configured registry's RPCs, or in dev mode
 * local dev chains started here; never the shipped registry's public RPCs unless configured.
 * Undefined when chains are off.
 */
export async function openServingChains(a: Assembly): Promise<OnchainSetup | undefined> {
  const { config } = a;
  if (config.onchain.mode === "off") return undefined;
  // Only dev chains run on the public dev secret (serve has refused without a secret, and
  // configured chains without one stop here).
  const masterSecret =
    config.onchain.masterSecret ?? requireMasterSecret(config.onchain, await devMasterSecret());
  let devChains: DevChains | undefined;
  if (config.onchain.mode === "dev") {
    const { startDevChains } = await import("../dev/chains/dev-chains.js");
    const started = await startDevChains(config.chains, {
      dataDir: config.dataDir,
      log: (line) => a.log.info({ component: "dev-chains" }, line),
    });
    devChains = started;
    a.stack.defer(() => started.close());
    a.parts.dev = { ...a.parts.dev, chains: started };
    a.config = { ...config, chains: started.registry };
  }
  return {
    masterSecret,
    startAt: devChains === undefined ? "finalized" : "genesis",
    only: devChains?.running,
    faucet:
      devChains === undefined
        ? undefined
        : { chains: devChains.running, mint: devChains.mint.bind(devChains) },
  };
}

/**
 * The operator's chains: deposit addresses and address checks need the chain adapters
 * (derivation only: nothing is contacted). In dev mode the registry of running dev chains, if
 * any, is the one that counts. Undefined when chains are off or configured without a secret.
 */
export async function operatorChains(a: Assembly): Promise<OnchainSetup | undefined> {
  const { onchain: settings } = a.config;
  if (settings.mode === "off" || (settings.masterSecret === undefined && settings.mode !== "dev")) {
    return undefined;
  }
  if (settings.mode === "dev") {
    const { readDevChainsFile } = await import("../dev/chains/dev-chains-file.js");
    a.config = { ...a.config, chains: readDevChainsFile(a.config.dataDir)?.registry ?? a.config.chains };
  }
  return { masterSecret: settings.masterSecret ?? (await devMasterSecret()), startAt: "finalized" };
}

/**
 * The chain adapters behind deposit addresses, address checks and chain health, over the
 * gateway's store. Their watcher and settlement loops never run here (the chains worker does).
 */
export async function openChainAdapters(
  a: Assembly,
  onchain: OnchainSetup,
  stores: Stores,
): Promise<ChainsRuntime> {
  // Loaded only when chains run: viem and friends stay out of chain-less processes.
  const { ChainsRuntime } = await import("../chains/chains-runtime.js");
  const chains = await ChainsRuntime.create({
    ...chainsSettings(a.config, onchain),
    store: stores.chainWork,
    now: a.now,
    ...chainsLogging(a.log),
  });
  a.parts.chains = chains;
  a.stack.defer(() => chains.stop());
  return chains;
}

/**
 * Dev mode runs the chains worker (deposit watchers, settlement) in a thread of this process;
 * production runs it as `tollgate worker`, a process of its own. Never on the request loop.
 * The dev chains' treasuries get their gas here.
 */
export async function startDevChainsThread(
  a: Assembly,
  onchain: OnchainSetup,
  chains: ChainsRuntime | undefined,
): Promise<void> {
  const { startChainsThread } = await import("./chains-worker.js");
  const worker = await startChainsThread(chainsWorkerSpec(a, onchain));
  a.parts.chainsWorker = worker;
  a.stack.defer(() => worker.stop());
  const devChains = a.parts.dev.chains;
  if (devChains !== undefined && chains !== undefined) await fundDevTreasuries(devChains, chains, a.log);
}

/** The public dev master secret, from the dev wing (loaded only when dev chains need it). */
async function devMasterSecret(): Promise<Uint8Array> {
  const { DEV_MASTER_SECRET } = await import("../dev/chains/dev-chains-file.js");
  return DEV_MASTER_SECRET;
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
function chainsSettings(config: Assembly["config"], onchain: OnchainSetup): ChainsSettings {
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

/** The chains worker's job for this runtime's configuration and chains. */
export function chainsWorkerSpec(a: Assembly, onchain: OnchainSetup): ChainsWorkerSpec {
  return { store: storeChoice(a.config), logLevel: a.logLevel, ...chainsSettings(a.config, onchain) };
}
