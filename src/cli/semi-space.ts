import { spawn } from "node:child_process";
import { ConfigError } from "../config/read.js";

/**
 * V8's young-generation semi-space `tollgate serve` runs with, in MiB, unless the operator chose
 * one: twice V8's default of 16 on 64-bit, half the scavenges for about 32 MiB more heap
 * (docs/performance.md §21).
 */
export const SERVE_SEMI_SPACE_MB = 32;

/** Set in the environment of the process the launcher starts, so that it never starts another. */
const LAUNCHED = "TOLLGATE_SEMI_SPACE_LAUNCHED";

/**
 * The node flags `serve` must be re-run with for its semi-space, or undefined when it already runs
 * as it should: TOLLGATE_SEMI_SPACE_MB is `off`, the operator set `--max-semi-space-size` in
 * NODE_OPTIONS or on node's command line, or this process is the re-run one. V8 reads the size
 * only when the process starts (`v8.setFlagsFromString` later changes nothing), hence a re-run.
 */
export function semiSpaceFlags(env: NodeJS.ProcessEnv, execArgv: readonly string[]): string[] | undefined {
  const setting = env.TOLLGATE_SEMI_SPACE_MB?.trim();
  if (env[LAUNCHED] === "1" || setting === "off") return undefined;
  const given = [...execArgv, ...(env.NODE_OPTIONS ?? "").split(/\s+/)].some((arg) =>
    /^--max[-_]semi[-_]space[-_]size(=|$)/.test(arg),
  );
  if (given) return undefined;
  if (setting === undefined || setting === "") return [`--max-semi-space-size=${SERVE_SEMI_SPACE_MB}`];
  if (!/^[1-9][0-9]{0,3}$/.test(setting))
    throw new ConfigError(
      "TOLLGATE_SEMI_SPACE_MB",
      `expected a whole number of MiB (1–9999) or off; got ${JSON.stringify(setting)}`,
    );
  return [`--max-semi-space-size=${setting}`];
}

/**
 * `serve`'s launcher, run before the CLI loads anything: re-runs this command with its semi-space
 * and resolves to the child's exit code, or to undefined when this process should serve itself
 * (see {@link semiSpaceFlags}) or when TOLLGATE_SEMI_SPACE_MB is invalid (the CLI then reports it).
 */
export async function serveRelaunch(): Promise<number | undefined> {
  let flags: string[] | undefined;
  try {
    flags = semiSpaceFlags(process.env, process.execArgv);
  } catch (error) {
    if (error instanceof ConfigError) return undefined;
    throw error;
  }
  return flags === undefined ? undefined : relaunch(flags);
}

/**
 * Runs this same command again in a child node with `flags` added, its standard streams and
 * environment passed through, the signals a service manager sends (SIGTERM, SIGINT, SIGHUP)
 * relayed to it; resolves to its exit code (128 + the signal's number when a signal
 * ended it), for this process to exit with.
 */
export function relaunch(flags: readonly string[]): Promise<number> {
  const child = spawn(process.execPath, [...process.execArgv, ...flags, ...process.argv.slice(1)], {
    env: { ...process.env, [LAUNCHED]: "1" },
    // The IPC channel is the child's lifeline (see exitWithLauncher), never used for messages.
    stdio: ["inherit", "inherit", "inherit", "ipc"],
  });
  const signals = ["SIGTERM", "SIGINT", "SIGHUP"] as const;
  const relay = (signal: NodeJS.Signals) => child.kill(signal);
  for (const signal of signals) process.on(signal, relay);
  return new Promise((resolvePromise, reject) => {
    child.once("error", reject);
    child.once("exit", (code, signal) => {
      for (const s of signals) process.off(s, relay);
      resolvePromise(code ?? 128 + (signal === null ? 0 : signalNumber(signal)));
    });
  });
}

function signalNumber(signal: NodeJS.Signals): number {
  return { SIGHUP: 1, SIGINT: 2, SIGKILL: 9, SIGTERM: 15 }[signal as string] ?? 1;
}

/**
 * In the process {@link relaunch} started: ends it at once (SIGKILL, as a crash) when its
 * launcher is gone, so that a launcher killed outright (SIGKILL, which it cannot relay) never
 * leaves the gateway running as an orphan on its port and database. A no-op in a process started
 * otherwise.
 */
export function exitWithLauncher(): void {
  if (process.env[LAUNCHED] !== "1" || process.channel === undefined) return;
  process.channel.unref();
  process.once("disconnect", () => process.kill(process.pid, "SIGKILL"));
}
