import { join } from "node:path";
import { UsageError } from "../../cli/command.js";
import type { Config } from "../../config/config.js";
import { startDevChains } from "../chains/dev-chains.js";
import { DEV_CHAINS_FILE } from "../chains/dev-chains-file.js";

/**
 * Runs `tollgate dev-chains`: starts the local chains for the registry (as `serve` does in dev
 * mode), records them in the data directory's dev-chains.json (a TOLLGATE_CHAINS file plus the
 * faucet's URL), prints one ready line, and stops them on SIGTERM or SIGINT.
 */
export async function runDevChains(args: readonly string[], config: Config): Promise<void> {
  if (args.length > 0)
    throw new UsageError("dev-chains takes no arguments (it reads TOLLGATE_CHAINS and TOLLGATE_DATA_DIR)");
  const dev = await startDevChains(config.chains, {
    dataDir: config.dataDir,
    log: (line) => process.stderr.write(`${line}\n`),
  });
  let stopping = false;
  const onSignal = () => {
    if (stopping) return;
    stopping = true;
    void dev.close().then(
      () => process.exit(0),
      (error: unknown) => {
        console.error("tollgate dev-chains: shutdown failed:", error);
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
  const chains = dev.registry.chains
    .map((c) => `${c.id}${c.enabled ? ` ${c.rpcUrl}` : " (disabled)"}`)
    .join(", ");
  process.stdout.write(
    `tollgate dev-chains ready: ${chains}; faucet ${dev.faucetUrl}; registry ${join(config.dataDir, DEV_CHAINS_FILE)}\n`,
  );
}
