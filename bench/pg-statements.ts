/**
 * Where a billed call's time goes on PostgreSQL: one `tollgate serve` host on a real PostgreSQL
 * started with `pg_stat_statements` preloaded (Debian's, fsync on), a stand-in provider and a local
 * chain, driven with `--calls` non-streaming keyed calls without an Idempotency-Key (or with one:
 * `--idempotency`) from `--concurrency` loops. Prints a markdown table: each statement the calls
 * made, how many per billed call (each one a round trip: `pg` sends one at a time), its mean
 * execution time on the server, and which part of the call it serves; then the statements and
 * the CPU (PostgreSQL's processes, the gateway's) per call. docs/store.md keeps its output.
 *
 *   node scripts/build.mjs && npx tsc -p tsconfig.bench.json && node dist/bench/pg-statements.js
 *
 * Options: --calls N (default 2000), --concurrency N (16), --accounts N (1: the calls go round
 * the accounts, each with its own key and credit), --idempotency, --json (one JSON line),
 * --profile DIR (run the gateway with --cpu-prof, its profile written into DIR on exit, and print
 * where its CPU went: self time by package or source folder, the whole run's), --socket (the
 * gateway reaches PostgreSQL through its Unix socket, not loopback TCP).
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import pg from "pg";
import { startEvmDevChain } from "../src/dev/chains/evm/dev-chain.js";
import { startDevUpstream } from "../src/dev/provider/dev-upstream.js";
import { writeChainsFile } from "../test/helpers/evm.js";
import { startPostgres } from "../test/helpers/postgres.js";
import { childEnv, tempDir } from "../test/helpers/process.js";

/** The compiled CLI, beside this script in dist/. */
const CLI = resolve(import.meta.dirname, "../src/cli/main.js");

/** Runs a CLI command to its end and parses its `--json` output. */
function cliJson<T>(args: readonly string[], env: Record<string, string>): T {
  return JSON.parse(
    execFileSync(process.execPath, [CLI, ...args, "--json"], { env: childEnv(env), encoding: "utf8" }),
  ) as T;
}

const { values } = parseArgs({
  options: {
    calls: { type: "string", default: "2000" },
    concurrency: { type: "string", default: "16" },
    accounts: { type: "string", default: "1" },
    idempotency: { type: "boolean", default: false },
    json: { type: "boolean", default: false },
    profile: { type: "string" },
    // The gateway reaches PostgreSQL through its Unix socket instead of loopback TCP.
    socket: { type: "boolean", default: false },
    // The same calls on SQLite (no statements to list): the gateway's CPU per call beside it.
    sqlite: { type: "boolean", default: false },
  },
});
const calls = Number(values.calls);
const concurrency = Number(values.concurrency);

/** Which part of a billed call a statement serves, from its text. */
const PARTS: readonly [RegExp, string][] = [
  [/^(BEGIN|COMMIT|ROLLBACK)/i, "transaction control"],
  [/FROM api_keys|UPDATE api_keys|auth_version/, "authentication"],
  [/billing_accounts/, "billing account (chain)"],
  [/FROM spend_caps|pg_temp\.|spend_days WHERE/, "spend caps"],
  [/idempotency_keys/, "idempotency"],
  [/INSERT INTO holds|tollgate_place_hold/, "hold"],
  [/DELETE FROM open_holds o USING hold|tollgate_resolve/, "settle"],
  [/FOR NO KEY UPDATE/, "balance row lock (caps)"],
  [/FROM holds WHERE id/, "hold (caps)"],
  [
    /open_holds o\s+WHERE o\.created_at|CLAIM|open_holds o WHERE o.hold_id = ANY/,
    "hold sweeper (background)",
  ],
];

