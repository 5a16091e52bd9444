/**
 * Writes docs/benchmarks.md and its chart (an SVG, no external assets) from one run's results.
 * `node dist/bench/report.js [RESULTS.json]` regenerates them from kept raw results.
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { RateResult } from "./load.js";
import type {
  BenchResults,
  IdleFigure,
  RateFigure,
  SaturationFigure,
  Scenario,
  StoreFigure,
  TargetId,
} from "./results.js";

const TARGET_LABEL: Record<TargetId, string> = {
  direct: "(a) direct",
  proxy: "(b) pass-through",
  gateway: "(c) gateway",
  peer: "(d) Portkey",
};
/** The targets in the order every table lists them. */
const TARGETS = ["direct", "proxy", "gateway", "peer"] as const;
const SCENARIO_LABEL: Record<string, string> = {
  messages: "messages (non-streaming)",
  stream: "messages (streaming)",
  count_tokens: "count_tokens",
  image: "image generation",
};
const MiB = 2 ** 20;

const ms = (value: number | undefined, digits = 2) =>
  value === undefined || Number.isNaN(value) ? "–" : `${value.toFixed(digits)} ms`;
const ratio = (value: number | undefined) =>
  value === undefined || !Number.isFinite(value) ? "–" : `${value.toFixed(2)}×`;
const count = (value: number) => Math.round(value).toLocaleString("en-US");

function find<T extends { target: TargetId; scenario: Scenario }>(
  rows: readonly T[],
  target: TargetId,
  scenario: Scenario,
  extra: (row: T) => boolean = () => true,
): T | undefined {
  return rows.find((row) => row.target === target && row.scenario === scenario && extra(row));
}

/** Whether a run's answers were all 2xx; a target that refused or failed is flagged, not averaged in. */
function clean(row: { non2xx: number; errors: number } | undefined): boolean {
  return row !== undefined && row.non2xx === 0 && row.errors === 0;
}

function status(row: { non2xx: number; errors: number } | undefined): string {
  if (row === undefined) return "not run";
  if (clean(row)) return "";
  return ` ⚠ ${row.non2xx} non-2xx, ${row.errors} errors`;
}

function saturationTable(results: BenchResults): string[] {
  const lines = [
    "| scenario | (a) direct | (b) pass-through | (c) gateway | (d) Portkey | (c) / (b) | (d) / (b) | CPU per request (b) → (c) / (d) |",
    "|---|---|---|---|---|---|---|---|",
  ];
  for (const scenario of ["messages", "stream", "count_tokens", "image"] as const) {
    const row = (target: TargetId) => find(results.saturation, target, scenario);
    const cell = (r: SaturationFigure | undefined) =>
      r === undefined ? "–" : `${count(r.requestsPerSecond)} req/s${status(r)}`;
    const b = row("proxy");
    const c = row("gateway");
    const d = row("peer");
    const rel = (x: SaturationFigure | undefined) =>
      clean(b) && clean(x) ? ratio(x!.requestsPerSecond / b!.requestsPerSecond) : "–";
    const cpu = `${ms(b?.cpuPerRequestMs, 3)} → ${ms(c?.cpuPerRequestMs, 3)} / ${ms(d?.cpuPerRequestMs, 3)}`;
    lines.push(
      `| ${SCENARIO_LABEL[scenario]} | ${cell(row("direct"))} | ${cell(b)} | ${cell(c)} | ${cell(d)} | ${rel(c)} | ${rel(d)} | ${cpu} |`,
    );
  }
  return lines;
}

function added(row: RateFigure | undefined, base: RateFigure | undefined, pick: (r: RateFigure) => number) {
  return row === undefined || base === undefined ? undefined : pick(row) - pick(base);
}

