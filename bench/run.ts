/**
 * `make bench`: runs the fake upstream, the pass-through proxy, the gateway (as a user runs it:
 * `tollgate serve`, a real data dir, a real key, credited funds) and a peer gateway (Portkey's,
 * see peer.ts) each in its own process, drives them side by side with the load generator
 * (another process), writes the raw results to bench/results/ and regenerates
 * docs/benchmarks.md and its chart from them.
 *
 * Options:
 *   --target URL        measure another gateway as (c) instead of starting Tollgate; it must be
 *                       pointed at the fake upstream (see --upstream-port) and accept --target-key
 *   --target-key KEY    the key sent to --target as x-api-key and Authorization: Bearer
 *   --target-name NAME  how the report names --target (default "target")
 *   --upstream-port P   fixed port for the fake upstream (default: any free port)
 *   --seconds N         length of each measured run (default 8)
 *   --streams N         idle streams to hold open (default 10000, capped by the fd limit)
 *   --only LIST         comma-separated phases: saturate,rates,ttfb,idle,holdsettle,stores (default all)
 *   --profile DIR       run the gateway with --cpu-prof, writing its profile into DIR on exit
 *   --timeline FILE     record each call's way through the gateway into FILE (bench/timeline-hook.ts)
 *                       and print its timeline at the end, e.g. --only rates --rates 100 --targets direct,gateway
 *   --gc FILE           load bench/gc-hook.ts into the gateway and measure its serving thread's GC
 *                       (scavenges, pauses, bytes allocated) over each rate phase, appended to FILE
 *                       and printed per 1,000 calls, e.g. --only rates --rates 500 --targets gateway
 *   --heap-profile FILE with --gc: also sample where the serving thread allocates over the rate
 *                       phase, written to FILE (.heapprofile); `node dist/bench/heap-top.js FILE`
 *                       lists its top allocation sites (with TOLLGATE_BENCH_HEAP_SURVIVORS=1 in the
 *                       environment: of the bytes that survived a scavenge, bench/gc-hook.ts)
 *   --serve-flags LIST  space-separated node flags for the gateway's process alone, e.g.
 *                       --serve-flags=--max-semi-space-size=32 (with the `=`: the
 *                       value starts with dashes; NODE_OPTIONS would reach every process)
 *   --targets LIST      comma-separated subset of direct,proxy,gateway,peer (default all four)
 *   --scenarios LIST    saturation scenarios: messages,stream,count_tokens,image (default all)
 *   --rates LIST        open-loop rates per second (default 100,500,1000)
 *   --store-seconds N   length of the store phase's runs at 300/s, the pass-through's and each
 *                       deployment's (default three times --seconds: 24); their first --seconds
 *                       are also reported alone, as the 8 s runs before 2026-11-29 measured them
 *   --store-accounts N  accounts (each with its key and funds) of the store phase's many-account
 *                       deployments (default 64)
 *   --stores LIST       the store phase's deployments, a subset of sqlite-1,postgres-1,postgres-2
 *                       and the same with -many (default all six)
 *   --pg-socket         the store phase's PostgreSQL deployments connect over the server's Unix
 *                       socket, as docs/deployment.md advises for a PostgreSQL on the same machine
 *                       (default: loopback TCP, as a PostgreSQL on another machine is reached)
 *   --quick             3-second runs and 1,000 idle streams: checks the harness, not the gateway
 *
 * Only a full run with the defaults writes bench/results/latest.json and docs/benchmarks.md; any
 * of the options above makes a partial run, written to bench/results/partial/ (not committed).
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import {
  appendFileSync,
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { cpus, loadavg, tmpdir, totalmem } from "node:os";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { startPostgres } from "../test/helpers/postgres.js";
import type { DiskProbe } from "./disk-probe.js";
import type { GcWindow } from "./gc-hook.js";
import { guardText } from "./guard.js";
import type { HoldSettleResult } from "./hold-settle.js";
import type { IdleResult, LoadJob, RateResult, RequestSpec, SaturateResult } from "./load.js";
import { PEER_PACKAGE, PEER_VERSION, type Peer, startPeer } from "./peer.js";
import { writeReport } from "./report.js";
import type { BenchResults, IdleFigure, Scenario, StoreFigure, TargetId } from "./results.js";
import { PG_TIMELINE_SETTINGS, pgLogEvents, timelineText } from "./timeline.js";

const ROOT = resolve(import.meta.dirname, "../..");
const DIST = join(ROOT, "dist");
const CLI = join(DIST, "src/cli/main.js");

const { values } = parseArgs({
  options: {
    target: { type: "string" },
    "target-key": { type: "string" },
    "target-name": { type: "string" },
    "upstream-port": { type: "string", default: "0" },
    seconds: { type: "string" },
    streams: { type: "string" },
    only: { type: "string" },
    quick: { type: "boolean", default: false },
    "latency-ms": { type: "string", default: "20" },
    profile: { type: "string" },
    timeline: { type: "string" },
    gc: { type: "string" },
    "heap-profile": { type: "string" },
    "serve-flags": { type: "string" },
    targets: { type: "string" },
    scenarios: { type: "string" },
    rates: { type: "string" },
    "store-accounts": { type: "string" },
    "store-seconds": { type: "string" },
    "pg-socket": { type: "boolean" },
    stores: { type: "string" },
  },
});
const quick = values.quick === true;
const seconds = Number(values.seconds ?? (quick ? 3 : 8));
/**
 * The store phase's runs at 300/s (issue 32's target rate) last three times as long as the
 * others: their p99 is then the 72 slowest of 7,200 calls, not the 24 slowest of 2,400, and the
 * run's first second, when the load generator's process starts, weighs a third as much
 * (docs/store.md, "Longer runs at 300/s").
 */
