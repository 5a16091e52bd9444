import type { Config } from "../config/config.js";
import { missingSecrets } from "../config/providers.js";

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
export function missingForProduction(config: Config, mode: "serve" | "worker"): string[] {
  const missing: string[] = [];
  if (mode === "serve" && config.coreUrl !== undefined) {
    if (config.publicUrl === undefined) missing.push(MISSING_PUBLIC_URL);
    if (config.facadeToken === undefined) missing.push(MISSING_FACADE_TOKEN);
    return missing;
  }
  const routed = config.providers !== undefined && config.providers.text.size > 0;
  if (mode === "serve" && config.anthropic.url === undefined && !routed) {
    missing.push(
      "TOLLGATE_ANTHROPIC_API_KEY (the model provider's key; or TOLLGATE_ANTHROPIC_URL, or TOLLGATE_PROVIDERS)",
    );
  }
  // Every credential the providers file names must be set: none is ever sent empty.
  if (mode === "serve" && config.providers !== undefined) missing.push(...missingSecrets(config.providers));
  if (config.onchain.mode !== "configured") missing.push(MISSING_CHAINS);
  if (config.onchain.masterSecret === undefined) missing.push(MISSING_SECRET);
  if (mode === "serve" && config.publicUrl === undefined) missing.push(MISSING_PUBLIC_URL);
  return missing;
}

/** Fails closed: throws {@link ServeRefused} naming everything `serve` or `worker` lacks. */
export function refuseUnlessProductionReady(config: Config, mode: "serve" | "worker"): void {
  const missing = missingForProduction(config, mode);
  if (missing.length > 0) throw new ServeRefused(missing, mode);
}
