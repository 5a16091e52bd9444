/**
 * The peer the benchmark measures beside Tollgate: Portkey's open-source gateway
 * (`@portkey-ai/gateway`), a Node gateway users pick today, on its Anthropic `/v1/messages` route.
 * It is installed from npm into a folder of the system's temp directory (reused by later runs),
 * never as a project dependency, and runs in its own process pointed at the fake upstream.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

/** The version measured: the newest whose engines accept Node 20 when the peer was added. */
export const PEER_PACKAGE = "@portkey-ai/gateway";
export const PEER_VERSION = "1.15.2";

/** A running peer. */
export interface Peer {
  readonly child: ChildProcess;
  readonly url: string;
  /** Headers that route a call to the fake upstream in the Anthropic format. */
  readonly headers: Record<string, string>;
}

/** Installs the peer (once per machine) and returns its folder. */
export function installPeer(): string {
  const dir = join(tmpdir(), `tollgate-bench-portkey-${PEER_VERSION}`);
  const entry = join(dir, "node_modules", PEER_PACKAGE, "build", "start-server.js");
  if (!existsSync(entry)) {
    mkdirSync(dir, { recursive: true });
    execFileSync(
      "npm",
      ["install", "--no-audit", "--no-fund", "--no-save", "--prefix", dir, `${PEER_PACKAGE}@${PEER_VERSION}`],
      { stdio: ["ignore", "ignore", "inherit"] },
    );
  }
  // The preload lives beside the install (a file of the harness, copied so it resolves there).
  copyFileSync(
    resolve(import.meta.dirname, "../../bench/peer/mutable-fetch.mjs"),
    join(dir, "mutable-fetch.mjs"),
  );
  return dir;
}

/** Starts the peer on a free port, routed to `upstreamUrl`; resolves once it answers HTTP. */
export async function startPeer(upstreamUrl: string): Promise<Peer> {
  const dir = installPeer();
  const port = await freePort();
  const child = spawn(
    process.execPath,
    [
      "--import",
      join(dir, "mutable-fetch.mjs"),
      join(dir, "node_modules", PEER_PACKAGE, "build", "start-server.js"),
      `--port=${port}`,
      "--headless",
    ],
    { cwd: dir, stdio: ["ignore", "ignore", "inherit"] },
  );
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${PEER_PACKAGE} exited ${child.exitCode} before answering`);
    try {
      await fetch(url);
      break;
    } catch {
      if (Date.now() > deadline) throw new Error(`${PEER_PACKAGE} did not answer on ${url}`);
      await sleep(100);
    }
  }
  return {
    child,
    url,
    headers: {
      // 127.0.0.1 is in Portkey's default list of trusted custom hosts.
      "x-portkey-provider": "anthropic",
      "x-portkey-custom-host": `${upstreamUrl}/v1`,
    },
  };
}

function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => resolvePort(typeof address === "object" && address !== null ? address.port : 0));
    });
  });
}