const storeSeconds = Number(values["store-seconds"] ?? 3 * seconds);
if (!(storeSeconds >= seconds))
  throw new Error(`--store-seconds must be at least --seconds (${seconds}); got ${values["store-seconds"]}`);
const storeAccounts = Number(values["store-accounts"] ?? 64);
if (!Number.isInteger(storeAccounts) || storeAccounts < 2)
  throw new Error(`--store-accounts must be a whole number of 2 or more; got ${values["store-accounts"]}`);
const phases = new Set((values.only ?? "saturate,rates,ttfb,idle,holdsettle,stores").split(","));
const children: ChildProcess[] = [];
/** Directories removed once every child has exited. */
const cleanup: string[] = [];

/** A server process the harness started, with the URL it printed. */
interface Server {
  readonly child: ChildProcess;
  readonly url: string;
  /** The process that serves, when not `child` itself (serve's launcher re-runs it in a child). */
  readonly pid?: number;
}

/**
 * The process that serves for a `tollgate serve` the harness started: its only child when its
 * launcher re-ran it with its semi-space (src/cli/semi-space.ts), else itself. Its CPU, its RSS
 * and the --gc window are that process's.
 */
function servingPid(pid: number): number {
  const children = readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8")
    .trim()
    .split(" ")
    .filter(Boolean);
  return children.length === 1 ? Number(children[0]) : pid;
}

function node(script: string, args: string[], env: NodeJS.ProcessEnv = process.env): ChildProcess {
  const child = spawn(process.execPath, [join(DIST, "bench", script), ...args], {
    env,
    stdio: ["ignore", "pipe", "inherit"],
  });
  children.push(child);
  return child;
}

function firstLine(child: ChildProcess): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    let buffer = "";
    child.stdout!.on("data", (chunk: Buffer) => {
      buffer += chunk.toString();
      const end = buffer.indexOf("\n");
      if (end >= 0) resolvePromise(buffer.slice(0, end));
    });
    child.on("exit", (code) => reject(new Error(`${child.spawnfile} exited ${code} before answering`)));
  });
}

async function startServer(script: string, args: string[]): Promise<Server> {
  const child = node(script, args);
  const { url } = JSON.parse(await firstLine(child)) as { url: string };
  return { child, url };
}

function cli(args: string[], env: NodeJS.ProcessEnv): string {
  return execFileSync(process.execPath, [CLI, ...args, "--json"], { env, encoding: "utf8" });
}

/**
 * Starts the local chains in their own process (`tollgate dev-chains`), as a production gateway
 * has its chains' RPCs elsewhere; resolves to the registry file it writes.
 */
async function startChains(): Promise<string> {
  const dataDir = mkdtempSync(join(tmpdir(), "tollgate-bench-chains-"));
  cleanup.push(dataDir);
  const log = openSync(join(dataDir, "dev-chains.log"), "w");
  const child = spawn(process.execPath, [CLI, "dev-chains"], {
    env: { ...process.env, TOLLGATE_DATA_DIR: dataDir },
    stdio: ["ignore", log, log],
  });
  closeSync(log);
  children.push(child);
  const registry = join(dataDir, "dev-chains.json");
  const deadline = Date.now() + 60_000;
  for (;;) {
    const text = readFileSync(join(dataDir, "dev-chains.log"), "utf8");
    if (/tollgate dev-chains ready/.test(text)) return registry;
    if (child.exitCode !== null || Date.now() > deadline)
      throw new Error(`dev chains did not start:\n${text}`);
    await sleep(100);
  }
}

/** The dev chains' registry, started once per run and shared by every deployment. */
let chainsRegistry: Promise<string> | undefined;

/** A deployment the harness started: its gateway hosts, funded keys, and its processes. */
interface Deployment {
  readonly servers: Server[];
  /** The first account's key (of `keys`). */
  readonly key: string;
  /** One key per account, each account credited alike. */
  readonly keys: readonly string[];
  readonly dataDir: string;
  /** Stops every process of this deployment (its hosts and its worker). */
  stop(): Promise<void>;
}

/**
 * Starts `tollgate serve` as a user would in production, with its own data dir, key and funds:
 * its chains configured (TOLLGATE_CHAINS and a master secret) and reached over RPC, and beside it
 * `tollgate worker`, the process that runs the deposit watchers and settlement workers. The
 * gateway's CPU figures are the serve process's alone, as on a production host. `hosts` > 1
 * starts that many serve processes on the same configuration (a PostgreSQL store: `extraEnv`
 * names TOLLGATE_DATABASE_URL). `accounts` > 1 creates that many accounts, each with a key and
 * the same funds, in one process (bench/accounts.ts: the CLI's commands without a process each).
 */
