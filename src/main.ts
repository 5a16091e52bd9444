import type { Config } from "./config/config.js";
import { maskedUrl } from "./config/read.js";
import { openRuntime, type Runtime, type RuntimeMode } from "./runtime/runtime.js";

/** How the gateway runs: `serve` (production, fails closed) or `dev` (local stand-ins). */
export type RunMode = Extract<RuntimeMode, "serve" | "dev">;

/**
 * Runs the gateway: opens its runtime (see runtime/runtime.ts), listens on the facade port (and the core
 * port unless facade-only), prints one ready line, and shuts down gracefully on SIGTERM or SIGINT.
 * Resolves once listening. In `serve` mode a missing provider, chain registry or master secret
 * refuses to start (ServeRefused); in `dev` mode local stand-ins take their place, labelled.
 */
export async function serve(config: Config, mode: RunMode = "serve"): Promise<Runtime> {
  const runtime = await openRuntime(config, { mode, logger: { level: config.logLevel } });
  config = runtime.config;
  let facadeUrl: string;
  let coreUrl = config.coreUrl ?? "";
  let metricsUrl: string | undefined;
  try {
    facadeUrl = await runtime.facade!.listen({ host: config.host, port: config.port });
    if (runtime.core !== undefined) {
      coreUrl = await runtime.core.server.listen({ host: config.coreHost, port: config.corePort });
    }
    metricsUrl = await runtime.metrics?.listen(config.metricsHost);
  } catch (error) {
    await runtime.close(0, "listen failed");
    throw error;
  }
  // Before the ready line: whoever reads it may signal at once.
  exitOnSignal(runtime, config.shutdownTimeoutMs, "tollgate");
  const metrics = metricsUrl === undefined ? "" : ` metrics ${metricsUrl}`;
  process.stdout.write(
    `tollgate ready: facade ${facadeUrl} core ${coreUrl}${metrics} (${describe(runtime)})\n`,
  );
  return runtime;
}

/**
 * Runs the chains worker as a process of its own (`tollgate worker`): every configured chain's
 * deposit watcher and settlement worker, on the gateway's database. Like `serve`, it refuses to
 * start without a chain registry and a master secret. Resolves once running; SIGTERM or SIGINT
 * finishes the ticks in progress and exits.
 */
export async function runWorker(config: Config): Promise<Runtime> {
  const runtime = await openRuntime(config, { mode: "worker", logger: { level: config.logLevel } });
  exitOnSignal(runtime, 0, "tollgate worker");
  const chains = runtime.chainsWorker?.chains ?? [];
  process.stdout.write(
    `tollgate worker ready: deposit watchers and settlement on ${chains.join(", ") || "no chain"} (store: ${storeText(config)})\n`,
  );
  return runtime;
}

/** SIGTERM or SIGINT closes the runtime (draining for at most `timeoutMs`), then exits. */
function exitOnSignal(runtime: Runtime, timeoutMs: number, name: string): void {
  let stopping = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    void runtime.close(timeoutMs, signal).then(
      () => process.exit(0),
      (error: unknown) => {
        runtime.log.error({ err: error }, `${name}: shutdown failed`);
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
}

/** The endpoints a providers file's routes name, each once, in the order first named. */
function routedEndpoints(routes: ReadonlyMap<string, readonly { readonly endpoint: string }[]>): string {
  return [...new Set([...routes.values()].flat().map((entry) => entry.endpoint))].join(", ");
}

/** The ready line's account of what runs: tier, provider, images and chains, stand-ins labelled. */
function describe(runtime: Runtime): string {
  const { config, dev } = runtime;
  const tier = runtime.core === undefined ? "facade-only" : "facade+core";
  const text =
    dev.upstream !== undefined && config.anthropic.url === dev.upstream.url
      ? `text: built-in dev upstream ${dev.upstream.url}, generated labelled text, not a model ` +
        "(set TOLLGATE_ANTHROPIC_API_KEY for a real provider)"
      : runtime.core === undefined
        ? "text: via the core"
        : config.providers !== undefined && config.providers.text.size > 0
          ? `text: ${config.providers.file} (${routedEndpoints(config.providers.text)})`
          : `text: ${config.anthropic.url}`;
  const images = dev.images
    ? `images: built-in dev upstream ${dev.upstream?.url}, generated labelled images, not a model ` +
      "(set TOLLGATE_GEMINI_API_KEY for a real provider)"
    : runtime.core === undefined
      ? "images: via the core"
      : `images: ${[config.images.gemini.url, config.images.openai.url].filter(Boolean).join(", ")}`;
  const chainsText =
    dev.chains !== undefined
      ? `chains: dev chains ${config.chains.chains.map((c) => `${c.id}${c.enabled ? "" : " (disabled)"}`).join(", ")}, ` +
        `faucet ${dev.chains.faucetUrl}, ` +
        (config.onchain.masterSecret === undefined ? "public DEV master secret" : "configured master secret")
      : runtime.chains !== undefined
        ? "chains: configured RPCs"
        : "chains: off";
  const watchers =
    runtime.chains === undefined
      ? ""
      : runtime.chainsWorker !== undefined
        ? ", deposit watchers and settlement in a chains thread"
        : ", deposit watchers and settlement run by `tollgate worker`";
  const store = runtime.core === undefined ? "" : `; store: ${storeText(config)}`;
  return `${tier}${runtime.mode === "dev" ? ", dev mode: local stand-ins" : ""}; ${text}; ${images}; ${chainsText}${watchers}${store}`;
}

/**
 * Where the ledger is kept, for the ready lines: never the database password. A separate direct
 * URL (the pool behind PgBouncer) is named too: `sessions on …`.
 */
function storeText(config: Config): string {
  if (config.databaseUrl === undefined) return `sqlite in ${config.dataDir}`;
  const direct = config.databaseDirectUrl;
  return `postgres ${maskedUrl(config.databaseUrl)}${direct === undefined ? "" : `, sessions on ${maskedUrl(direct)}`}`;
}
