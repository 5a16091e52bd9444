import { Worker } from "node:worker_threads";
import { ChainsRuntime, type ChainsRuntimeOptions } from "../chains/chains-runtime.js";
import { chainsLogging, type LogLevel, openLogger } from "../logger.js";
import type { StoreChoice } from "../store/shared/store-set.js";
import { openChainWorkStores } from "../store/stores.js";
import { threadEntry } from "../thread-entry.js";

/** What the chains worker runs: every chain's deposit watcher and settlement worker. */
export type ChainsSettings = Pick<
  ChainsRuntimeOptions,
  "registry" | "masterSecret" | "settlement" | "pollMs" | "scanRange" | "startAt" | "only"
>;

/** The chains worker's job: its chains' settings, over the configured store. */
export interface ChainsWorkerSpec extends ChainsSettings {
  readonly store: StoreChoice;
  /** The level of its JSON log lines (the gateway's TOLLGATE_LOG_LEVEL). */
  readonly logLevel: LogLevel;
}

/** A running chains worker. */
export interface ChainsWorker {
  /** The chains whose watcher and settlement loops run. */
  readonly chains: readonly string[];
  /** Finishes the ticks in progress, closes the adapters and the worker's database connection. */
  stop(): Promise<void>;
}

/**
 * Runs the deposit watchers and settlement workers of every chain over a database connection
 * of their own: chain polling, signing and their commits never run on a gateway's request loop.
 * `tollgate worker` runs this in a process of its own; `tollgate dev` in a thread (see
 * {@link startChainsThread}).
 */
export async function runChainsWorker(spec: ChainsWorkerSpec): Promise<ChainsWorker> {
  const opened = await openChainWorkStores(spec.store);
  try {
    const { store: _, logLevel, ...settings } = spec;
    const runtime = await ChainsRuntime.create({
      ...settings,
      store: opened.store,
      roles: opened.roles,
      ...chainsLogging(openLogger(logLevel)),
    });
    runtime.start();
    return {
      chains: spec.registry.chains.map((c) => c.id).filter((id) => runtime.has(id)),
      stop: async () => {
        // Stopping the loops gives up the roles too (another host's worker takes them over).
        await runtime.stop();
        await opened.close();
      },
    };
  } catch (error) {
    await opened.roles?.close();
    await opened.close();
    throw error;
  }
}

/** What crosses from the chains thread: ready (with its chains), stopped, or a start failure. */
export type ChainsThreadMessage =
  | { readonly kind: "ready"; readonly chains: readonly string[] }
  | { readonly kind: "stopped" }
  | { readonly kind: "failed"; readonly message: string };

/**
 * Runs {@link runChainsWorker} in a worker thread of this process (`tollgate dev`): its own event
 * loop and database connection, so the request loop never waits on a chain, and it lives and
 * dies with the process. Resolves once every chain's loops run.
 */
export async function startChainsThread(spec: ChainsWorkerSpec): Promise<ChainsWorker> {
  const worker = new Worker(await threadEntry(new URL("./chains-thread.js", import.meta.url)), {
    workerData: spec,
  });
  const next = () =>
    new Promise<ChainsThreadMessage>((resolve, reject) => {
      const onExit = (code: number) => reject(new Error(`the chains thread stopped (exit code ${code})`));
      worker.once("exit", onExit);
      worker.once("error", reject);
      worker.once("message", (message: ChainsThreadMessage) => {
        worker.off("exit", onExit);
        worker.off("error", reject);
        resolve(message);
      });
    });
  const first = await next().catch(async (error: unknown) => {
    await worker.terminate();
    throw error;
  });
  if (first.kind !== "ready") {
    await worker.terminate();
    throw new Error(first.kind === "failed" ? first.message : "the chains thread stopped before it started");
  }
  // Its loops keep running, but the thread alone never keeps the process alive.
  worker.unref();
  let stopped: Promise<void> | undefined;
  return {
    chains: first.chains,
    stop: () => {
      stopped ??= (async () => {
        const done = next().catch(() => undefined);
        worker.postMessage("stop");
        await done;
        await worker.terminate();
      })();
      return stopped;
    },
  };
}