function ratesTable(results: BenchResults): string[] {
  const lines = [
    "| rate | (a) direct p50 / p99 | (b) added p50 / p99 | (c) added p50 / p99 | (d) added p50 / p99 | (c) added p50 / p99 ÷ (b)'s | achieved rate (c) / (d) |",
    "|---|---|---|---|---|---|---|",
  ];
  for (const rate of [100, 500, 1000]) {
    const at = (target: TargetId) => find(results.rates, target, "messages", (r) => r.targetRate === rate);
    const a = at("direct");
    const b = at("proxy");
    const c = at("gateway");
    const d = at("peer");
    if (a === undefined) continue;
    const p50 = (r: RateFigure) => r.latencyMs.p50;
    const p99 = (r: RateFigure) => r.latencyMs.p99;
    const bAdd = [added(b, a, p50), added(b, a, p99)];
    const cAdd = [added(c, a, p50), added(c, a, p99)];
    const dAdd = [added(d, a, p50), added(d, a, p99)];
    const achieved = (r: RateFigure | undefined) => (r === undefined ? "–" : `${count(r.achievedRate)}/s`);
    lines.push(
      `| ${rate}/s | ${ms(p50(a))} / ${ms(p99(a))} | ${ms(bAdd[0])} / ${ms(bAdd[1])}${status(b)} | ` +
        `${ms(cAdd[0])} / ${ms(cAdd[1])}${status(c)} | ${ms(dAdd[0])} / ${ms(dAdd[1])}${d === undefined ? "" : status(d)} | ` +
        `${ratio(cAdd[0]! / bAdd[0]!)} / ${ratio(cAdd[1]! / bAdd[1]!)} | ${achieved(c)} / ${achieved(d)} |`,
    );
  }
  return lines;
}

function ttfbTable(results: BenchResults): string[] {
  const a = find(results.ttfb, "direct", "stream");
  const lines = [
    "| target | first byte p50 / p99 | added first byte p50 / p99 | last byte p50 / p99 |",
    "|---|---|---|---|",
  ];
  const first = (x: RateFigure) => x.firstByteMs;
  for (const target of TARGETS) {
    const r = find(results.ttfb, target, "stream");
    if (r === undefined) continue;
    lines.push(
      `| ${TARGET_LABEL[target]}${status(r)} | ${ms(first(r).p50)} / ${ms(first(r).p99)} | ` +
        `${target === "direct" ? "–" : `${ms(added(r, a, (x) => first(x).p50))} / ${ms(added(r, a, (x) => first(x).p99))}`} | ` +
        `${ms(r.latencyMs.p50)} / ${ms(r.latencyMs.p99)} |`,
    );
  }
  const b = find(results.ttfb, "proxy", "stream");
  const c = find(results.ttfb, "gateway", "stream");
  const bAdd = added(b, a, (x) => first(x).p50);
  const cAdd = added(c, a, (x) => first(x).p50);
  if (bAdd !== undefined && cAdd !== undefined)
    lines.push("", `Added first byte (p50), (c) ÷ (b): ${ratio(cAdd / bAdd)}.`);
  return lines;
}

function idleTable(results: BenchResults): string[] {
  const lines = [
    "| target | streams open | RSS before | RSS holding them | per stream | RSS ÷ (b)'s |",
    "|---|---|---|---|---|---|",
  ];
  const proxy = results.idle.find((r) => r.target === "proxy");
  for (const r of results.idle) {
    const per =
      r.opened === 0 ? "–" : `${((r.rssHeldBytes - r.rssBeforeBytes) / r.opened / 1024).toFixed(1)} KiB`;
    lines.push(
      `| ${TARGET_LABEL[r.target]} | ${count(r.opened)} of ${count(r.streams)}${r.failed > 0 ? ` (${r.failed} failed)` : ""} | ` +
        `${(r.rssBeforeBytes / MiB).toFixed(0)} MiB | ${(r.rssHeldBytes / MiB).toFixed(0)} MiB | ${per} | ` +
        `${proxy === undefined ? "–" : ratio(r.rssHeldBytes / proxy.rssHeldBytes)} |`,
    );
  }
  return lines;
}

/**
 * The runtime issue's targets, each with Tollgate's figure, Portkey's, and whether it was met
 * (the figure's bound, and better than Portkey where Portkey was measured).
 */