/** The CPU time (ms) of `pid` and, with `children`, of its live children and reaped ones. */
function cpuMs(pid: number, children: boolean): number {
  const ticks = (stat: string, withReaped: boolean) => {
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // Fields from the state (3rd): utime 14th, stime 15th, cutime 16th, cstime 17th.
    const own = Number(f[11]) + Number(f[12]);
    return withReaped ? own + Number(f[13]) + Number(f[14]) : own;
  };
  let total = ticks(readFileSync(`/proc/${pid}/stat`, "utf8"), children);
  if (children) {
    for (const entry of readdirSync("/proc")) {
      if (!/^\d+$/.test(entry)) continue;
      try {
        const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
        const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
        if (ppid === pid) total += ticks(stat, false);
      } catch {
        // Gone meanwhile.
      }
    }
  }
  return total * 10; // USER_HZ is 100 on Linux.
}

/** Starts `tollgate serve` (with `node` flags `flags`) and resolves with it once it is ready. */
async function serve(env: Record<string, string>, flags: readonly string[]) {
  const child = spawn(process.execPath, [...flags, CLI, "serve"], {
    env: childEnv({
      TOLLGATE_PORT: "0",
      TOLLGATE_CORE_PORT: "0",
      TOLLGATE_PUBLIC_URL: "http://127.0.0.1",
      ...env,
    }),
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  child.stderr!.on("data", (chunk) => {
    err += chunk;
  });
  const exited = new Promise<void>((done) => child.once("exit", () => done()));
  const facadeUrl = await new Promise<string>((ready, fail) => {
    child.once("exit", (code) => fail(new Error(`tollgate serve exited ${code}: ${err}`)));
    child.stdout!.on("data", (chunk) => {
      out += chunk;
      const match = /tollgate ready: facade (\S+)/.exec(out);
      if (match !== null) ready(match[1]!);
    });
  });
  return {
    child: child as ChildProcess,
    facadeUrl,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      await exited;
    },
  };
}

/** A V8 CPU profile, as `--cpu-prof` writes it. */
interface CpuProfile {
  nodes: { id: number; callFrame: { url: string; functionName: string } }[];
  samples: number[];
  timeDeltas: number[];
}

/**
 * Self time of the largest profile in `dir`, by package (node_modules) or source folder, in %:
 * the serving process's (its launcher, which re-runs it with its semi-space and waits, writes a
 * small one beside it: docs/performance.md §21).
 */
function profileShares(dir: string): [string, number][] {
  const newest = readdirSync(dir)
    .filter((f) => f.endsWith(".cpuprofile"))
    .map((f) => join(dir, f))
    .sort((a, b) => statSync(b).size - statSync(a).size)[0];
  if (newest === undefined) return [];
  const profile = JSON.parse(readFileSync(newest, "utf8")) as CpuProfile;
  const where = new Map(
    profile.nodes.map((n) => {
      const url = n.callFrame.url;
      const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)?.[1];
      const src = /\/dist\/src\/([^/]+(?:\/[^/]+)?)\//.exec(url)?.[1];
      const name =
        pkg ??
        (src === undefined ? undefined : `src/${src}`) ??
        (url.startsWith("node:")
          ? "node (runtime)"
          : url === ""
            ? `(${n.callFrame.functionName || "native"})`
            : url);
      return [n.id, name] as const;
    }),
  );
  const self = new Map<string, number>();
  let total = 0;
  profile.samples.forEach((id, i) => {
    const dt = profile.timeDeltas[i] ?? 0;
    total += dt;
    const name = where.get(id) ?? "?";
    self.set(name, (self.get(name) ?? 0) + dt);
  });
  return [...self.entries()]
    .map(([k, v]) => [k, (100 * v) / total] as [string, number])
    .sort((a, b) => b[1] - a[1]);
}

