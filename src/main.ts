import { setTimeout as sleep } from "node:timers/promises";
import { type App, type BuildOptions, buildApp } from "./app.js";
import type { ChainsWorker, ChainsWorkerSpec } from "./chains/chains-worker.js";
import { type Config, requireMasterSecret } from "./config.js";
import type { DevChains } from "./dev/chains/dev-chains.js";
import { DEV_MASTER_SECRET } from "./dev/chains/dev-chains-file.js";
import { type DevUpstream, startDevUpstream } from "./dev/provider/dev-upstream.js";

/** How the gateway runs: `serve` (production, fails closed) or `dev` (local stand-ins). */
export type RunMode = "serve" | "dev";

/**
 * What production cannot run without, unless facade-only: a model provider, a chain registry and
 * the master secret. Each missing one is named with the variable that supplies it; `tollgate dev`
 * runs the local stand-ins instead. A production process never falls back to a stand-in or a
 * public secret.
 */
function missingForServe(config: Config): string[] {
  if (config.coreUrl !== undefined) return [];
  const missing: string[] = [];
  if (config.anthropic.url === undefined) {
    missing.push("TOLLGATE_ANTHROPIC_API_KEY (the model provider's key; or TOLLGATE_ANTHROPIC_URL)");
  }
  if (config.onchain.mode !== "configured") {
    missing.push("TOLLGATE_CHAINS (the chain registry file: chains, assets, RPC endpoints)");
  }
  if (config.onchain.masterSecret === undefined) {
    missing.push("TOLLGATE_MASTER_SECRET (hex, at least 32 bytes: deposit and treasury keys derive from it)");
  }
  return missing;
}

/** `serve` without what production needs: the message names every missing variable. */
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

/**
 * Runs the gateway: builds it from `config`, listens on the facade port (and the core port
 * unless facade-only), prints one ready line, and shuts down gracefully on SIGTERM or SIGINT.
 * Resolves once listening. In `serve` mode a missing provider, chain registry or master secret
 * refuses to start (ServeRefused); in `dev` mode local stand-ins take their place, labelled.
 */