async function startDeployment(
  upstreamUrl: string,
  {
    hosts = 1,
    accounts = 1,
    extraEnv = {},
  }: {
    readonly hosts?: number;
    readonly accounts?: number;
    readonly extraEnv?: Record<string, string>;
  } = {},
): Promise<Deployment> {
  const dataDir = mkdtempSync(join(tmpdir(), "tollgate-bench-"));
  cleanup.push(dataDir);
  chainsRegistry ??= startChains();
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TOLLGATE_CHAINS: await chainsRegistry,
    TOLLGATE_MASTER_SECRET: "be".repeat(32),
    TOLLGATE_DATA_DIR: dataDir,
    TOLLGATE_PORT: "0",
    TOLLGATE_CORE_PORT: "0",
    // serve names its public origin (dashboard sign-ins, receipts); the harness calls it locally.
    TOLLGATE_PUBLIC_URL: "http://127.0.0.1",
    TOLLGATE_ANTHROPIC_URL: upstreamUrl,
    TOLLGATE_ANTHROPIC_API_KEY: "bench-provider-key",
    TOLLGATE_GEMINI_URL: upstreamUrl,
    TOLLGATE_GEMINI_API_KEY: "bench-provider-key",
    // Limits raised for the run: the benchmark measures the gateway's cost, not its refusals.
    TOLLGATE_RATE_LIMIT_RPM: "1000000",
    TOLLGATE_COUNT_TOKENS_RPM: "1000000",
    ...extraEnv,
  };
  let keys: string[];
  if (accounts === 1) {
    const account = JSON.parse(cli(["account", "create", "--name", "bench"], env)) as { id: string };
    const key = JSON.parse(cli(["key", "create", "--account", account.id, "--name", "bench"], env)) as {
      secret: string;
    };
    cli(
      ["credit", "--account", account.id, "--chain", "base", "--amount", "1000000", "--reason", "bench"],
      env,
    );
    keys = [key.secret];
  } else {
    const before = Date.now();
    const created = execFileSync(
      process.execPath,
      [join(DIST, "bench/accounts.js"), String(accounts), "1000000", "base"],
      { env, encoding: "utf8" },
    );
    keys = (JSON.parse(created) as { keys: string[] }).keys;
    process.stderr.write(`bench: ${accounts} accounts created in ${Date.now() - before} ms\n`);
  }
  const started: ChildProcess[] = [];
  const servers: Server[] = [];
  for (let host = 0; host < hosts; host++) {
    // Each host has a data dir of its own (its log, its `url` images); the store is shared.
    const hostDir = host === 0 ? dataDir : mkdtempSync(join(tmpdir(), "tollgate-bench-host-"));
    if (host > 0) cleanup.push(hostDir);
    // The log goes to a file, as a service manager would keep it, at the default level.
    const log = openSync(join(hostDir, "gateway.log"), "w");
    const profile =
      values.profile === undefined ? [] : ["--cpu-prof", "--cpu-prof-dir", resolve(values.profile)];
    const timeline = values.timeline === undefined ? [] : ["--import", join(DIST, "bench/timeline-hook.js")];
    const gc = values.gc === undefined ? [] : ["--import", join(DIST, "bench/gc-hook.js")];
    const flags = (values["serve-flags"] ?? "").split(" ").filter((flag) => flag !== "");
    const child = spawn(process.execPath, [...flags, ...profile, ...timeline, ...gc, CLI, "serve"], {
      env: {
        ...env,
        TOLLGATE_DATA_DIR: hostDir,
        ...(values.timeline === undefined ? {} : { TOLLGATE_BENCH_TIMELINE: resolve(values.timeline) }),
        ...(values.gc === undefined ? {} : { TOLLGATE_BENCH_GC: resolve(values.gc) }),
        ...(values["heap-profile"] === undefined
          ? {}
          : { TOLLGATE_BENCH_HEAP_PROFILE: resolve(values["heap-profile"]) }),
      },
      stdio: ["ignore", log, log],
    });
    closeSync(log);
    children.push(child);
    started.push(child);
    const deadline = Date.now() + 20_000;
    for (;;) {
      const text = readFileSync(join(hostDir, "gateway.log"), "utf8");
      const ready = /tollgate ready: facade (\S+)/.exec(text);
      if (ready !== null) {
        servers.push({ child, url: ready[1]!, pid: servingPid(child.pid!) });
        break;
      }
      if (child.exitCode !== null || Date.now() > deadline)
        throw new Error(`tollgate did not start:\n${text}`);
      await sleep(50);
    }
  }
  started.push(await startWorker(env, dataDir));
  return {
    servers,
    key: keys[0]!,
    keys,
    dataDir,
    stop: async () => {
      await Promise.all(started.map(stopChild));
    },
  };
}

/** Sends SIGTERM to `child` and waits until it has exited. */
function stopChild(child: ChildProcess): Promise<void> {
  return new Promise<void>((done) => {
    if (child.exitCode !== null || child.signalCode !== null) return done();
    child.once("exit", () => done());
    child.kill("SIGTERM");
  });
}

