import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { freePort } from "./ports.js";

/** A real redis-server (Debian's package; `make test` installs it) on a free loopback port. */
export interface RedisServer {
  readonly url: string;
  readonly port: number;
  /** Stops the server (SIGTERM) and waits for it to exit. */
  stop(): Promise<void>;
}

/**
 * Starts redis-server without persistence on a free port (or `port`, to restart one), resolving
 * once it accepts connections.
 */
export async function startRedis(port?: number): Promise<RedisServer> {
  const chosen = port ?? (await freePort());
  const child: ChildProcess = spawn(
    "redis-server",
    [
      "--port",
      String(chosen),
      "--bind",
      "127.0.0.1",
      "--save",
      "",
      "--appendonly",
      "no",
      "--daemonize",
      "no",
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let output = "";
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`redis-server did not start:\n${output}`)), 10_000);
    child.on("error", (error) => {
      clearTimeout(timer);
      reject(
        new Error(`redis-server could not run (is it installed? make test installs it): ${error.message}`),
      );
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`redis-server exited with ${code}:\n${output}`));
    });
    child.stdout!.on("data", (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes("Ready to accept connections")) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  child.removeAllListeners("exit");
  return {
    url: `redis://127.0.0.1:${chosen}`,
    port: chosen,
    stop: async () => {
      if (child.exitCode !== null) return;
      const exited = once(child, "exit");
      child.kill("SIGTERM");
      await exited;
    },
  };
}
