/**
 * The chains thread of `tollgate dev`: runs the deposit watchers and settlement workers (see
 * chains-worker.ts) and stops them when told. Started by startChainsThread; never imported.
 */
import { parentPort, workerData } from "node:worker_threads";
import { type ChainsThreadMessage, type ChainsWorkerSpec, runChainsWorker } from "./chains-worker.js";

const port = parentPort;
if (port === null) throw new Error("chains-thread.ts runs only as a worker thread");
const post = (message: ChainsThreadMessage) => port.postMessage(message);

try {
  const worker = await runChainsWorker(workerData as ChainsWorkerSpec);
  port.once("message", () => {
    void worker.stop().finally(() => {
      post({ kind: "stopped" });
      port.close();
    });
  });
  post({ kind: "ready", chains: worker.chains });
} catch (error) {
  post({ kind: "failed", message: error instanceof Error ? error.message : String(error) });
  port.close();
}
