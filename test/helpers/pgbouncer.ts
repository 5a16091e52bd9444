import { execFileSync } from "node:child_process";
import { chmodSync, chownSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { freePort } from "./ports.js";
import type { PostgresServer } from "./postgres.js";

/** Debian's PgBouncer (1.18 on Debian 12; `make services` installs it when missing). */
const BIN = "/usr/sbin/pgbouncer";

/** A real PgBouncer in front of a test PostgreSQL, on a free loopback port and an ini of its own. */
export interface PgBouncerServer {
  readonly port: number;
  /** `url` (one of the server's database URLs) rewritten to reach the same database through the pooler. */
  pooled(url: string): string;
  /** The rows of an admin console command (`SHOW POOLS`, `SHOW CLIENTS`, `SHOW SERVERS` …). */
  admin(command: string): Promise<Record<string, unknown>[]>;
  /** Stops it (SIGTERM to the daemon) and removes its directory. */
  stop(): Promise<void>;
}

/**
 * Starts PgBouncer in front of `postgres` with every database (`* =`) passed through, SCRAM for
 * its clients and the server's own password towards PostgreSQL. PgBouncer refuses to run as root,
 * so, as PostgreSQL in postgres.ts, it runs as the `postgres` user through `runuser`; it
 * daemonizes (`-d`) and is stopped by the pid in its pidfile. Whatever system service the Debian
 * package started is left alone: this one has its own port, ini, socket dir and pidfile.
 */
export async function startPgBouncer(
  postgres: PostgresServer,
  {
    poolMode = "transaction",
    defaultPoolSize = 4,
  }: { poolMode?: "transaction" | "session"; defaultPoolSize?: number } = {},
): Promise<PgBouncerServer> {
  const target = new URL(postgres.url);
  const user = decodeURIComponent(target.username);
  const password = decodeURIComponent(target.password);
  const dir = mkdtempSync(join(tmpdir(), "tollgate-pgbouncer-"));
  chmodSync(dir, 0o700);
  const port = await freePort();
  const ini = join(dir, "pgbouncer.ini");
  const users = join(dir, "userlist.txt");
  const pidfile = join(dir, "pgbouncer.pid");
  writeFileSync(users, `"${user}" "${password}"\n`);
  writeFileSync(
    ini,
    [
      "[databases]",
      `* = host=127.0.0.1 port=${postgres.port}`,
      "[pgbouncer]",
      "listen_addr = 127.0.0.1",
      `listen_port = ${port}`,
      `unix_socket_dir = ${dir}`,
      `pidfile = ${pidfile}`,
      `logfile = ${join(dir, "pgbouncer.log")}`,
      "auth_type = scram-sha-256",
      `auth_file = ${users}`,
      `admin_users = ${user}`,
      `pool_mode = ${poolMode}`,
      `default_pool_size = ${defaultPoolSize}`,
      "max_client_conn = 500",
      "",
    ].join("\n"),
  );
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const { uid, gid } = postgresUser();
    for (const path of [dir, ini, users]) chownSync(path, uid, gid);
  }
  execFileSync(asRoot ? "runuser" : BIN, asRoot ? ["-u", "postgres", "--", BIN, "-d", ini] : ["-d", ini], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  const stop = async () => {
    try {
      const pid = existsSync(pidfile) ? Number(readFileSync(pidfile, "utf8").trim()) : 0;
      if (pid > 0) {
        process.kill(pid, "SIGTERM");
        for (let i = 0; i < 100 && alive(pid); i++) await new Promise((r) => setTimeout(r, 50));
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };
  try {
    await listening(port, 10_000);
  } catch (error) {
    const log = join(dir, "pgbouncer.log");
    const detail = existsSync(log) ? readFileSync(log, "utf8") : "";
    await stop();
    throw new Error(`pgbouncer did not start: ${(error as Error).message}\n${detail}`);
  }
  const pooled = (url: string) => {
    const u = new URL(url);
    u.host = `127.0.0.1:${port}`;
    return u.toString();
  };
  const admin = async (command: string) => {
    const u = new URL(postgres.url);
    u.host = `127.0.0.1:${port}`;
    u.pathname = "/pgbouncer";
    const client = new pg.Client({ connectionString: u.toString() });
    await client.connect();
    try {
      return (await client.query(command)).rows as Record<string, unknown>[];
    } finally {
      await client.end();
    }
  };
  return { port, pooled, admin, stop };
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function listening(port: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const socket = connect(port, "127.0.0.1");
      socket.once("connect", () => {
        socket.destroy();
        resolve(true);
      });
      socket.once("error", () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`nothing listens on 127.0.0.1:${port}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function postgresUser(): { uid: number; gid: number } {
  const line = execFileSync("getent", ["passwd", "postgres"], { encoding: "utf8" }).split(":");
  return { uid: Number(line[2]), gid: Number(line[3]) };
}
