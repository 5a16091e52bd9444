import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { freePort } from "./ports.js";

/** The compiled CLI; `make test` builds it before the tests run. */
export const CLI = resolve(import.meta.dirname, "../../dist/src/cli/main.js");

/** A fresh directory under the OS temp dir, removed by the returned cleanup. */
export function tempDir(prefix = "tollgate-test-"): { path: string; cleanup: () => void } {
  const path = mkdtempSync(join(tmpdir(), prefix));
  return { path, cleanup: () => rmSync(path, { recursive: true, force: true }) };
}

/**
 * Environment for a child gateway or CLI: ephemeral ports, quiet logs, no inherited TOLLGATE_*,
 * and no dev chains unless a test asks for them (TOLLGATE_DEV_CHAINS=on).
 */
export function childEnv(overrides: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!name.startsWith("TOLLGATE_")) env[name] = value;
  }
  return {
    ...env,
    TOLLGATE_PORT: "0",
    TOLLGATE_CORE_PORT: "0",
    // `tollgate dev` serves metrics on 9464 by default: gateways started side by side would collide.
    TOLLGATE_METRICS_PORT: "0",
    TOLLGATE_LOG_LEVEL: "warn",
    TOLLGATE_DEV_CHAINS: "off",
    ...overrides,
  };
}

/** The result of one CLI run. */
export interface CliResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `tollgate ARGS` as a child process and collects its output. */
export function runCli(args: readonly string[], env: Record<string, string>): Promise<CliResult> {
  return collectOutput(
    spawn(process.execPath, [CLI, ...args], { env: childEnv(env), stdio: ["ignore", "pipe", "pipe"] }),
  );
}

/** Collects a child's stdout and stderr until it closes; `timeoutMs` kills it first (SIGKILL). */
export function collectOutput(child: ChildProcess, timeoutMs?: number): Promise<CliResult> {
  return new Promise((resolvePromise, reject) => {
    let stdout = "";
    let stderr = "";
    child.stdout!.on("data", (chunk) => {
      stdout += chunk;
    });
    child.stderr!.on("data", (chunk) => {
      stderr += chunk;
    });
    const timer = timeoutMs === undefined ? undefined : setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolvePromise({ code, stdout, stderr });
    });
  });
}

/** Runs the CLI, fails on a non-zero exit, and parses its `--json` output. */
export async function cliJson<T = Record<string, unknown>>(
  args: readonly string[],
  env: Record<string, string>,
): Promise<T> {
  const result = await runCli([...args, "--json"], env);
  if (result.code !== 0)
    throw new Error(`tollgate ${args.join(" ")} exited ${result.code}: ${result.stderr}`);
  return JSON.parse(result.stdout) as T;
}

/** A gateway running as a child process (`tollgate serve`). */
export interface GatewayProcess {
  readonly child: ChildProcess;
  /** e.g. http://127.0.0.1:40123 */
  readonly facadeUrl: string;
  /** e.g. http://127.0.0.1:40124; in facade-only mode, the remote core's URL. */
  readonly coreUrl: string;
  /** Everything the child wrote to stderr so far. */
  stderr(): string;
  /** Everything the child wrote to stdout so far (the ready line first). */
  stdout(): string;
  /** Sends `signal` and resolves with the exit code once the child has exited. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/**
 * Starts the gateway and resolves once it prints its ready line: `tollgate dev` (local stand-ins
 * for whatever `env` leaves out) unless `command` is `serve` (production: fails closed). `cli` is
 * the checkout's build unless a test names another (an installed package's bin).
 */
export async function startGateway(
  env: Record<string, string>,
  timeoutMs = 20_000,
  command: "dev" | "serve" = "dev",
  cli: string = CLI,
): Promise<GatewayProcess> {
  if (command === "serve" && env.TOLLGATE_PUBLIC_URL === undefined) {
    // `serve` refuses to start without its public origin: unless a test names one, its own.
    if (env.TOLLGATE_PORT !== undefined && env.TOLLGATE_PORT !== "0") {
      const port = env.TOLLGATE_PORT;
      return startGatewayOnce(
        { ...env, TOLLGATE_PUBLIC_URL: `http://127.0.0.1:${port}` },
        timeoutMs,
        command,
        cli,
      );
    }
    // A port picked here may be taken by another process before the gateway binds it (a
    // client's ephemeral port): then another one is picked.
    for (let attempt = 1; ; attempt++) {
      const port = await freePort();
      const pinned = { ...env, TOLLGATE_PORT: String(port), TOLLGATE_PUBLIC_URL: `http://127.0.0.1:${port}` };
      try {
        return await startGatewayOnce(pinned, timeoutMs, command, cli);
      } catch (error) {
        if (attempt >= 3 || !/EADDRINUSE/.test((error as Error).message)) throw error;
      }
    }
  }
  return startGatewayOnce(env, timeoutMs, command, cli);
}

async function startGatewayOnce(
  env: Record<string, string>,
  timeoutMs: number,
  command: "dev" | "serve",
  cli: string,
): Promise<GatewayProcess> {
  const child = spawn(process.execPath, [cli, command], {
    env: childEnv(env),
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stderr!.on("data", (chunk) => {
    stderr += chunk;
  });
  const exited = new Promise<number | null>((resolveExit) => child.on("exit", (code) => resolveExit(code)));
  return new Promise((resolvePromise, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`gateway did not become ready in ${timeoutMs} ms: ${stderr}`));
    }, timeoutMs);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`gateway exited early with ${code}: ${stderr}`));
    });
    child.stdout!.on("data", (chunk) => {
      stdout += chunk;
      const match = /tollgate ready: facade (\S+) core (\S*)/.exec(stdout);
      if (match === null) return;
      clearTimeout(timer);
      resolvePromise({
        child,
        facadeUrl: match[1]!,
        coreUrl: match[2]!,
        stderr: () => stderr,
        stdout: () => stdout,
        stop: async (signal = "SIGTERM") => {
          if (child.exitCode === null && child.signalCode === null) child.kill(signal);
          return await exited;
        },
      });
    });
  });
}

/** `tollgate worker` running as a child process. */
export interface WorkerProcess {
  readonly child: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Sends `signal` (SIGTERM unless told) and resolves with the exit code once it has exited. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Starts `tollgate worker` and resolves once it prints its ready line. */
export async function startWorkerProcess(env: Record<string, string>): Promise<WorkerProcess> {
  const child = spawn(process.execPath, [CLI, "worker"], {
    env: childEnv(env),
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout!.on("data", (chunk) => {
    stdout += chunk;
  });
  child.stderr!.on("data", (chunk) => {
    stderr += chunk;
  });
  const exited = new Promise<number | null>((resolveExit) => child.on("exit", (code) => resolveExit(code)));
  const worker: WorkerProcess = {
    child,
    stdout: () => stdout,
    stderr: () => stderr,
    stop: async (signal = "SIGTERM") => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return await exited;
    },
  };
  try {
    await until("tollgate worker to be ready", async () => {
      if (child.exitCode !== null) throw new Error(`worker exited ${child.exitCode}: ${stderr}`);
      return stdout.includes("tollgate worker ready") ? true : undefined;
    });
  } catch (error) {
    await worker.stop("SIGKILL");
    throw error;
  }
  return worker;
}

/** Polls `probe` every 100 ms until it answers something, or fails naming `what` (and `debug()`). */
export async function until<T>(
  what: string,
  probe: () => Promise<T | undefined>,
  timeoutMs = 30_000,
  debug?: () => string,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}${debug ? `\n${debug()}` : ""}`);
    }
    await sleep(100);
  }
}
