/**
 * The load generator, always run in a process of its own (never inside the server it measures).
 * One JSON job in argv[2], one JSON result on stdout.
 *
 * - `saturate`: autocannon (as a library) with N closed-loop connections for D seconds: the
 *   throughput at saturation and its latency distribution.
 * - `rate`: open-loop constant throughput, the wrk2 way. Request i is due at start + i/rate
 *   whether or not earlier ones have answered, and its latency is measured from when it was
 *   due, not from when it was sent, so a stall counts against every request it delayed
 *   (coordinated omission corrected). The connection pool (undici) is sized far above what the
 *   rate needs, so sending never waits for an answer; `sendLagP99Ms` reports how late sends were.
 *   For streams it also records the time to the first body byte and to the last.
 * - Both take a request's `headerSets`, when it has some, in turn (several API keys).
 * - `idle`: opens N streaming calls on raw sockets, waits until each has its first event, prints
 *   how many are open, and holds them until stdin closes.
 */
import { realpathSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import type { RequestParams } from "autocannon";
import { Pool } from "undici";
import type { DiskProbe } from "./disk-probe.js";

/** One HTTP request the load generator sends. */
export interface RequestSpec {
  readonly url: string;
  /**
   * Further hosts serving the same routes (several gateway hosts, as behind a load balancer):
   * requests go to `url` and these in turn, connections split evenly between them.
   */
  readonly alsoUrls?: readonly string[];
  readonly path: string;
  readonly headers: Record<string, string>;
  /**
   * Header sets taken in turn, request by request across the whole job (request i sends
   * `headers` with `headerSets[i % length]` over it): one API key per account, to spread the
   * calls over many accounts. Absent, every request sends `headers` alone.
   */
  readonly headerSets?: readonly Record<string, string>[];
  readonly body: string;
}

/** A load job. */
export type LoadJob =
  | {
      readonly kind: "saturate";
      readonly request: RequestSpec;
      readonly connections: number;
      readonly seconds: number;
    }
  | {
      readonly kind: "rate";
      readonly request: RequestSpec;
      readonly rate: number;
      readonly seconds: number;
      readonly connections: number;
      /** Also report the latencies of the requests due in the run's first this many seconds. */
      readonly headSeconds?: number;
    }
  | { readonly kind: "idle"; readonly request: RequestSpec; readonly streams: number };

/** Latency percentiles in milliseconds. */
export interface Percentiles {
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly max: number;
}

/** What `saturate` reports. */
export interface SaturateResult {
  readonly kind: "saturate";
  readonly requests: number;
  readonly requestsPerSecond: number;
  readonly latencyMs: Percentiles;
  readonly non2xx: number;
  readonly errors: number;
}

/** What `rate` reports; latencies are from each request's due time. */
export interface RateResult {
  readonly kind: "rate";
  readonly targetRate: number;
  readonly achievedRate: number;
  readonly requests: number;
  readonly latencyMs: Percentiles;
  readonly firstByteMs: Percentiles;
  readonly sendLagP99Ms: number;
  readonly non2xx: number;
  readonly errors: number;
  /**
   * With the job's `headSeconds`: the latencies of the requests due in the run's first that many
   * seconds alone (the run's start, measured as a run that short would have measured it).
   */
  readonly head?: { readonly seconds: number; readonly requests: number; readonly latencyMs: Percentiles };
  /**
   * Set by the store phase (bench/run.ts): the hosts' CPU time per call over the run, every
   * thread's and the event loops' alone (ms); absent before 2026-11-29.
   */
  readonly gatewayCpuMsPerCall?: number;
  readonly gatewayMainCpuMsPerCall?: number;
  /** Set by the store phase: the disk's fsyncs beside the run (bench/disk-probe.ts). */
  readonly disk?: DiskProbe;
}

/** What `idle` reports once its streams are open. */
export interface IdleResult {
  readonly kind: "idle";
  readonly opened: number;
  readonly failed: number;
  readonly openingMs: number;
}

function percentiles(samples: Float64Array | number[]): Percentiles {
  const sorted = Float64Array.from(samples).sort();
  const at = (q: number) =>
    sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
  return {
    p50: at(0.5),
    p90: at(0.9),
    p99: at(0.99),
    max: sorted.length === 0 ? Number.NaN : sorted.at(-1)!,
  };
}

/** Runs a `saturate` job. */
export async function saturate(job: Extract<LoadJob, { kind: "saturate" }>): Promise<SaturateResult> {
  const { request } = job;
  // Loaded here, not at the top: a fixed-rate run's process never pays for autocannon's modules.
  const { default: autocannon } = await import("autocannon");
  const urls = [request.url, ...(request.alsoUrls ?? [])];
  // Several header sets: autocannon asks setupRequest for each request it builds, on every
  // connection of every host, so one counter shared by all of them takes the sets in turn.
  const sets = request.headerSets;
  let next = 0;
  const turns =
    sets === undefined || sets.length === 0
      ? {}
      : {
          requests: [
            {
              setupRequest: (built: RequestParams) => ({
                ...built,
                headers: { ...built.headers, ...sets[next++ % sets.length] },
              }),
            },
          ],
        };
  // One closed loop per host, side by side; with several hosts the latencies reported are the
  // slowest host's (autocannon keeps no samples to merge).
  const results = await Promise.all(
    urls.map((url) =>
      autocannon({
        url: url + request.path,
        method: "POST",
        headers: request.headers,
        body: request.body,
        connections: Math.max(1, Math.round(job.connections / urls.length)),
        duration: job.seconds,
        pipelining: 1,
        ...turns,
      }),
    ),
  );
  const total = results.reduce((n, r) => n + r.requests.total, 0);
  const worst = (pick: (r: (typeof results)[number]) => number) => Math.max(...results.map(pick));
  return {
    kind: "saturate",
    requests: total,
    requestsPerSecond: total / job.seconds,
    latencyMs: {
      p50: worst((r) => r.latency.p50),
      p90: worst((r) => r.latency.p90),
      p99: worst((r) => r.latency.p99),
      max: worst((r) => r.latency.max),
    },
    non2xx: results.reduce((n, r) => n + r.non2xx, 0),
    errors: results.reduce((n, r) => n + r.errors + r.timeouts, 0),
  };
}

/** Runs a `rate` job. */
export async function openLoop(job: Extract<LoadJob, { kind: "rate" }>): Promise<RateResult> {
  const { request } = job;
  const urls = [request.url, ...(request.alsoUrls ?? [])];
  const pools = urls.map(
    (url) => new Pool(url, { connections: Math.ceil(job.connections / urls.length), pipelining: 1 }),
  );
  const total = Math.round(job.rate * job.seconds);
  const interval = 1000 / job.rate;
  const latency = new Float64Array(total);
  const firstByte = new Float64Array(total);
  const sendLag = new Float64Array(total);
  let non2xx = 0;
  let errors = 0;
  let done = 0;
  const body = Buffer.from(request.body);
  const headerSets =
    request.headerSets === undefined || request.headerSets.length === 0
      ? [request.headers]
      : request.headerSets.map((set) => ({ ...request.headers, ...set }));
  let finish!: () => void;
  const finished = new Promise<void>((resolve) => {
    finish = resolve;
  });
  let closed = false;
  // Each request through undici's dispatch with a handler of its own: no body stream, no promise
  // per request. The load generator shares the cores with the target: this costs it about a
  // quarter less CPU than `request` with an async-iterated body (docs/benchmarks.md, "How it is measured").
  const fire = (i: number, due: number) => {
    sendLag[i] = performance.now() - due;
    const end = (failed: boolean) => {
      const now = performance.now() - due;
      if (firstByte[i] === 0) firstByte[i] = now;
      if (failed) {
        if (closed) return;
        errors += 1;
        latency[i] = now;
        firstByte[i] = now;
      } else if (!closed) latency[i] = now;
      done += 1;
      if (done === total) finish();
    };
    pools[i % pools.length]!.dispatch(
      { method: "POST", path: request.path, headers: headerSets[i % headerSets.length], body },
      {
        onConnect: () => {},
        onHeaders: (statusCode: number) => {
          if (statusCode < 200 || statusCode > 299) non2xx += 1;
          return true;
        },
        onData: () => {
          if (firstByte[i] === 0) firstByte[i] = performance.now() - due;
          return true;
        },
        onComplete: () => end(false),
        onError: () => end(true),
      },
    );
  };
  const start = performance.now() + 20;
  let next = 0;
  await new Promise<void>((resolve) => {
    const tick = () => {
      const now = performance.now();
      while (next < total && start + next * interval <= now) {
        fire(next, start + next * interval);
        next += 1;
      }
      if (next >= total) return resolve();
      setTimeout(tick, Math.max(0, start + next * interval - performance.now()));
    };
    setTimeout(tick, 20);
  });
  const sent = performance.now();
  // A target that cannot keep up would keep the run going for minutes: past the drain time,
  // what is still unanswered counts as an error, with its latency so far as a lower bound.
  const drainMs = Math.max(10_000, job.seconds * 1000);
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([finished, new Promise<void>((resolve) => (timer = setTimeout(resolve, drainMs)))]);
  clearTimeout(timer);
  const cutoff = performance.now();
  closed = true;
  for (let i = 0; i < total; i++) {
    if (latency[i] === 0) {
      latency[i] = cutoff - (start + i * interval);
      if (firstByte[i] === 0) firstByte[i] = latency[i]!;
      errors += 1;
    }
  }
  await Promise.all(pools.map((pool) => pool.destroy()));
  const headCount =
    job.headSeconds === undefined ? 0 : Math.min(total, Math.round(job.rate * job.headSeconds));
  return {
    kind: "rate",
    targetRate: job.rate,
    achievedRate: total / ((sent - start) / 1000),
    requests: total,
    latencyMs: percentiles(latency),
    firstByteMs: percentiles(firstByte),
    sendLagP99Ms: percentiles(sendLag).p99,
    non2xx,
    errors,
    ...(job.headSeconds === undefined
      ? {}
      : {
          head: {
            seconds: job.headSeconds,
            requests: headCount,
            latencyMs: percentiles(latency.subarray(0, headCount)),
          },
        }),
  };
}

async function idle(job: Extract<LoadJob, { kind: "idle" }>): Promise<void> {
  const { request } = job;
  const url = new URL(request.url);
  const head =
    `POST ${request.path} HTTP/1.1\r\nhost: ${url.host}\r\ncontent-length: ${Buffer.byteLength(request.body)}\r\n` +
    Object.entries(request.headers)
      .map(([name, value]) => `${name}: ${value}\r\n`)
      .join("") +
    "\r\n";
  const sockets: Socket[] = [];
  let opened = 0;
  let failed = 0;
  const started = performance.now();
  const openOne = () =>
    new Promise<void>((resolve) => {
      const socket = connect(Number(url.port), url.hostname);
      sockets.push(socket);
      let seen = "";
      const timer = setTimeout(() => settle(false), 60_000);
      const settle = (ok: boolean) => {
        clearTimeout(timer);
        socket.removeAllListeners("data");
        if (ok) opened += 1;
        else failed += 1;
        resolve();
      };
      socket.on("error", () => settle(false));
      socket.on("data", (chunk: Buffer) => {
        seen += chunk.toString("latin1");
        if (seen.includes("message_start")) settle(true);
        else if (seen.length > 0 && !seen.startsWith("HTTP/1.1 200")) settle(false);
      });
      socket.write(head + request.body);
    });
  // Open in waves so the listen backlog never overflows.
  const wave = 200;
  for (let i = 0; i < job.streams; i += wave) {
    await Promise.all(Array.from({ length: Math.min(wave, job.streams - i) }, openOne));
  }
  const result: IdleResult = { kind: "idle", opened, failed, openingMs: performance.now() - started };
  process.stdout.write(`${JSON.stringify(result)}\n`);
  // Held until the parent has read the server's memory and closes our stdin.
  await new Promise<void>((resolve) => {
    process.stdin.on("end", resolve);
    process.stdin.on("close", resolve);
    process.stdin.resume();
  });
  for (const socket of sockets) socket.destroy();
}

// Run as a script (the harness spawns it); imported (test/bench-load.test.ts), it only exports.
// Real paths on both sides: a symlinked checkout must not turn the script into a silent no-op.
if (process.argv[1] !== undefined && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const job = JSON.parse(process.argv[2] ?? "{}") as LoadJob;
  if (job.kind === "saturate") process.stdout.write(`${JSON.stringify(await saturate(job))}\n`);
  else if (job.kind === "rate") process.stdout.write(`${JSON.stringify(await openLoop(job))}\n`);
  else await idle(job);
  process.exit(0);
}
