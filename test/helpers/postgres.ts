import { execFile, execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, chownSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { freePort } from "./ports.js";

/** Debian's PostgreSQL 15 (`make test` installs it when missing). */
const BIN = "/usr/lib/postgresql/15/bin";

/** A real PostgreSQL server on a temporary directory and a free loopback port. */
export interface PostgresServer {
  /** `postgres://tollgate:<password>@127.0.0.1:<port>/tollgate`: password-checked (SCRAM). */
  readonly url: string;
  readonly port: number;
  /** The postmaster's process id (its backends are its children). */
  readonly pid: number;
  /** The server's log file (`pg_ctl -l`), there until {@link stop} removes its directory. */
  readonly log: string;
  /** The same server with a wrong password, to see it refused. */
  readonly wrongPasswordUrl: string;
  /**
   * `url` (or a {@link freshDatabase}'s) through the server's Unix socket instead of TCP: the same
   * URL with `?host=<socket dir>` (pg and libpq take the socket's directory from `host`, its file
   * from the port), how a gateway on PostgreSQL's own machine connects (docs/deployment.md).
   */
  socketUrl(url: string): string;
  /** Creates an empty database on this server and returns its URL (one per test that migrates). */
  freshDatabase(): Promise<string>;
  /** Stops the server (`pg_ctl stop -m fast`) and removes its directory. */
  stop(): Promise<void>;
  /**
   * Stops the server and keeps its directory, for {@link start}: `immediate` is a crash (no
   * checkpoint; the next start recovers from the WAL), `fast` a clean shutdown.
   */
  halt(mode?: "fast" | "immediate"): void;
  /** {@link halt} without blocking this process's event loop (servers in it keep answering). */
  haltAsync(mode?: "fast" | "immediate"): Promise<void>;
  /** Starts the server {@link halt} stopped, on the same port, once it accepts connections. */
  start(): void;
}

/**
 * Starts PostgreSQL the way ENVIRONMENT-bound tests must: PostgreSQL refuses to run as root, so
 * the cluster belongs to the `postgres` user and every command runs through `runuser`; the
 * postmaster leaves the caller's process group, so it is stopped with `pg_ctl stop`. `settings`
 * adds server settings (`name=value`, passed as `-c`), e.g.
 * `shared_preload_libraries=pg_stat_statements`.
 */
export async function startPostgres({
  settings = [],
}: {
  settings?: readonly string[];
} = {}): Promise<PostgresServer> {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-pg-"));
  chmodSync(dir, 0o700);
  const data = join(dir, "data");
  const password = randomBytes(12).toString("hex");
  const pwfile = join(dir, "pw");
  writeFileSync(pwfile, `${password}\n`);
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const { uid, gid } = postgresUser();
    chownSync(dir, uid, gid);
    chownSync(pwfile, uid, gid);
  }
  const run = (cmd: string, args: string[]) =>
    execFileSync(
      asRoot ? "runuser" : join(BIN, cmd),
      asRoot ? ["-u", "postgres", "--", join(BIN, cmd), ...args] : args,
      {
        stdio: ["ignore", "pipe", "pipe"],
        encoding: "utf8",
      },
    );
  const runAsync = (cmd: string, args: string[]) =>
    promisify(execFile)(
      asRoot ? "runuser" : join(BIN, cmd),
      asRoot ? ["-u", "postgres", "--", join(BIN, cmd), ...args] : args,
      { encoding: "utf8" },
    );
  run("initdb", [
    "-D",
    data,
    "-U",
    "tollgate",
    `--pwfile=${pwfile}`,
    "--auth-host=scram-sha-256",
    "--auth-local=scram-sha-256",
    "-E",
    "UTF8",
    "--no-instructions",
  ]);
  const port = await freePort();
  const options = [
    `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=on`,
    ...settings.map((s) => `-c ${s}`),
  ].join(" ");
  const start = () => {
    run("pg_ctl", ["-D", data, "-l", join(dir, "log"), "-w", "-o", options, "start"]);
  };
  start();
  const stop = async () => {
    try {
      run("pg_ctl", ["-D", data, "-m", "fast", "-w", "stop"]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };
  try {
    const { Client } = await import("pg");
    const admin = new Client({
      connectionString: `postgres://tollgate:${password}@127.0.0.1:${port}/postgres`,
    });
    await admin.connect();
    await admin.query("CREATE DATABASE tollgate");
    await admin.end();
  } catch (error) {
    await stop();
    throw error;
  }
  let databases = 0;
  const freshDatabase = async () => {
    const name = `tollgate_${++databases}`;
    const { Client } = await import("pg");
    const admin = new Client({
      connectionString: `postgres://tollgate:${password}@127.0.0.1:${port}/postgres`,
    });
    await admin.connect();
    try {
      await admin.query(`CREATE DATABASE ${name}`);
    } finally {
      await admin.end();
    }
    return `postgres://tollgate:${password}@127.0.0.1:${port}/${name}`;
  };
  return {
    freshDatabase,
    socketUrl: (url) => `${url}${url.includes("?") ? "&" : "?"}host=${encodeURIComponent(dir)}`,
    url: `postgres://tollgate:${password}@127.0.0.1:${port}/tollgate`,
    wrongPasswordUrl: `postgres://tollgate:not-${password}@127.0.0.1:${port}/tollgate`,
    port,
    pid: Number(readFileSync(join(data, "postmaster.pid"), "utf8").split("\n")[0]),
    log: join(dir, "log"),
    stop,
    halt: (mode = "immediate") => {
      run("pg_ctl", ["-D", data, "-m", mode, "-w", "stop"]);
    },
    haltAsync: async (mode = "immediate") => {
      await runAsync("pg_ctl", ["-D", data, "-m", mode, "-w", "stop"]);
    },
    start,
  };
}

function postgresUser(): { uid: number; gid: number } {
  const line = execFileSync("getent", ["passwd", "postgres"], { encoding: "utf8" }).split(":");
  return { uid: Number(line[2]), gid: Number(line[3]) };
}
