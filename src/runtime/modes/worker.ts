import { chainsWorkerSpec } from "../chains.js";
import type { Assembly } from "../resources.js";

/**
 * `tollgate worker` (it has already refused to start without a chain registry and a master
 * secret): every configured chain's deposit watcher and settlement worker, in this process, on a
 * database connection of its own.
 */
export async function workerRecipe(a: Assembly): Promise<void> {
  const { runChainsWorker } = await import("../chains-worker.js");
  const masterSecret = a.config.onchain.masterSecret!;
  const worker = await runChainsWorker(chainsWorkerSpec(a, { masterSecret, startAt: "finalized" }));
  a.parts.chainsWorker = worker;
  a.stack.defer(() => worker.stop());
}