const postgres = await startPostgres({
  settings: [
    "shared_preload_libraries=pg_stat_statements",
    "pg_stat_statements.track=all",
    "pg_stat_statements.track_planning=on",
  ],
});
const dirs: { cleanup(): void }[] = [];
const dir = () => {
  const d = tempDir("tollgate-pgstat-");
  dirs.push(d);
  return d.path;
};
const chain = await startEvmDevChain({ id: "base", chainId: 8453 });
const upstream = await startDevUpstream({});
let gateway: Awaited<ReturnType<typeof serve>> | undefined;
try {
  const url = await postgres.freshDatabase();
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  await admin.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
  const chainsFile = join(dir(), "chains.json");
  writeChainsFile(chainsFile, chain);
  const env = {
    ...(values.sqlite ? {} : { TOLLGATE_DATABASE_URL: values.socket ? postgres.socketUrl(url) : url }),
    TOLLGATE_ANTHROPIC_URL: upstream.url,
    TOLLGATE_CHAINS: chainsFile,
    TOLLGATE_DEV_CHAINS: "auto",
    TOLLGATE_MASTER_SECRET: "7a".repeat(32),
    TOLLGATE_RATE_LIMIT_RPM: "1000000",
  };
  // On SQLite the accounts are made in the data dir the host then serves.
  const cli = { ...env, TOLLGATE_DATA_DIR: dir() };
  const secrets: string[] = [];
  for (let a = 0; a < Number(values.accounts); a++) {
    const account = cliJson<{ id: string }>(["account", "create", "--name", `pg-statements-${a}`], cli).id;
    secrets.push(cliJson<{ secret: string }>(["key", "create", "--account", account], cli).secret);
    cliJson(
      ["credit", "--account", account, "--chain", "base", "--amount", "100000", "--reason", "bench"],
      cli,
    );
  }
  const flags = values.profile === undefined ? [] : ["--cpu-prof", "--cpu-prof-dir", resolve(values.profile)];
  gateway = await serve({ ...env, TOLLGATE_DATA_DIR: values.sqlite ? cli.TOLLGATE_DATA_DIR : dir() }, flags);
  const host = gateway;

  let sent = 0;
  const call = async () => {
    const n = sent++;
    const response = await fetch(`${host.facadeUrl}/v1/messages`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-api-key": secrets[n % secrets.length]!,
        "anthropic-version": "2023-06-01",
        ...(values.idempotency ? { "idempotency-key": `pgstat-${process.pid}-${n}` } : {}),
      },
      body: JSON.stringify({
        model: "claude-haiku-4-5",
        max_tokens: 64,
        messages: [{ role: "user", content: "where does the time go" }],
      }),
    });
    await response.text();
    if (response.status !== 200) throw new Error(`call answered ${response.status}`);
  };
  const drive = async (n: number) => {
    let left = n;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (left-- > 0) await call();
      }),
    );
  };
  await drive(200); // warm-up: connections opened, plans cached, JIT warm

  await admin.query("SELECT pg_stat_statements_reset()");
  // The gateway: `tollgate serve` runs in a child of its launcher (the semi-space re-run, docs/performance.md §21).
  const pgBefore = cpuMs(postgres.pid, true);
  const gwBefore = cpuMs(host.child.pid!, true);
  const started = performance.now();
  await drive(calls);
  const seconds = (performance.now() - started) / 1000;
  const pgCpu = cpuMs(postgres.pid, true) - pgBefore;
  const gwCpu = cpuMs(host.child.pid!, true) - gwBefore;
  const { rows } = await admin.query<{
    query: string;
    calls: string;
    mean: number;
    plan: number;
    plans: string;
    total: number;
    toplevel: boolean;
  }>(
    `SELECT query, calls::text, plans::text, mean_exec_time AS mean, mean_plan_time AS plan, total_exec_time AS total, toplevel FROM pg_stat_statements
      WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND query NOT LIKE '%pg_stat_statements%' ORDER BY calls DESC, total DESC`,
  );
  await admin.end();
  const statements = rows.map((r) => {
    const text = r.query.replace(/\s+/g, " ").trim();
    return {
      // A statement run inside another (a foreign-key check, a function's body) is no round trip.
      part: r.toplevel ? (PARTS.find(([re]) => re.test(text))?.[1] ?? "other") : "(nested: no round trip)",
      toplevel: r.toplevel,
      perCall: Number(r.calls) / calls,
      meanMs: r.mean,
      // Planning per execution: a statement with a cached generic plan is planned once per
      // session, one with custom plans every time (pg_stat_statements' mean is per plan).
      planMs: Number(r.calls) === 0 ? 0 : (r.plan * Number(r.plans)) / Number(r.calls),
      plansPerRun: Number(r.calls) === 0 ? 0 : Number(r.plans) / Number(r.calls),
      text: text.slice(0, 90),
    };
  });
  const onPath = statements.filter((s) => s.toplevel && !s.part.endsWith("(background)"));
  const perCall = onPath.reduce((sum, s) => sum + s.perCall, 0);
  const result = {
    calls,
    concurrency,
    accounts: secrets.length,
    idempotency: values.idempotency,
    store: values.sqlite ? "sqlite" : values.socket ? "postgres-socket" : "postgres-tcp",
    callsPerSecond: Math.round(calls / seconds),
    statementsPerCall: Number(perCall.toFixed(2)),
    serverMsPerCall: Number(onPath.reduce((sum, s) => sum + s.perCall * s.meanMs, 0).toFixed(3)),
    planMsPerCall: Number(onPath.reduce((sum, s) => sum + s.perCall * s.planMs, 0).toFixed(3)),
    /** The statements run inside functions, planned again on every run when custom plans win. */
    nestedPlanMsPerCall: Number(
      statements
        .filter((s) => !s.toplevel)
        .reduce((sum, s) => sum + s.perCall * s.planMs, 0)
        .toFixed(3),
    ),
    postgresCpuMsPerCall: Number((pgCpu / calls).toFixed(3)),
    gatewayCpuMsPerCall: Number((gwCpu / calls).toFixed(3)),
    statements,
  };
  if (values.json) process.stdout.write(`${JSON.stringify(result)}\n`);
  else {
    const lines = [
      "| part of the call | statement | per call | mean execution (ms) | planned per run | planning per run (ms) |",
      "|---|---|---:|---:|---:|---:|",
      ...statements
        .filter((s) => s.perCall >= 0.005)
        .map(
          (s) =>
            `| ${s.part} | \`${s.text.replace(/\|/g, "\\|")}\` | ${s.perCall.toFixed(2)} | ${s.meanMs.toFixed(3)} | ${s.plansPerRun.toFixed(2)} | ${s.planMs.toFixed(3)} |`,
        ),
      "",
      `${calls} calls, ${concurrency} at a time over ${secrets.length} account(s)${values.idempotency ? ", each with an Idempotency-Key" : ""}, ` +
        `${values.sqlite ? "on SQLite" : values.socket ? "through PostgreSQL's Unix socket" : "over loopback TCP"}: ` +
        `${result.callsPerSecond} calls/s; ${result.statementsPerCall} statements (round trips) per call, ` +
        `${result.serverMsPerCall} ms of statement execution and ${result.planMsPerCall} ms of planning per call (${result.nestedPlanMsPerCall} ms more inside functions); CPU per call: PostgreSQL ` +
        `${result.postgresCpuMsPerCall} ms, gateway ${result.gatewayCpuMsPerCall} ms.`,
    ];
    process.stdout.write(`${lines.join("\n")}\n`);
  }
} finally {
  await gateway?.stop();
  if (values.profile !== undefined) {
    const shares = profileShares(resolve(values.profile)).slice(0, 15);
    process.stdout.write(
      `\nThe gateway's CPU (self time, whole run):\n${shares.map(([k, v]) => `  ${v.toFixed(1).padStart(5)}%  ${k}`).join("\n")}\n`,
    );
  }
  await upstream.close();
  await chain.close();
  await postgres.stop();
  for (const d of dirs) d.cleanup();
}
