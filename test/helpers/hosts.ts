/**
 * Several gateway hosts on one store, as the several-hosts e2e tests start them (several-hosts,
 * pgbouncer-hosts, idempotency-hosts, images-hosts, store-outages): each host and worker a child
 * process of the built CLI with a data directory of its own, an account and key made with the
 * CLI, and everything they leave behind undone by the test's `cleanups`.
 */
import type { GatewayProcess, WorkerProcess } from "./process.js";
import { cliJson, startGateway, startWorkerProcess, tempDir } from "./process.js";

/** What a test or suite undoes when it ends: {@link cleanUp} runs them, the last first. */
export type Cleanups = (() => unknown)[];

/** Runs and empties `cleanups`, the last first. */
export async function cleanUp(cleanups: Cleanups): Promise<void> {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
}

/** A fresh temporary directory's path; its removal goes on `cleanups`. */
export function ownDir(cleanups: Cleanups): string {
  const dir = tempDir();
  cleanups.push(dir.cleanup);
  return dir.path;
}

/** How {@link startHost} starts a host and how the cleanup stops it. */
export interface HostOptions {
  /** `serve` (production, the default) or `dev`. */
  readonly command?: "dev" | "serve";
  /** The signal that stops it at cleanup; SIGKILL unless told. */
  readonly stopSignal?: NodeJS.Signals;
}

/** A started host and its own data directory. */
export interface Host extends GatewayProcess {
  readonly dataDir: string;
}

/** A gateway host on `env`'s store with a data directory of its own; its stop goes on `cleanups`. */
export async function startHost(
  env: Record<string, string>,
  cleanups: Cleanups,
  options: HostOptions = {},
): Promise<Host> {
  const dataDir = ownDir(cleanups);
  const gateway = await startGateway(
    { ...env, TOLLGATE_DATA_DIR: dataDir },
    30_000,
    options.command ?? "serve",
  );
  cleanups.push(() => gateway.stop(options.stopSignal ?? "SIGKILL"));
  return { ...gateway, dataDir };
}

/** `count` hosts started one after the other (see {@link startHost}). */
export async function startHosts(
  count: number,
  env: Record<string, string>,
  cleanups: Cleanups,
  options: HostOptions = {},
): Promise<Host[]> {
  const hosts: Host[] = [];
  for (let i = 0; i < count; i++) hosts.push(await startHost(env, cleanups, options));
  return hosts;
}

/** An account made with the CLI; `cli`: the environment its commands ran with, for more. */
export interface CliAccount {
  readonly id: string;
  readonly keyId: string;
  readonly secret: string;
  readonly cli: Record<string, string>;
}

/**
 * An account named `name` with a key, made with the CLI against `env`'s store from a data
 * directory of its own; credited `credit` (a decimal amount on base) when told.
 */
export async function cliAccount(
  env: Record<string, string>,
  cleanups: Cleanups,
  name: string,
  credit?: string,
): Promise<CliAccount> {
  const cli = { ...env, TOLLGATE_DATA_DIR: ownDir(cleanups) };
  const { id } = await cliJson<{ id: string }>(["account", "create", "--name", name], cli);
  const key = await cliJson<{ id: string; secret: string }>(["key", "create", "--account", id], cli);
  if (credit !== undefined) await cliCredit(cli, id, credit, "test");
  return { id, keyId: key.id, secret: key.secret, cli };
}

/** Credits `amount` (decimal) on base to `accountId` with the CLI. */
export async function cliCredit(
  cli: Record<string, string>,
  accountId: string,
  amount: string,
  reason: string,
): Promise<void> {
  await cliJson(
    ["credit", "--account", accountId, "--chain", "base", "--amount", amount, "--reason", reason],
    cli,
  );
}

/** A chains worker: `runs()`, it holds the base chain's role now; `log()`, all it wrote. */
export interface HostWorker extends WorkerProcess {
  runs(): boolean;
  log(): string;
}

/**
 * `tollgate worker` on `env`'s store with a data directory of its own, logging at info (taking the
 * chain's role is logged there; the test environment logs warnings only); SIGKILLed at cleanup.
 */
export async function startHostWorker(env: Record<string, string>, cleanups: Cleanups): Promise<HostWorker> {
  const started = await startWorkerProcess({
    ...env,
    TOLLGATE_DATA_DIR: ownDir(cleanups),
    TOLLGATE_LOG_LEVEL: "info",
  });
  cleanups.push(() => started.stop("SIGKILL"));
  return {
    ...started,
    runs: () => /base: this process runs it now/.test(started.stdout()),
    // Its log is JSON lines on stdout; a failed start lands on stderr.
    log: () => started.stdout() + started.stderr(),
  };
}

/** A Messages call's status and, when refused, its error message. */
export interface CallResult {
  readonly status: number;
  readonly message: string;
}

/** One Messages call of fixed size (streaming unless told), read to its end. */
export async function messagesCall(
  gateway: GatewayProcess,
  secret: string,
  model: string,
  content: string,
  stream = true,
): Promise<CallResult> {
  const response = await fetch(`${gateway.facadeUrl}/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": secret, "anthropic-version": "2023-06-01" },
    body: JSON.stringify({ model, max_tokens: 64, stream, messages: [{ role: "user", content }] }),
  });
  const text = await response.text();
  const message =
    response.status === 200 ? "" : (JSON.parse(text) as { error: { message: string } }).error.message;
  return { status: response.status, message };
}