function targetsTable(results: BenchResults): string[] {
  const lines = [
    "| target | (c) Tollgate | (d) Portkey | met (bound, and better than Portkey) |",
    "|---|---|---|---|",
  ];
  const yes = (ok: boolean | undefined) => (ok === undefined ? "–" : ok ? "yes" : "**no**");
  const verdict = (
    c: number | undefined,
    d: number | undefined,
    bound: (x: number) => boolean,
    lower = true,
  ) => (c === undefined ? undefined : bound(c) && (d === undefined || (lower ? c < d : c > d)));
  const at500 = (t: TargetId) => find(results.rates, t, "messages", (r) => r.targetRate === 500);
  const a = at500("direct");
  const addedAt500 = (t: TargetId, q: "p50" | "p99") => {
    const r = at500(t);
    return clean(r) ? added(r, a, (x) => x.latencyMs[q]) : undefined;
  };
  const sat = (t: TargetId) => find(results.saturation, t, "messages");
  const b = sat("proxy");
  const share = (t: TargetId) => {
    const r = sat(t);
    return clean(r) && clean(b) ? r!.requestsPerSecond / b!.requestsPerSecond : undefined;
  };
  const cpu = (t: TargetId) => (clean(sat(t)) ? sat(t)?.cpuPerRequestMs : undefined);
  const ta = find(results.ttfb, "direct", "stream");
  const ttfb = (t: TargetId) => {
    const r = find(results.ttfb, t, "stream");
    return clean(r) ? added(r, ta, (x) => x.firstByteMs.p50) : undefined;
  };
  const pct = (x: number | undefined) => (x === undefined ? "–" : `${(x * 100).toFixed(0)}%`);
  const rows: [
    string,
    (t: TargetId) => number | undefined,
    (x: number | undefined) => string,
    (x: number) => boolean,
    boolean,
  ][] = [
    ["CPU per billed call ≤ 0.45 ms (non-streaming)", cpu, (x) => ms(x, 3), (x) => x <= 0.45, true],
    ["throughput ≥ 0.6× the pass-through's (non-streaming)", share, pct, (x) => x >= 0.6, false],
    ["added p50 ≤ 1 ms at 500 req/s", (t) => addedAt500(t, "p50"), (x) => ms(x), (x) => x <= 1, true],
    ["added p99 ≤ 5 ms at 500 req/s", (t) => addedAt500(t, "p99"), (x) => ms(x), (x) => x <= 5, true],
    ["added time to first streamed byte ≤ 1 ms (p50)", ttfb, (x) => ms(x), (x) => x <= 1, true],
  ];
  for (const [label, figure, format, bound, lower] of rows) {
    const c = figure("gateway");
    const d = figure("peer");
    lines.push(`| ${label} | ${format(c)} | ${format(d)} | ${yes(verdict(c, d, bound, lower))} |`);
  }
  const idle = results.idle.find((r: IdleFigure) => r.target === "gateway");
  // Below 10,000 held (the file-descriptor limit), the verdict rests on the extrapolation.
  const at10k = idle === undefined || idle.opened === 0 ? undefined : idleAt10k(idle);
  const idleVerdict =
    idle === undefined || at10k === undefined
      ? undefined
      : idle.opened >= 10_000
        ? idle.rssHeldBytes <= 2 ** 30
        : at10k <= 2 ** 30;
  const peerIdle = results.idle.find((r: IdleFigure) => r.target === "peer");
  lines.push(
    `| 10,000 idle streams in ≤ 1 GiB RSS | ${idle === undefined ? "–" : `${count(idle.opened)} streams in ${(idle.rssHeldBytes / MiB).toFixed(0)} MiB${idle.opened < 10_000 && at10k !== undefined ? `; ${(at10k / MiB).toFixed(0)} MiB extrapolated to 10,000` : ""}`} | ${peerIdle === undefined ? "–" : `${count(peerIdle.opened)} streams in ${(peerIdle.rssHeldBytes / MiB).toFixed(0)} MiB`} | ${yes(idleVerdict)}${idleVerdict !== undefined && idle !== undefined && idle.opened < 10_000 ? " (extrapolated)" : ""} |`,
  );
  return lines;
}