export async function serve(config: Config, mode: RunMode = "serve"): Promise<App> {
  if (mode === "serve") {
    const missing = missingForServe(config);
    if (missing.length > 0) throw new ServeRefused(missing);
  }
  // Chains: the configured registry's RPCs (the master secret is required), or in dev mode local
  // dev chains started here; never the shipped registry's public RPCs unless configured.
  let devChains: DevChains | undefined;
  let onchain: BuildOptions["onchain"];
  if (config.coreUrl === undefined && config.onchain.mode !== "off") {
    const masterSecret = requireMasterSecret(config.onchain, DEV_MASTER_SECRET);
    if (config.onchain.mode === "dev") {
      const { startDevChains } = await import("./dev/chains/dev-chains.js");
      devChains = await startDevChains(config.chains, {
        dataDir: config.dataDir,
        log: (line) => process.stderr.write(`${line}\n`),
      });
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
  // No provider configured: text calls go to the built-in stand-in, and the ready line says so.
  let devUpstream: DevUpstream | undefined;
  if (config.coreUrl === undefined && config.anthropic.url === undefined) {
    devUpstream = await startDevUpstream({ host: "127.0.0.1", port: 0 });
    config = { ...config, anthropic: { ...config.anthropic, url: devUpstream.url } };
  }
  // No image provider either: in dev mode images go to the same stand-in (it speaks the Gemini
  // format too); in production the image routes are simply not served.
  const devImages = mode === "dev" && config.coreUrl === undefined && !hasImageProvider(config);
  if (devImages) {
    devUpstream ??= await startDevUpstream({ host: "127.0.0.1", port: 0 });
    const gemini = { ...config.images.gemini, url: devUpstream.url };
    config = { ...config, images: { ...config.images, gemini } };
  }
  let app: App;
  try {
    app = await buildApp(config, { logger: { level: config.logLevel }, onchain });
  } catch (error) {
    await devChains?.close();
    await devUpstream?.close();
    throw error;
  }
  // Dev mode runs the chains worker (deposit watchers, settlement) in a thread of this process;
  // production runs it as `tollgate worker`, a process of its own. Never on the request loop.
  let chainsWorker: ChainsWorker | undefined;
  if (mode === "dev" && onchain !== undefined) {
    const { startChainsThread } = await import("./chains/chains-worker.js");
    try {
      chainsWorker = await startChainsThread(chainsWorkerSpec(config, onchain));
    } catch (error) {
      await shutdown(app, 0, "the chains thread failed to start");
      await devChains?.close();
      await devUpstream?.close();
      throw error;
    }
  }
  if (devChains !== undefined && app.chains !== undefined) {
    // The treasury pays every settlement's fees: give it dev gas on each local chain.
    for (const id of devChains.running) {
      const treasury = app.chains.adapter(id)?.treasuryAddress();
      if (treasury === undefined) continue;
      await devChains
        .fundFees(id, treasury)
        .catch((error: unknown) =>
          process.stderr.write(
            `dev chains: ${id}: could not fund the treasury's fees: ${(error as Error).message}\n`,
          ),
        );
    }
  }
  const facadeUrl = await app.facade.listen({ host: config.host, port: config.port });
  let coreUrl = config.coreUrl ?? "";
  if (app.core !== undefined) {
    coreUrl = await app.core.server.listen({ host: config.coreHost, port: config.corePort });
  }
  let stopping = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    void shutdown(app, config.shutdownTimeoutMs, signal)
      .then(() => chainsWorker?.stop())
      .then(() => devUpstream?.close())
      .then(() => devChains?.close())
      .then(
        () => process.exit(0),
        (error: unknown) => {
          console.error("tollgate: shutdown failed:", error);
          process.exit(1);
        },
      );
  };
  // Before the ready line: whoever reads it may signal at once.
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
  const tier = app.core === undefined ? "facade-only" : "facade+core";
  const text =
    devUpstream !== undefined
      ? `text: built-in dev upstream ${devUpstream.url}, generated labelled text, not a model ` +
        "(set TOLLGATE_ANTHROPIC_API_KEY for a real provider)"
      : app.core === undefined
        ? "text: via the core"
        : `text: ${config.anthropic.url}`;
  const images = devImages
    ? `images: built-in dev upstream ${devUpstream?.url}, generated labelled images, not a model ` +
      "(set TOLLGATE_GEMINI_API_KEY for a real provider)"
    : app.core === undefined
      ? "images: via the core"
      : `images: ${[config.images.gemini.url, config.images.openai.url].filter(Boolean).join(", ")}`;
  const chainsText =
    devChains !== undefined
      ? `chains: dev chains ${config.chains.chains.map((c) => `${c.id}${c.enabled ? "" : " (disabled)"}`).join(", ")}, ` +
        `faucet ${devChains.faucetUrl}, ` +
        (config.onchain.masterSecret === undefined ? "public DEV master secret" : "configured master secret")
      : onchain !== undefined
        ? "chains: configured RPCs"
        : "chains: off";
  const watchers =
    onchain === undefined
      ? ""
      : chainsWorker !== undefined
        ? ", deposit watchers and settlement in a chains thread"
        : ", deposit watchers and settlement run by `tollgate worker`";
  // One plain line that scripts and tests can wait for.
  process.stdout.write(
    `tollgate ready: facade ${facadeUrl} core ${coreUrl} (${tier}${mode === "dev" ? ", dev mode: local stand-ins" : ""}; ${text}; ${images}; ${chainsText}${watchers})\n`,
  );

  return app;
}

/** The chains worker's job for this gateway's configuration and chains. */
export function chainsWorkerSpec(
  config: Config,
  onchain: NonNullable<BuildOptions["onchain"]>,
): ChainsWorkerSpec {
  return {
    dataDir: config.dataDir,
    registry: config.chains,
    masterSecret: onchain.masterSecret,
    settlement: { mode: config.onchain.settlementMode, batchWindowMs: config.onchain.batchWindowMs },
    pollMs: config.onchain.pollMs,
    scanRange: config.onchain.scanRange,
    startAt: onchain.startAt,
    only: onchain.only,
  };
}

/**
 * Runs the chains worker as a process of its own (`tollgate worker`): every configured chain's
 * deposit watcher and settlement worker, on the gateway's database. Like `serve`, it refuses to
 * start without a chain registry and a master secret. Resolves once running; SIGTERM or SIGINT
 * finishes the ticks in progress and exits.
 */
export async function runWorker(config: Config): Promise<ChainsWorker> {
  const missing: string[] = [];
  if (config.onchain.mode !== "configured") {
    missing.push("TOLLGATE_CHAINS (the chain registry file: chains, assets, RPC endpoints)");
  }
  if (config.onchain.masterSecret === undefined) {
    missing.push("TOLLGATE_MASTER_SECRET (hex, at least 32 bytes: deposit and treasury keys derive from it)");
  }
  if (missing.length > 0) {
    throw new ServeRefused(missing, "worker");
  }
  const { runChainsWorker } = await import("./chains/chains-worker.js");
  const worker = await runChainsWorker(
    chainsWorkerSpec(config, { masterSecret: config.onchain.masterSecret!, startAt: "finalized" }),
  );
  let stopping = false;
  const onSignal = () => {
    if (stopping) return;
    stopping = true;
    void worker.stop().then(
      () => process.exit(0),
      (error: unknown) => {
        console.error("tollgate worker: shutdown failed:", error);
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
  process.stdout.write(
    `tollgate worker ready: deposit watchers and settlement on ${worker.chains.join(", ") || "no chain"} (database ${config.dataDir})\n`,
  );
  return worker;
}

/**
 * Stops accepting, lets in-flight requests finish for at most `timeoutMs`, then closes every
 * connection and the database.
 */
export async function shutdown(app: App, timeoutMs: number, reason = "shutdown"): Promise<void> {
  app.facade.log.info({ reason, timeoutMs }, "shutting down: draining in-flight requests");
  const deadline = Date.now() + timeoutMs;
  const force = setTimeout(() => app.facade.server.closeAllConnections(), timeoutMs);
  force.unref();
  // A connection whose request finishes during the drain turns idle but stays kept alive;
  // close those as they appear instead of waiting for the client's keep-alive to lapse.
  const reap = setInterval(() => app.facade.server.closeIdleConnections(), 25);
  app.core?.stopAccepting();
  // Fastify's close stops the listener, answers 503 on kept-alive connections and waits for
  // in-flight requests; the timer above bounds that wait.
  await app.facade.close().finally(() => clearInterval(reap));
  while (app.core !== undefined && app.core.inFlight() > 0 && Date.now() < deadline) await sleep(10);
  await app.core?.server.close();
  clearTimeout(force);
  app.sweeper?.stop();
  await app.chains?.stop();
  await app.textUpstream?.close();
  await app.images?.close();
  await app.ledger?.close();
  app.db?.close();
}

/** Whether any image provider is configured (Gemini or OpenAI-images format). */
function hasImageProvider(config: Config): boolean {
  return config.images.gemini.url !== undefined || config.images.openai.url !== undefined;
}
