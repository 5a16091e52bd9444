import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { type Client, createClient } from "@connectrpc/connect";
import { createEvmAdapter } from "../../src/chains/evm/evm-adapter.js";
import { type EvmDevChain, startEvmDevChain } from "../../src/dev/chains/evm/dev-chain.js";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { AuthService } from "../../src/gen/tollgate/auth/v1/auth_pb.js";
import { BillingService } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { remoteCoreTransport } from "../../src/runtime/remote-core.js";
import { type Db, openDatabase } from "../../src/store/sqlite/database.js";
import { devChainConfig, writeChainsFile } from "../helpers/evm.js";
import {
  type GatewayProcess,
  startGateway,
  startWorkerProcess,
  tempDir,
  type WorkerProcess,
} from "../helpers/process.js";
import { type BroadcastPhase, rpcProxy } from "../helpers/rpc-proxy.js";

/** The two processes the loop kills: `tollgate serve` (calls, withdrawals) and `tollgate worker` (chains). */
export type Target = "serve" | "worker";

/** Settings the rig's processes run with (the loop waits for the sweep by `maxCallMs`). */
export const CRASH_SETTINGS = {
  /** The shortest the gateway allows: a killed call's hold is swept one second after it was placed. */
  maxCallMs: 1_000,
  sweepIntervalMs: 100,
  pollMs: 100,
} as const;

const ADMIN_TOKEN = "crash-loop-operator-token-0123456789abcdef";

/**
 * The crash loop's world. The dev chain (anvil, mined every 100 ms so that one confirmation
 * comes quickly), the stand-in provider and a read connection to the SQLite file live in this
 * process, across every kill; `tollgate serve` and `tollgate worker` run as child processes on
 * one data directory, each killed with SIGKILL and restarted on the same data. The worker reaches
 * the chain through a JSON-RPC proxy that can kill it just before or just after it broadcasts.
 */
export interface CrashRig {
  readonly dev: EvmDevChain;
  readonly provider: DevUpstream;
  /** This process's own connection to the gateway's SQLite file (reads only). */
  readonly db: Db;
  readonly treasury: string;
  /** The running serve process (replaced by each restart). */
  serve(): GatewayProcess;
  worker(): WorkerProcess;
  /** BillingService and AuthService of the running serve, as the operator. */
  billing(): Client<typeof BillingService>;
  auth(): Client<typeof AuthService>;
  /** SIGKILLs `target` and waits until it is gone. */
  kill(target: Target): Promise<void>;
  /** Starts `target` again on the same data; resolves with the milliseconds until it was ready. */
  restart(target: Target): Promise<number>;
  /**
   * Kills the worker at its next `eth_sendRawTransaction`, before or after the chain got it;
   * resolves once it is dead.
   */
  killAtBroadcast(phase: BroadcastPhase): Promise<void>;
  /** Disarms a pending {@link killAtBroadcast} (its promise never resolves then). */
  disarm(): void;
  /** What the processes wrote to stderr, for a failure's message. */
  logs(): string;
  close(): Promise<void>;
}

/** Starts the chain, the provider, the proxy and both processes on a fresh data directory. */
export async function startCrashRig(): Promise<CrashRig> {
  const closers: (() => unknown)[] = [];
  const close = async () => {
    for (const closer of closers.splice(0).reverse()) await closer();
  };
  try {
    return await assemble(closers, close);
  } catch (error) {
    await close();
    throw error;
  }
}