/** Bars: saturation throughput per scenario, and added latency at fixed rates, for (b) and (c). */
function chart(results: BenchResults): string {
  const width = 880;
  const height = 330;
  const colors: Record<TargetId, string> = {
    direct: "#9aa5b1",
    proxy: "#3e7cb1",
    gateway: "#e07a1f",
    peer: "#6a4c93",
  };
  const parts: string[] = [];
  const text = (x: number, y: number, s: string, anchor = "middle", size = 12) =>
    `<text x="${x.toFixed(1)}" y="${y.toFixed(1)}" font-size="${size}" text-anchor="${anchor}" font-family="sans-serif">${s}</text>`;
  const panel = (
    x0: number,
    title: string,
    unit: string,
    groups: { label: string; bars: { target: TargetId; value: number | undefined }[] }[],
  ) => {
    const w = 400;
    const top = 40;
    const bottom = 270;
    const max = Math.max(1e-9, ...groups.flatMap((g) => g.bars.map((b) => b.value ?? 0)));
    parts.push(text(x0 + w / 2, 20, title, "middle", 14));
    parts.push(`<line x1="${x0}" y1="${bottom}" x2="${x0 + w}" y2="${bottom}" stroke="#333"/>`);
    const gw = w / groups.length;
    groups.forEach((group, gi) => {
      const bw = (gw - 16) / group.bars.length;
      group.bars.forEach((bar, bi) => {
        const value = bar.value ?? 0;
        const h = ((bottom - top) * value) / max;
        const x = x0 + gi * gw + 8 + bi * bw;
        parts.push(
          `<rect x="${x.toFixed(1)}" y="${(bottom - h).toFixed(1)}" width="${(bw - 2).toFixed(1)}" height="${h.toFixed(1)}" fill="${colors[bar.target]}"/>`,
        );
        if (bar.value !== undefined)
          parts.push(
            text(x + bw / 2, bottom - h - 3, value >= 100 ? count(value) : value.toFixed(2), "middle", 9),
          );
      });
      parts.push(text(x0 + gi * gw + gw / 2, bottom + 16, group.label, "middle", 11));
    });
    parts.push(text(x0, 34, unit, "start", 10));
  };
  panel(
    20,
    "Throughput at saturation",
    "requests/s (64 connections)",
    (["messages", "stream", "count_tokens", "image"] as const).map((scenario) => ({
      label: scenario,
      bars: TARGETS.map((target) => {
        const row = find(results.saturation, target, scenario);
        return { target, value: clean(row) ? row!.requestsPerSecond : undefined };
      }),
    })),
  );
  panel(
    460,
    "Added latency, open loop (non-streaming)",
    "ms over direct: p50 and p99 per rate",
    [100, 500, 1000].flatMap((rate) => {
      const at = (t: TargetId) => find(results.rates, t, "messages", (r) => r.targetRate === rate);
      return (["p50", "p99"] as const).map((q) => ({
        label: `${rate}/s ${q}`,
        bars: (["proxy", "gateway", "peer"] as const).map((target) => ({
          target,
          value: added(at(target), at("direct"), (r) => Math.max(0, r.latencyMs[q])),
        })),
      }));
    }),
  );
  TARGETS.forEach((target, i) => {
    parts.push(
      `<rect x="${20 + i * 170}" y="${height - 24}" width="12" height="12" fill="${colors[target]}"/>`,
    );
    parts.push(text(36 + i * 170, height - 14, TARGET_LABEL[target], "start", 12));
  });
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img">\n<title>Tollgate benchmarks: throughput at saturation and added latency at fixed rates, against direct, pass-through and Portkey</title>\n<rect width="100%" height="100%" fill="white"/>\n${parts.join("\n")}\n</svg>\n`;
}

