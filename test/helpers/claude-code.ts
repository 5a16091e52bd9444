import { spawn } from "node:child_process";
import { resolve } from "node:path";
import { type CliResult, collectOutput, tempDir } from "./process.js";

/** The real Claude Code CLI as npm installs it (a native binary placed by the package's postinstall). */
export const CLAUDE = resolve(import.meta.dirname, "../../node_modules/.bin/claude");

/** How to run the CLI once. */
export interface ClaudeRun {
  /** The origin the CLI calls (ANTHROPIC_BASE_URL, no /v1). */
  readonly baseUrl: string;
  /** Sent as `Authorization: Bearer` (ANTHROPIC_AUTH_TOKEN). */
  readonly token: string;
  readonly prompt: string;
  /** Killed after this long (default 90 s): a CLI that keeps retrying must not hang a test. */
  readonly timeoutMs?: number;
  /** More CLI arguments, e.g. `--allowedTools WebSearch`. */
  readonly args?: readonly string[];
}

/**
 * Runs `claude -p PROMPT --output-format text` headless, unmodified, in a throwaway home with
 * non-essential traffic disabled; nothing of the developer's own Claude or provider setup
 * (ANTHROPIC_*, CLAUDE*, TOLLGATE_*) leaks into it.
 */
export function runClaude({
  baseUrl,
  token,
  prompt,
  timeoutMs = 90_000,
  args = [],
}: ClaudeRun): Promise<CliResult> {
  const home = tempDir("tollgate-claude-home-");
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!/^(ANTHROPIC_|CLAUDE|TOLLGATE_)/.test(name)) env[name] = value;
  }
  Object.assign(env, {
    HOME: home.path,
    XDG_CONFIG_HOME: home.path,
    ANTHROPIC_BASE_URL: baseUrl,
    ANTHROPIC_AUTH_TOKEN: token,
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    DISABLE_AUTOUPDATER: "1",
  });
  const child = spawn(CLAUDE, ["-p", prompt, "--output-format", "text", ...args], {
    env,
    cwd: home.path,
    stdio: ["ignore", "pipe", "pipe"],
  });
  return collectOutput(child, timeoutMs).finally(() => home.cleanup());
}