async function assemble(closers: (() => unknown)[], close: () => Promise<void>): Promise<CrashRig> {
  const dev = await startEvmDevChain({ id: "base", chainId: 8453 });
  closers.push(() => dev.close());
  const miner = setInterval(() => dev.mine(1).catch(() => {}), 100);
  closers.push(() => clearInterval(miner));
  // Streams take a few milliseconds per delta, so a kill can land between two of them.
  const provider = await startDevUpstream({ eventDelayMs: 4 });
  closers.push(() => provider.close());

  let broadcastKill: { phase: BroadcastPhase; killed: () => void } | undefined;
  let worker: WorkerProcess | undefined;
  const proxy = await rpcProxy(dev.rpcUrl, async (phase) => {
    const armed = broadcastKill;
    if (armed === undefined || armed.phase !== phase || worker === undefined) return false;
    broadcastKill = undefined;
    await worker.stop("SIGKILL");
    armed.killed();
    return true;
  });
  closers.push(() => new Promise((resolve) => proxy.close(resolve)));

  const dir = tempDir("tollgate-crash-");
  closers.push(dir.cleanup);
  const secretHex = "c3".repeat(32);
  const serveChains = join(dir.path, "chains-serve.json");
  const workerChains = join(dir.path, "chains-worker.json");
  writeChainsFile(serveChains, dev);
  writeChainsFile(workerChains, dev, `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`);
  const common = {
    TOLLGATE_DATA_DIR: join(dir.path, "data"),
    TOLLGATE_ANTHROPIC_URL: provider.url,
    TOLLGATE_GEMINI_URL: provider.url,
    TOLLGATE_DEV_CHAINS: "auto",
    TOLLGATE_MASTER_SECRET: secretHex,
    TOLLGATE_SETTLEMENT_MODE: "per-call",
    TOLLGATE_CHAIN_POLL_MS: String(CRASH_SETTINGS.pollMs),
    TOLLGATE_MAX_CALL_MS: String(CRASH_SETTINGS.maxCallMs),
    TOLLGATE_HOLD_SWEEP_INTERVAL_MS: String(CRASH_SETTINGS.sweepIntervalMs),
    TOLLGATE_RATE_LIMIT_RPM: "100000",
    TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN,
  };
  const serveEnv = { ...common, TOLLGATE_CHAINS: serveChains };
  const workerEnv = { ...common, TOLLGATE_CHAINS: workerChains };

  const adapter = createEvmAdapter(devChainConfig(dev, 1), {
    masterSecret: new Uint8Array(Buffer.from(secretHex, "hex")),
  });
  const treasury = adapter.treasuryAddress();
  await dev.fundGas(treasury);

  let serve = await startGateway(serveEnv, 20_000, "serve");
  closers.push(() => serve.stop("SIGKILL"));
  worker = await startWorkerProcess(workerEnv);
  closers.push(() => worker?.stop("SIGKILL"));
  const db = openDatabase(serveEnv.TOLLGATE_DATA_DIR);
  closers.push(() => db.close());

  let billing = createClient(BillingService, remoteCoreTransport(serve.coreUrl, ADMIN_TOKEN));
  let auth = createClient(AuthService, remoteCoreTransport(serve.coreUrl, ADMIN_TOKEN));
  // Earlier processes' output, so a failure shows what the killed ones said too.
  const pastLogs: string[] = [];
  return {
    dev,
    provider,
    db,
    treasury,
    serve: () => serve,
    worker: () => worker!,
    billing: () => billing,
    auth: () => auth,
    async kill(target) {
      if (target === "serve") await serve.stop("SIGKILL");
      else await worker!.stop("SIGKILL");
    },
    async restart(target) {
      const started = performance.now();
      if (target === "serve") {
        pastLogs.push(serve.stderr());
        serve = await startGateway(serveEnv, 20_000, "serve");
        billing = createClient(BillingService, remoteCoreTransport(serve.coreUrl, ADMIN_TOKEN));
        auth = createClient(AuthService, remoteCoreTransport(serve.coreUrl, ADMIN_TOKEN));
      } else {
        pastLogs.push(worker!.stderr());
        worker = await startWorkerProcess(workerEnv);
      }
      return performance.now() - started;
    },
    killAtBroadcast(phase) {
      return new Promise((killed) => {
        broadcastKill = { phase, killed };
      });
    },
    disarm() {
      broadcastKill = undefined;
    },
    logs: () => [...pastLogs, serve.stderr(), worker!.stderr()].join("\n").slice(-6_000),
    close,
  };
}