/** The store phase: billed calls per second and added latency at 300 and 500/s, per store configuration. */
function storesSection(results: BenchResults): string {
  const rows = results.stores ?? [];
  if (rows.length === 0) return "Not run.";
  // Each row against SQLite's with as many accounts (runs before the many-account rows have one).
  const versusSqlite = (row: StoreFigure) => {
    const sqlite = rows.find(
      (r) => r.config.startsWith("sqlite-") && (r.accounts ?? 1) === (row.accounts ?? 1),
    )?.saturate.requestsPerSecond;
    return sqlite === undefined ? "–" : `${(row.saturate.requestsPerSecond / sqlite).toFixed(2)}×`;
  };
  const many = rows.find((r) => (r.accounts ?? 1) > 1)?.accounts;
  const added = (rate: RateResult | undefined, floor: RateResult | undefined, q: "p50" | "p99") =>
    rate === undefined || floor === undefined ? "–" : `+${ms(rate.latencyMs[q] - floor.latencyMs[q])}`;
  // The runs at 300/s last longer than the others from 2026-11-29 on; their first seconds alone too.
  const long = rows.find((r) => r.rate300?.head !== undefined)?.rate300;
  const headAdded = (r: StoreFigure, q: "p50" | "p99") =>
    r.rate300?.head === undefined || r.floor300?.head === undefined
      ? "–"
      : `+${ms(r.rate300.head.latencyMs[q] - r.floor300.head.latencyMs[q])}`;
  const runSeconds =
    long === undefined ? results.settings.seconds : Math.round(long.requests / long.targetRate);
  // Calls in each run at 300/s (2,400 in the 8 s runs before 2026-11-29).
  const calls300 = rows.find((r) => r.rate300 !== undefined)?.rate300?.requests ?? 2400;
  return [
    "The same billed `/v1/messages` call (a durable hold and settle each) on each store, every deployment",
    "started fresh with `tollgate serve` and `tollgate worker` and stopped after its turn. PostgreSQL is",
    "Debian's 15 on this machine (default settings, `fsync` on); two hosts share one PostgreSQL and the",
    "load is split between them as a balancer would (saturation: 32 connections each, latencies of the",
    "slower host; fixed rates: requests alternate). Added latency is the gateway's minus the pass-through's",
    "(b), measured just before each, at the same rate. Every process shares the machine's cores.",
    ...(results.settings.storesAlone === true
      ? [
          "The gateway target (c) and the peer (d), done with by then, are stopped before this phase: each",
          "deployment shares the cores with the pass-through, the fake upstream and the local chains only.",
        ]
      : []),
    "",
    ...(many === undefined
      ? [
          "Every call of this run is made with one account's key. On PostgreSQL the calls of one account take",
          "turns on its balance row, so these rows are one account's ceiling, not the deployment's; runs from",
          "2026-11-28 on also spread the calls over many accounts (`--store-accounts`, 64 by default), a key",
          'each, and show both ([store.md](store.md), "Several hosts against one").',
        ]
      : [
          "Each deployment is measured twice: with every call made with one account's key, and with the calls",
          `spread over ${many} accounts, a key each, taken in turn request by request. On PostgreSQL the calls`,
          "of one account take turns on its balance row, so the first is one account's ceiling (one busy",
          "account, whatever the hosts) and the second what the deployment serves to many accounts (the",
          "store's and the machine's own throughput, what another host can raise); ÷ SQLite's compares with",
          'SQLite with as many accounts ([store.md](store.md), "Several hosts against one").',
        ]),
    "",
    ...(long === undefined
      ? []
      : [
          `The runs at 300/s (the pass-through's and each deployment's) last ${runSeconds} s, the others ${results.settings.seconds} s: their`,
          `p99 is the ${Math.round(calls300 / 100)} slowest of ${count(calls300)} calls. The same runs' first ${long.head!.seconds} s alone, as the`,
          `${results.settings.seconds} s runs before 2026-11-29 measured them, are in the column after ([store.md](store.md), "Longer runs at 300/s").`,
          "",
        ]),
    `| store | billed calls/s (64 connections) | ÷ SQLite's | added p50 / p99 at 300/s${long === undefined ? "" : ` (${runSeconds} s) | … their first ${long.head!.seconds} s`} | added p50 / p99 at 500/s | non-2xx / errors |`,
    `|---|---|---|---|${long === undefined ? "" : "---|"}---|---|`,
    ...rows.map(
      (r) =>
        `| ${r.label} | ${count(r.saturate.requestsPerSecond)} | ` +
        `${versusSqlite(r)} | ` +
        `${added(r.rate300, r.floor300, "p50")} / ${added(r.rate300, r.floor300, "p99")} | ` +
        (long === undefined ? "" : `${headAdded(r, "p50")} / ${headAdded(r, "p99")} | `) +
        `${added(r.rate, r.floor, "p50")} / ${added(r.rate, r.floor, "p99")} | ` +
        `${r.saturate.non2xx + r.rate.non2xx + (r.rate300?.non2xx ?? 0)} / ${r.saturate.errors + r.rate.errors + (r.rate300?.errors ?? 0)} |`,
    ),
    ...(rows.some((r) => r.rate300?.disk !== undefined)
      ? [
          "",
          "Beside each run at 300/s, the hosts' CPU per call (every thread's, and their event loops' alone) and the",
          "disk: a probe in a process of its own wrote 8 KiB and called `fdatasync` every 50 ms in the store's",
          "folder (`bench/disk-probe.ts`). Every durable commit on this disk waits for such an fsync, on either",
          `store, so a slow one holds every call then in flight; the p99 of ${count(calls300)} calls is their ${Math.round(calls300 / 100)} slowest`,
          '([store.md](store.md), "The p99 at 300/s").',
          "",
          "| store | added p99 at 300/s | the hosts' CPU per call | their event loops' | fsyncs over 20 ms (the longest) |",
          "|---|---|---|---|---|",
          ...rows
            .filter((r) => r.rate300?.disk !== undefined)
            .map((r) => {
              const at = r.rate300!;
              return (
                `| ${r.label} | ${added(r.rate300, r.floor300, "p99")} | ${at.gatewayCpuMsPerCall?.toFixed(2)} ms | ` +
                `${at.gatewayMainCpuMsPerCall?.toFixed(2)} ms | ${at.disk!.over20Ms} of ${at.disk!.fsyncs} (${at.disk!.maxMs.toFixed(0)} ms) |`
              );
            }),
        ]
      : []),
    "",
    "Where a store's billed calls per second stay below a rate, that rate's row measures the queue that",
    "builds up, not what one call costs. Where PostgreSQL's time goes, and what was done about it, is in",
    '[store.md](store.md) ("Group commit" and the statement table).',
  ].join("\n");
}