/** Starts `tollgate worker` on the gateway's store and waits until its chains run. */
async function startWorker(env: NodeJS.ProcessEnv, dataDir: string): Promise<ChildProcess> {
  const log = openSync(join(dataDir, "worker.log"), "w");
  const child = spawn(process.execPath, [CLI, "worker"], { env, stdio: ["ignore", log, log] });
  closeSync(log);
  children.push(child);
  const deadline = Date.now() + 30_000;
  for (;;) {
    const text = readFileSync(join(dataDir, "worker.log"), "utf8");
    if (/tollgate worker ready/.test(text)) return child;
    if (child.exitCode !== null || Date.now() > deadline)
      throw new Error(`tollgate worker did not start:\n${text}`);
    await sleep(50);
  }
}

/** bench/disk-probe.ts beside a run, in `dir` (the store's disk); `stop` answers what it saw. */
function startDiskProbe(dir: string): { stop(): Promise<DiskProbe> } {
  const child = spawn(process.execPath, [join(DIST, "bench/disk-probe.js"), dir], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  children.push(child);
  const answer = firstLine(child).then((line) => JSON.parse(line) as DiskProbe);
  return {
    stop: () => {
      child.stdin!.end();
      return answer;
    },
  };
}

function runLoad<T>(job: LoadJob): Promise<T> {
  const child = node("load.js", [JSON.stringify(job)]);
  return firstLine(child).then((line) => JSON.parse(line) as T);
}

/** utime + stime of a process (every thread), or with `mainThread` of its event loop alone, in ms. */
function cpuMs(pid: number, mainThread = false): number {
  const stat = mainThread ? `/proc/${pid}/task/${pid}/stat` : `/proc/${pid}/stat`;
  const fields = readFileSync(stat, "utf8").split(") ")[1]!.split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
}

function rssBytes(pid: number): number {
  const line = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(line?.[1] ?? 0) * 1024;
}

function fdLimit(): number {
  const line = /Max open files\s+(\d+)/.exec(readFileSync("/proc/self/limits", "utf8"));
  return Number(line?.[1] ?? 1024);
}

const MESSAGE = { role: "user", content: "Say hello to the benchmark." };

/** Scenarios the peer's Anthropic route serves (its count_tokens and images routes differ). */
const PEER_SCENARIOS: ReadonlySet<Scenario> = new Set(["messages", "stream", "idle"]);

/** Headers that route the peer's calls to the fake upstream; set once the peer runs. */
let peerHeaders: Record<string, string> = {};

function requestFor(target: TargetId, scenario: Scenario, url: string, key: string): RequestSpec {
  const headers: Record<string, string> = {
    "content-type": "application/json",
    "anthropic-version": "2023-06-01",
    "x-api-key": key,
    authorization: `Bearer ${key}`,
    ...(target === "peer" ? peerHeaders : {}),
  };
  const text = (stream: boolean, content = MESSAGE.content) =>
    JSON.stringify({
      model: "model-haiku-4-5",
      max_tokens: 64,
      messages: [{ role: "user", content }],
      ...(stream ? { stream: true } : {}),
    });
  switch (scenario) {
    case "messages":
      return { url, path: "/v1/messages", headers, body: text(false) };
    case "stream":
      return { url, path: "/v1/messages", headers, body: text(true) };
    case "count_tokens":
      return { url, path: "/v1/messages/count_tokens", headers, body: text(false) };
    case "idle":
      return { url, path: "/v1/messages", headers, body: text(true, "bench:silent hold this stream open") };
    case "image":
      // The gateway speaks the OpenAI images format; the upstream (and so the floor) speaks Gemini.
      return target === "gateway"
        ? {
            url,
            path: "/v1/images/generations",
            headers,
            body: JSON.stringify({ model: "image-2", prompt: "a lighthouse at dusk", size: "1K" }),
          }
        : {
            url,
            path: "/v1beta/models/gemini-2.5-flash-image:generateContent",
            headers: { "content-type": "application/json", "x-goog-api-key": key },
            body: JSON.stringify({
              contents: [{ role: "user", parts: [{ text: "a lighthouse at dusk" }] }],
              generationConfig: { responseModalities: ["IMAGE"], imageConfig: { aspectRatio: "1:1" } },
            }),
          };
  }
}

/**
 * Marks a measured phase in the --timeline file (the gateway's warm-up and other phases stay out
 * of the timeline); a no-op without --timeline or for a target other than the gateway.
 */
function timelineWindow(label: string, target: TargetId): { end(): void } {
  const file = values.timeline;
  if (file === undefined || target !== "gateway") return { end() {} };
  appendFileSync(file, `${JSON.stringify({ t: Date.now(), ev: "window.start", label })}\n`);
  return {
    end: () => appendFileSync(file, `${JSON.stringify({ t: Date.now(), ev: "window.end", label })}\n`),
  };
}

/**
 * Opens a --gc window in the gateway (bench/gc-hook.ts, signalled with SIGUSR2) for one target;
 * `end` closes it and prints what the serving thread's GC did per 1,000 calls. A no-op without
 * --gc or for a target other than the gateway.
 */
function gcWindow(target: { id: TargetId; pid: number | undefined }): {
  end(label: string, calls: number): Promise<void>;
} {
  const file = values.gc;
  const pid = target.pid;
  if (file === undefined || target.id !== "gateway" || pid === undefined) return { end: async () => {} };
  const lines = () => (existsSync(file) ? readFileSync(file, "utf8").split("\n").filter(Boolean).length : 0);
  const before = lines();
  process.kill(pid, "SIGUSR2");
  return {
    end: async (label, calls) => {
      process.kill(pid, "SIGUSR2");
      const deadline = Date.now() + 30_000;
      while (lines() === before && Date.now() < deadline) await sleep(100);
      const line = readFileSync(file, "utf8").split("\n").filter(Boolean)[before];
      if (line === undefined) return;
      const w = JSON.parse(line) as GcWindow;
      const scavenges = w.kinds.Scavenge ?? { count: 0, totalMs: 0, maxMs: 0 };
      const sorted = [...w.scavengeMs].sort((a, b) => a - b);
      const p = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
      const other = Object.entries(w.kinds)
        .filter(([kind]) => kind !== "Scavenge")
        .map(([kind, k]) => `${kind} ${k.count} (${k.totalMs.toFixed(1)} ms, max ${k.maxMs.toFixed(1)})`)
        .join(", ");
      process.stderr.write(
        `bench: gc ${label}: ${calls} calls, ${(w.allocatedBytes / Math.max(1, calls) / 1024).toFixed(1)} KiB allocated per call, ` +
          `${((scavenges.count * 1000) / Math.max(1, calls)).toFixed(1)} scavenges per 1,000 calls ` +
          `(pause total ${((scavenges.totalMs * 1000) / Math.max(1, calls)).toFixed(1)} ms per 1,000 calls, ` +
          `p50 ${p(0.5).toFixed(2)}, p99 ${p(0.99).toFixed(2)}, max ${scavenges.maxMs.toFixed(2)} ms), ` +
          `CPU ${(w.cpuMs / Math.max(1, calls)).toFixed(3)} ms per call, new space (both semi-spaces) ${(w.semiSpaceBytes / 2 ** 20).toFixed(1)} MiB` +
          `${other === "" ? "" : `; ${other}`}\n`,
      );
    },
  };
}

async function main(): Promise<void> {
  const startedAt = new Date();
  if (values.timeline !== undefined) {
    writeFileSync(values.timeline, "");
    const probeDir = mkdtempSync(join(tmpdir(), "tollgate-bench-probe-"));
    cleanup.push(probeDir);
    // An otherwise idle process with the hook: its stalls are the machine's, not the gateway's.
    children.push(
      spawn(
        process.execPath,
        ["--import", join(DIST, "bench/timeline-hook.js"), "-e", "setInterval(() => {}, 1e6)"],
        {
          env: {
            ...process.env,
            TOLLGATE_BENCH_TIMELINE: resolve(values.timeline),
            TOLLGATE_BENCH_TIMELINE_PROC: "probe",
            TOLLGATE_BENCH_TIMELINE_DISK: probeDir,
            TOLLGATE_BENCH_TIMELINE_CPU: "1",
          },
          stdio: "ignore",
        },
      ),
    );
  }
  const loadBefore = loadavg();
  const upstream = await startServer("fake-upstream.js", [
    "--port",
    values["upstream-port"]!,
    "--latency-ms",
    values["latency-ms"]!,
  ]);
  const proxy = await startServer("passthrough-proxy.js", ["--upstream", upstream.url]);
  let gateway: Server | undefined;
  let gatewayDeployment: Deployment | undefined;
  let key = values["target-key"] ?? "";
  let gatewayUrl = values.target;
  if (gatewayUrl === undefined) {
    const started = await startDeployment(upstream.url);
    gatewayDeployment = started;
    gateway = started.servers[0]!;
    key = started.key;
    gatewayUrl = gateway.url;
  }
  const only = new Set((values.targets ?? "direct,proxy,gateway,peer").split(","));
  let peer: Peer | undefined;
  if (only.has("peer")) {
    peer = await startPeer(upstream.url);
    children.push(peer.child);
    peerHeaders = peer.headers;
  }
  const targets: { id: TargetId; url: string; pid: number | undefined; key: string }[] = [
    { id: "direct" as const, url: upstream.url, pid: upstream.child.pid, key: "bench" },
    { id: "proxy" as const, url: proxy.url, pid: proxy.child.pid, key: "bench" },
    { id: "gateway" as const, url: gatewayUrl, pid: gateway?.pid ?? gateway?.child.pid, key },
    { id: "peer" as const, url: peer?.url ?? "", pid: peer?.child.pid, key: "bench" },
  ].filter((target) => only.has(target.id));
  const results: BenchResults = {
    version: 1,
    startedAt: startedAt.toISOString(),
    finishedAt: "",
    machine: {
      cores: cpus().length,
      cpuModel: cpus()[0]?.model ?? "unknown",
      memoryBytes: totalmem(),
      node: process.version,
      loadBefore,
      loadAfter: [],
      fdLimit: fdLimit(),
    },
    gateway: {
      name: values.target === undefined ? "Tollgate" : (values["target-name"] ?? "target"),
      url: values.target ?? "tollgate serve (started by the harness)",
      commit: gitCommit(),
    },
    peer: peer === undefined ? undefined : { name: "Portkey", package: `${PEER_PACKAGE}@${PEER_VERSION}` },
    settings: { seconds, upstreamLatencyMs: Number(values["latency-ms"]), saturationConnections: 64, quick },
    saturation: [],
    rates: [],
    ttfb: [],
    idle: [],
    holdSettle: undefined,
    stores: [],
  };
  const log = (text: string) => process.stderr.write(`bench: ${text}\n`);

  log(`warming up (${targets.map((t) => t.id).join(", ")})`);
  for (const target of targets) {
    for (const scenario of ["messages", "stream"] as const) {
      await runLoad<SaturateResult>({
        kind: "saturate",
        request: requestFor(target.id, scenario, target.url, target.key),
        connections: 16,
        seconds: 2,
      });
    }
  }

  if (phases.has("saturate")) {
    const scenarios = (values.scenarios ?? "messages,stream,count_tokens,image").split(",") as Scenario[];
    for (const scenario of scenarios) {
      for (const target of targets) {
        if (target.id === "peer" && !PEER_SCENARIOS.has(scenario)) continue;
        const cpuBefore = target.pid === undefined ? 0 : cpuMs(target.pid);
        const result = await runLoad<SaturateResult>({
          kind: "saturate",
          request: requestFor(target.id, scenario, target.url, target.key),
          connections: 64,
          seconds,
        });
        const cpu = target.pid === undefined ? undefined : cpuMs(target.pid) - cpuBefore;
        const cpuPerRequestMs =
          cpu === undefined || result.requests === 0 ? undefined : cpu / result.requests;
        results.saturation.push({ target: target.id, scenario, ...result, cpuPerRequestMs });
        log(
          `saturate ${scenario} ${target.id}: ${result.requestsPerSecond.toFixed(0)} req/s, ` +
            `p50 ${result.latencyMs.p50} ms, non-2xx ${result.non2xx}, errors ${result.errors}`,
        );
      }
    }
  }

  if (phases.has("rates")) {
    for (const rate of (values.rates ?? "100,500,1000").split(",").map(Number)) {
      for (const target of targets) {
        const window = timelineWindow(`${rate}/s`, target.id);
        const gc = gcWindow(target);
        const result = await runLoad<RateResult>({
          kind: "rate",
          request: requestFor(target.id, "messages", target.url, target.key),
          rate,
          seconds,
          connections: 512,
        });
        results.rates.push({ target: target.id, scenario: "messages", ...result });
        window.end();
        await gc.end(`rate ${rate}/s`, result.requests);
        log(
          `rate ${rate}/s messages ${target.id}: p50 ${result.latencyMs.p50.toFixed(2)} ms, ` +
            `p99 ${result.latencyMs.p99.toFixed(2)} ms, achieved ${result.achievedRate.toFixed(0)}/s, ` +
            `non-2xx ${result.non2xx}, errors ${result.errors}`,
        );
      }
    }
  }

  if (phases.has("ttfb")) {
    for (const target of targets) {
      const result = await runLoad<RateResult>({
        kind: "rate",
        request: requestFor(target.id, "stream", target.url, target.key),
        rate: 100,
        seconds,
        connections: 512,
      });
      results.ttfb.push({ target: target.id, scenario: "stream", ...result });
      log(
        `stream 100/s ${target.id}: first byte p50 ${result.firstByteMs.p50.toFixed(2)} ms, ` +
          `last byte p50 ${result.latencyMs.p50.toFixed(2)} ms, non-2xx ${result.non2xx}`,
      );
    }
  }

  if (phases.has("idle")) {
    // Each stream costs the server two descriptors (client side and upstream side).
    const wanted = Number(values.streams ?? (quick ? 1000 : 10_000));
    const streams = Math.min(wanted, Math.floor((results.machine.fdLimit - 200) / 2));
    for (const target of targets.filter((t) => t.id !== "direct")) {
      if (target.pid === undefined) continue;
      await sleep(2000);
      const rssBefore = rssBytes(target.pid);
      const child = spawn(
        process.execPath,
        [
          join(DIST, "bench/load.js"),
          JSON.stringify({
            kind: "idle",
            request: requestFor(target.id, "idle", target.url, target.key),
            streams,
          } satisfies LoadJob),
        ],
        { stdio: ["pipe", "pipe", "inherit"] },
      );
      children.push(child);
      const opened = JSON.parse(await firstLine(child)) as IdleResult;
      await sleep(1000);
      const rssHeld = rssBytes(target.pid);
      const figure: IdleFigure = {
        target: target.id,
        requested: wanted,
        streams,
        opened: opened.opened,
        failed: opened.failed,
        openingMs: opened.openingMs,
        rssBeforeBytes: rssBefore,
        rssHeldBytes: rssHeld,
      };
      results.idle.push(figure);
      log(
        `idle ${target.id}: ${opened.opened}/${streams} streams open, RSS ${(rssHeld / 2 ** 20).toFixed(0)} MiB ` +
          `(before ${(rssBefore / 2 ** 20).toFixed(0)} MiB)`,
      );
      child.stdin!.end();
      await new Promise((done) => child.on("exit", done));
    }
  }

  if (phases.has("holdsettle")) {
    const dir = mkdtempSync(join(tmpdir(), "tollgate-holdsettle-"));
    try {
      const child = node("hold-settle.js", [dir, String(Math.min(seconds, 5))]);
      results.holdSettle = JSON.parse(await firstLine(child)) as HoldSettleResult;
      log(`hold+settle: p50 ${results.holdSettle.pairMs.p50.toFixed(3)} ms per pair`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  if (phases.has("stores")) {
    // The phases before this one are done with the gateway target and the peer: both stop
    // first, so that each deployment below shares the two cores with the pass-through, the
    // stand-in provider and the local chains only, not with an idle gateway's worker polling its
    // chains or its collector shrinking its heap (docs/store.md, "Alone on the machine").
    await gatewayDeployment?.stop();
    if (peer !== undefined) await stopChild(peer.child);
    results.settings.storesAlone = true;
    // The same billed call on each store, each deployment started fresh and stopped after:
    // one host on SQLite, one host on PostgreSQL, two hosts on one PostgreSQL (the load split
    // between them as a balancer would). PostgreSQL is Debian's, on this machine, fsync on.
    // Each first with every call on one account's key, then with the calls spread over
    // --store-accounts accounts, a key each, taken in turn: on PostgreSQL the calls of one
    // account queue on its balance row, so the first is one account's ceiling and the second
    // the deployment's (docs/store.md, "Several hosts against one").
    // With --timeline, the server also logs what can hold every call at once: checkpoints,
    // autovacuum's runs, statements over 10 ms (their commit included) and lock waits; those
    // lines join the timeline (bench/timeline.ts prints them beside the slowest calls).
    const postgres = await startPostgres({
      settings: values.timeline === undefined ? [] : PG_TIMELINE_SETTINGS,
    });
    try {
      const configs: {
        config: StoreFigure["config"];
        label: string;
        hosts: number;
        accounts: number;
        env: () => Promise<Record<string, string>>;
      }[] = [];
      const many = `${storeAccounts} accounts`;
      const database = async () => {
        const url = await postgres.freshDatabase();
        return { TOLLGATE_DATABASE_URL: values["pg-socket"] === true ? postgres.socketUrl(url) : url };
      };
      for (const accounts of [1, storeAccounts]) {
        const suffix = accounts === 1 ? "" : "-many";
        configs.push(
          {
            config: `sqlite-1${suffix}`,
            label: `1 host, SQLite${accounts === 1 ? "" : `, ${many}`}`,
            hosts: 1,
            accounts,
            env: async () => ({}),
          },
          {
            config: `postgres-1${suffix}`,
            label: `1 host, PostgreSQL${accounts === 1 ? "" : `, ${many}`}`,
            hosts: 1,
            accounts,
            env: database,
          },
          {
            config: `postgres-2${suffix}`,
            label: `2 hosts, PostgreSQL${accounts === 1 ? "" : `, ${many}`}`,
            hosts: 2,
            accounts,
            env: database,
          },
        );
      }
      const only = values.stores?.split(",");
      for (const c of configs) {
        if (only !== undefined && !only.includes(c.config)) continue;
        const deployment = await startDeployment(upstream.url, {
          hosts: c.hosts,
          accounts: c.accounts,
          extraEnv: await c.env(),
        });
        try {
          const [first, ...rest] = deployment.servers;
          const request: RequestSpec = {
            ...requestFor("gateway", "messages", first!.url, deployment.key),
            alsoUrls: rest.map((s) => s.url),
            ...(c.accounts === 1
              ? {}
              : {
                  headerSets: deployment.keys.map((key) => ({
                    "x-api-key": key,
                    authorization: `Bearer ${key}`,
                  })),
                }),
          };
          await runLoad<SaturateResult>({ kind: "saturate", request, connections: 16, seconds: 2 });
          const saturate = await runLoad<SaturateResult>({
            kind: "saturate",
            request,
            connections: 64,
            seconds,
          });
          // The pass-through at each rate, then the deployment at the same rate (300/s is issue
          // 32's target rate; 500/s compares with earlier runs).
          const atRate = async (perSecond: number, runSeconds = seconds) => {
            // A longer run also reports its first --seconds alone, comparable with shorter runs.
            const length =
              runSeconds === seconds ? { seconds } : { seconds: runSeconds, headSeconds: seconds };
            const floor = await runLoad<RateResult>({
              kind: "rate",
              request: requestFor("proxy", "messages", proxy.url, "bench"),
              rate: perSecond,
              connections: 512,
              ...length,
            });
            const window = timelineWindow(`${c.config} at ${perSecond}/s`, "gateway");
            const cpu = () => ({
              all: deployment.servers.reduce((sum, s) => sum + cpuMs(s.pid ?? s.child.pid!), 0),
              main: deployment.servers.reduce((sum, s) => sum + cpuMs(s.pid ?? s.child.pid!, true), 0),
            });
            const before = cpu();
            const disk = startDiskProbe(deployment.dataDir);
            const measured = await runLoad<RateResult>({
              kind: "rate",
              request,
              rate: perSecond,
              connections: 512,
              ...length,
            });
            const after = cpu();
            const diskProbe = await disk.stop();
            window.end();
            // The hosts' CPU per call over the run: every thread's, and the event loops' alone.
            const rate: RateResult = {
              ...measured,
              gatewayCpuMsPerCall: (after.all - before.all) / Math.max(1, measured.requests),
              gatewayMainCpuMsPerCall: (after.main - before.main) / Math.max(1, measured.requests),
              disk: diskProbe,
            };
            log(
              `stores ${c.label}: at ${perSecond}/s p50 ${rate.latencyMs.p50.toFixed(2)} ms, p99 ${rate.latencyMs.p99.toFixed(2)} ms ` +
                `(pass-through ${floor.latencyMs.p50.toFixed(2)} / ${floor.latencyMs.p99.toFixed(2)} ms)` +
                (rate.head === undefined || floor.head === undefined
                  ? ", "
                  : ` over ${runSeconds} s; its first ${rate.head.seconds} s alone p50 ${rate.head.latencyMs.p50.toFixed(2)} ms, ` +
                    `p99 ${rate.head.latencyMs.p99.toFixed(2)} ms (pass-through ${floor.head.latencyMs.p50.toFixed(2)} / ` +
                    `${floor.head.latencyMs.p99.toFixed(2)} ms); `) +
                `non-2xx ${rate.non2xx}, errors ${rate.errors}; the hosts' CPU per call ` +
                `${rate.gatewayCpuMsPerCall!.toFixed(2)} ms, their event loops' ${rate.gatewayMainCpuMsPerCall!.toFixed(2)} ms; ` +
                `the disk: ${diskProbe.over20Ms} of ${diskProbe.fsyncs} fsyncs over 20 ms, the longest ${diskProbe.maxMs.toFixed(1)} ms`,
            );
            return { floor, rate };
          };
          log(
            `stores ${c.label}: ${saturate.requestsPerSecond.toFixed(0)} billed calls/s (non-2xx ${saturate.non2xx})`,
          );
          const at300 = await atRate(300, storeSeconds);
          const { floor, rate } = await atRate(500);
          results.stores!.push({
            config: c.config,
            label: c.label,
            hosts: c.hosts,
            accounts: c.accounts,
            saturate,
            rate,
            floor,
            rate300: at300.rate,
            floor300: at300.floor,
          });
        } finally {
          await deployment.stop();
        }
      }
    } finally {
      if (values.timeline !== undefined && existsSync(postgres.log))
        appendFileSync(values.timeline, pgLogEvents(readFileSync(postgres.log, "utf8")));
      await postgres.stop();
    }
  }

  results.machine.loadAfter = loadavg();
  results.finishedAt = new Date().toISOString();
  // Only a full run of Tollgate itself is what docs/benchmarks.md shows (latest.json) and is kept
  // in bench/results/; a partial run (a phase, target or scenario subset, a profile, --quick) or
  // another --target goes to bench/results/partial/ (not committed) with a report of its own.
  const partial =
    quick ||
    [
      values.target,
      values.profile,
      values.timeline,
      values.gc,
      values["serve-flags"],
      values.only,
      values.targets,
      values.scenarios,
      values.rates,
      values["store-accounts"],
      values["store-seconds"],
      values.stores,
      values["pg-socket"],
    ].some((option) => option !== undefined) ||
    [values.seconds, values.streams].some((option) => option !== undefined);
  const lastKept = join(ROOT, "bench/results/latest.json");
  if (existsSync(lastKept)) {
    results.guard = guardText(JSON.parse(readFileSync(lastKept, "utf8")) as BenchResults, results);
    const loud = results.guard.length > 1;
    const rule = "=".repeat(100);
    const text = [...(loud ? [rule] : []), ...results.guard, ...(loud ? [rule] : [])].join("\n");
    if (loud) console.error(text);
    else log(text);
  }
  const dir = join(ROOT, partial ? "bench/results/partial" : "bench/results");
  mkdirSync(dir, { recursive: true });
  const text = `${JSON.stringify(results, null, 2)}\n`;
  const stamp = startedAt.toISOString().replace(/[:.]/g, "-");
  writeFileSync(join(dir, `${stamp}.json`), text);
  if (!partial) {
    writeFileSync(join(dir, "latest.json"), text);
    writeReport(results, join(ROOT, "docs"));
    log("wrote bench/results/latest.json, docs/benchmarks.md and docs/benchmarks.svg");
  } else {
    writeReport(results, dir, `${stamp}-report`);
    log(
      `wrote bench/results/partial/${stamp}.json and its report (a partial run: docs/ keeps the last full run)`,
    );
  }
}

function gitCommit(): string {
  try {
    return execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT, encoding: "utf8" }).trim();
  } catch {
    return "unknown";
  }
}

const stopAll = () => {
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
};
process.on("exit", stopAll);
process.on("SIGINT", () => process.exit(130));
try {
  await main();
} catch (error) {
  console.error(error);
  process.exitCode = 1;
}
stopAll();
// The gateway drains and (with --profile) writes its profile before its data dir goes.
await Promise.race([
  Promise.all(
    children
      .filter((child) => child.exitCode === null && child.signalCode === null)
      .map((child) => new Promise((done) => child.on("exit", done))),
  ),
  sleep(15_000),
]);
for (const dir of cleanup) rmSync(dir, { recursive: true, force: true });
if (values.timeline !== undefined && existsSync(values.timeline))
  console.log(timelineText(readFileSync(values.timeline, "utf8")).join("\n"));
