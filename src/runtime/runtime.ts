import type { Config } from "../config/config.js";
import type { Log } from "../core/ports/log.js";
import { lazyLog, openLogger } from "../logger.js";
import { devRecipe } from "./modes/dev.js";
import { embeddedRecipe } from "./modes/embedded.js";
import { operatorRecipe } from "./modes/operator.js";
import { serveRecipe } from "./modes/serve.js";
import { workerRecipe } from "./modes/worker.js";
import { refuseUnlessProductionReady } from "./refusals.js";
import { type Assembly, emptyParts, ResourceStack } from "./resources.js";

export { ServeRefused } from "./refusals.js";

import type { Runtime, RuntimeMode, RuntimeOptions } from "./types.js";

export type { Runtime, RuntimeMode, RuntimeOptions } from "./types.js";

/** One recipe per mode: each opens its parts in order, deferring every close on the stack. */
const RECIPES: Record<RuntimeMode, (a: Assembly) => Promise<void>> = {
  serve: serveRecipe,
  dev: devRecipe,
  embedded: embeddedRecipe,
  operator: operatorRecipe,
  worker: workerRecipe,
};

/**
 * The composition root: builds the gateway (or, by mode, the operator's core or the chains
 * worker) from its configuration, owning every resource it opens. Never listens. If building
 * fails, whatever was opened is closed before the error is thrown.
 */
export async function openRuntime(config: Config, options: RuntimeOptions): Promise<Runtime> {
  const { mode, chainAdapters = true, logger: logging = false, now } = options;
  if (mode === "serve" || mode === "worker") refuseUnlessProductionReady(config, mode);
  const logLevel = logging === false ? "error" : logging.level;
  // Unlogged runtimes (the CLI's operator mode, tests) keep errors off stdout, where a command's
  // --json output goes.
  const logger = logging === false ? undefined : openLogger(logLevel);
  const log: Log = logger ?? lazyLog(() => openLogger(logLevel, 2));
  const stack = new ResourceStack();
  const parts = { ...emptyParts(), log };
  const a: Assembly = { mode, config, stack, parts, logger, log, logLevel, now, chainAdapters };
  try {
    await RECIPES[mode](a);
  } catch (error) {
    await stack.close(0, "start-up failed").catch(() => {});
    throw error;
  }
  return {
    ...parts,
    mode,
    config: a.config,
    close: (timeoutMs = 0, reason = "shutdown") => stack.close(timeoutMs, reason),
  };
}