/** Renders the Markdown page for one run. */
export function renderMarkdown(results: BenchResults, chartFile: string): string {
  const m = results.machine;
  const hs = results.holdSettle;
  const proxyCpu = find(results.saturation, "proxy", "messages")?.cpuPerRequestMs;
  const idleGateway = results.idle.find((r) => r.target === "gateway");
  return [
    "# Benchmarks",
    "",
    "<!-- Generated by `make bench` (bench/run.ts → bench/report.ts) from bench/results/latest.json. Do not edit by hand: re-run `make bench`, or `make bench-report` to re-render kept results. -->",
    "",
    `What ${results.gateway.name} adds to every call, measured side by side with the floor in one run on one machine:`,
    "**(a)** the client straight to a fake upstream, **(b)** through a minimal Node pass-through proxy (a",
    "few lines of `node:http` piping each request: the floor for any Node gateway), **(c)** through the",
    "gateway as a user runs it (`tollgate serve`, a real SQLite data dir with `synchronous=FULL`, a real",
    "key, credited funds, rate limits raised, a durable hold and settle on every billed call, logs at the",
    "default level written to a file, and its chains configured as in production: `TOLLGATE_CHAINS` and a",
    "master secret, the deposit watchers and settlement workers running in `tollgate worker` (a process of its own beside the gateway, as production runs them) against chain RPCs",
    "served by `tollgate dev-chains` in a process of its own), and **(d)** through Portkey's open-source",
    `gateway${results.peer === undefined ? " (not measured in this run)" : ` (\`${results.peer.package}\`, installed by the harness from npm into a temporary folder, on its Anthropic \`/v1/messages\` route, pointed at the same fake upstream; it does no billing)`}, a Node gateway users pick today.`,
    "",
    `- **Machine**: ${m.cores} cores (${m.cpuModel}), ${(m.memoryBytes / 2 ** 30).toFixed(0)} GiB, Node ${m.node}; load average ${m.loadBefore.map((x) => x.toFixed(2)).join(" / ")} at the start, ${m.loadAfter.map((x) => x.toFixed(2)).join(" / ")} at the end (the machine is shared: the figures are noisy). Every process (upstream, proxy, gateway, dev chains, load generator) shares these ${m.cores} cores.`,
    `- **Run**: ${results.startedAt} → ${results.finishedAt}, gateway commit \`${results.gateway.commit}\`, ${results.settings.seconds} s per measurement, fake upstream latency ${results.settings.upstreamLatencyMs} ms.${results.settings.quick ? " **Quick run** (harness check only)." : ""}`,
    "",
    `![throughput and added latency](${chartFile})`,
    "",
    "The profile-driven changes to the hot path, each with its before/after figures, are in",
    "[performance.md](performance.md).",
    "",
    "## The targets",
    "",
    ...targetsTable(results),
    "",
    "## Against the last kept run",
    "",
    "`make bench` compares this run's headline figures with the run kept before it (bench/guard.ts) and",
    "names each that moved by more than the noise (10%; added latencies also by at least 0.5 ms). A",
    "figure of the peer that moved too says the machine changed, not the gateway.",
    "",
    ...(results.guard === undefined
      ? ["Not compared (no earlier kept run)."]
      : ["```", ...results.guard, "```"]),
    "",
    "## Throughput at saturation",
    "",
    `autocannon, ${results.settings.saturationConnections} keep-alive connections, closed loop, ${results.settings.seconds} s per cell. CPU per request is the server process's utime + stime over the run divided by the requests it answered.`,
    "",
    ...saturationTable(results),
    "",
    "A ⚠ marks a target that answered errors: its rate is not a throughput figure. Image generation: the",
    "gateway takes the OpenAI images format (`image-2`, size 1K) and calls the fake upstream's Gemini",
    "`generateContent`; (a) and (b) send that Gemini request directly. (d) is measured on its Anthropic",
    "messages route only. Node 20's fetch makes a response's headers immutable and Portkey 1.15.2 appends",
    "to them, which fails every streamed call, so the harness preloads `bench/peer/mutable-fetch.mjs`",
    "into it: each response is copied once with the same status, headers and body.",
    "",
    "## Added latency at fixed rates (open loop)",
    "",
    "Non-streaming messages. Each request is due at start + i/rate whether or not earlier ones have",
    "answered; latency runs from when it was due (coordinated omission corrected, see below). Added =",
    "this target's percentile − the direct percentile in the same run.",
    "",
    ...ratesTable(results),
    "",
    "## Streaming: time to first and last byte",
    "",
    `Streaming messages at 100 requests/s, open loop. The fake upstream answers after ${results.settings.upstreamLatencyMs} ms with \`message_start\`, then 8 deltas 2 ms apart. First byte = the first body byte (the gateway flushes its headers before the first event, so the first body byte is the first event).`,
    "",
    ...ttfbTable(results),
    "",
    "## Memory with idle streams",
    "",
    `Streaming calls held open on a silent upstream (it sends \`message_start\` and then nothing), RSS of the server process from /proc. Each held stream costs the server two file descriptors (client and upstream side); this machine's limit is ${m.fdLimit.toLocaleString("en-US")} and cannot be raised here, so the harness holds at most ${Math.floor((m.fdLimit - 200) / 2).toLocaleString("en-US")}.`,
    "",
    ...idleTable(results),
    ...(idleGateway !== undefined && idleGateway.opened > 0 && idleGateway.opened < 10_000
      ? [
          "",
          `Extrapolated to 10,000 streams at the measured cost per stream: ${(idleAt10k(idleGateway) / MiB).toFixed(0)} MiB.`,
        ]
      : []),
    "",
    "## A durable hold + settle on its own",
    "",
    hs === undefined
      ? "Not run."
      : [
          `The billing core alone (\`Billing.holdNewCall\` then \`settleDelivered\`, two committed transactions, journal ${hs.journalMode}, synchronous=${hs.synchronous === "2" ? "FULL" : hs.synchronous}), one after another on a real file:`,
          "",
          "| | p50 | p99 |",
          "|---|---|---|",
          `| hold | ${ms(hs.holdMs.p50, 3)} | ${ms(hs.holdMs.p99, 3)} |`,
          `| settle | ${ms(hs.settleMs.p50, 3)} | ${ms(hs.settleMs.p99, 3)} |`,
          `| hold + settle | ${ms(hs.pairMs.p50, 3)} | ${ms(hs.pairMs.p99, 3)} |`,
          "",
          `${count(hs.pairsPerSecond)} pairs/s on one thread.${proxyCpu === undefined ? "" : ` Against (b)'s whole cost per request (${ms(proxyCpu, 3)} of CPU), a hold + settle is ${ratio(hs.pairMs.p50 / proxyCpu)}.`}`,
        ].join("\n"),
    "",
    "## The store: SQLite, PostgreSQL, several hosts",
    "",
    storesSection(results),
    "",
    "## How it is measured",
    "",
    "- `make bench` builds the gateway and the harness (`bench/`, compiled to `dist/bench/`), then runs",
    "  `bench/run.ts`. Each of the fake upstream (`bench/fake-upstream.ts`), the pass-through proxy",
    "  (`bench/passthrough-proxy.ts`), the gateway and every load run (`bench/load.ts`) is its own process.",
    "- **Fake upstream**: speaks the Anthropic messages format (JSON and SSE), count_tokens, and",
    "  Gemini `generateContent` with an inline PNG, after a fixed latency (`--latency-ms`, 20 by default) and",
    "  for streams at a fixed pace. A message containing `bench:silent` opens a stream and then stays silent.",
    "- **Saturation** uses [autocannon](https://github.com/mcollina/autocannon) (8.0.0, as a library in its",
    "  own process): N connections, each sending its next request when the previous answer is complete.",
    "- **Fixed rates are open loop.** autocannon's `overallRate` is not: it gives each connection a budget",
    "  of rate/connections requests per second, which the connection spends back to back at the start of",
    "  each second and then idles (closed loop, bursty), and it measures latency from the moment a request",
    "  is written — so a stall hides the requests it delayed (coordinated omission). wrk2 is not packaged",
    "  here. So `bench/load.ts` paces requests the wrk2 way on an undici pool: request *i* is due at",
    "  start + i/rate regardless of answers, latency counts from the due time, the pool has 512",
    "  connections (far above rate × latency, so sending never waits for a free connection), and the",
    "  run records how late sends were and the achieved rate. In runs from 2026-11-29 21:00 on, each",
    "  request goes through undici's `dispatch` with a handler of its own (no body stream, no promise per",
    "  request) and autocannon is loaded only by a saturating run: the load generator shares the cores",
    "  with what it measures, and so costs about a quarter less CPU per run at 300/s than before.",
    "- **Idle streams** are raw sockets from one load process, opened in waves of 200, each waiting for",
    "  `message_start` before it counts as open.",
    "- **Many accounts** (the store phase's `… accounts` rows): the harness creates the accounts, a key and",
    "  the same funds each, in one process (`bench/accounts.ts`, the CLI's commands without a process per",
    "  command: 64 accounts in ≈ 2.5 s, against ≈ 0.8 s per `tollgate` invocation, three per account), and",
    "  the load generator sends each request with the next key in turn, on every connection and host",
    "  (autocannon's `setupRequest`; the open loop takes request *i*'s key as *i* mod the number of keys).",
    "- Raw results of every run are kept in `bench/results/` (`latest.json` is the one this page shows).",
    "",
    "## Comparing another gateway",
    "",
    "```sh",
    "make build && npx tsc -p tsconfig.bench.json",
    "node dist/bench/run.js --upstream-port 9900 --target http://127.0.0.1:8080 --target-key KEY --target-name other",
    "```",
    "",
    "The other gateway must send Anthropic calls to the fake upstream on `http://127.0.0.1:9900` (start it",
    "before the harness, or start the harness first and point the gateway at the port once it is up; the",
    "harness warms up for a few seconds before it measures). Its results go to",
    "`bench/results/<time>.json` and `<time>-report/benchmarks.md`; docs/ keeps Tollgate's own figures.",
    "Options: `--seconds N`, `--streams N`, `--only saturate,rates,ttfb,idle,holdsettle,stores`, `--latency-ms N`,",
    "`--store-accounts N`, `--stores sqlite-1,postgres-1,postgres-2[-many]` (a subset of the store rows), `--quick`.",
    "",
  ].join("\n");
}

/** Writes `benchmarks.md` and `benchmarks.svg` into `dir` (or into `dir/name/`). */
export function writeReport(results: BenchResults, dir: string, name?: string): void {
  const out = name === undefined ? dir : join(dir, name);
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, "benchmarks.svg"), chart(results));
  writeFileSync(join(out, "benchmarks.md"), renderMarkdown(results, "benchmarks.svg"));
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === resolve(import.meta.filename)) {
  const file = process.argv[2] ?? resolve(import.meta.dirname, "../../bench/results/latest.json");
  const results = JSON.parse(readFileSync(file, "utf8")) as BenchResults;
  writeReport(results, resolve(import.meta.dirname, "../../docs"));
}

/** RSS at 10,000 held streams, extrapolated from the measured cost per stream. */
function idleAt10k(idle: IdleFigure): number {
  return idle.rssBeforeBytes + ((idle.rssHeldBytes - idle.rssBeforeBytes) / idle.opened) * 10_000;
}
