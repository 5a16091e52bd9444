/**
 * The guard of `make bench`: a full run compares its headline figures with the last kept run
 * (bench/results/latest.json before it is replaced) and says loudly which moved by more than the
 * noise. Each change to the hot path looked neutral on its own while the gateway got slower over a
 * few days (issue 30): the guard is what notices the sum.
 */
import type { BenchResults, RateFigure, SaturationFigure, Scenario, TargetId } from "./results.js";

/** A figure moves "loudly" past this share of its previous value: the run-to-run noise here. */
export const NOISE = 0.1;

/**
 * Added-latency figures are small differences of large numbers: below this many milliseconds of
 * change they are not reported whatever the share (0.2 → 0.3 ms is +50% and means nothing).
 */
export const LATENCY_FLOOR_MS = 0.5;

/** One headline figure of a run. */
export interface Figure {
  readonly name: string;
  /** "lower" when a smaller value is better (CPU, latency), "higher" for throughput. */
  readonly better: "lower" | "higher";
  readonly unit: "ms" | "req/s" | "×";
  readonly value: number | undefined;
  /** An added latency: changes under {@link LATENCY_FLOOR_MS} are not reported. */
  readonly latency?: true;
}

/** A figure that moved past the noise between two runs. */
export interface Drift {
  readonly name: string;
  readonly unit: Figure["unit"];
  readonly before: number;
  readonly after: number;
  /** Relative change, (after − before) / before. */
  readonly change: number;
  readonly direction: "worse" | "better";
}

function find<T extends { target: TargetId; scenario: Scenario }>(
  rows: readonly T[],
  target: TargetId,
  scenario: Scenario,
  extra: (row: T) => boolean = () => true,
): T | undefined {
  return rows.find(
    (row) =>
      row.target === target &&
      row.scenario === scenario &&
      extra(row) &&
      (row as { non2xx?: number }).non2xx === 0 &&
      (row as { errors?: number }).errors === 0,
  );
}

const minus = (a: number | undefined, b: number | undefined) =>
  a === undefined || b === undefined ? undefined : a - b;

/** The figures issue 30 sets targets for, of the gateway and of the peer, from one run. */
export function headlineFigures(run: BenchResults): Figure[] {
  const saturation = (target: TargetId): SaturationFigure | undefined =>
    find(run.saturation, target, "messages");
  const at = (target: TargetId, rate: number): RateFigure | undefined =>
    find(run.rates, target, "messages", (r) => r.targetRate === rate);
  const firstByte = (target: TargetId) => find(run.ttfb, target, "stream")?.firstByteMs.p50;
  const proxy = saturation("proxy")?.requestsPerSecond;
  const figures: Figure[] = [];
  for (const target of ["gateway", "peer"] as const) {
    const label = target === "gateway" ? "gateway" : "peer";
    const sat = saturation(target);
    figures.push(
      {
        name: `${label}: CPU per non-streaming call`,
        better: "lower",
        unit: "ms",
        value: sat?.cpuPerRequestMs,
      },
      { name: `${label}: throughput`, better: "higher", unit: "req/s", value: sat?.requestsPerSecond },
      {
        name: `${label}: throughput ÷ pass-through's`,
        better: "higher",
        unit: "×",
        value: sat === undefined || proxy === undefined ? undefined : sat.requestsPerSecond / proxy,
      },
    );
    for (const rate of [100, 500]) {
      const direct = at("direct", rate)?.latencyMs;
      const row = at(target, rate)?.latencyMs;
      figures.push({
        name: `${label}: added p50 at ${rate}/s`,
        better: "lower",
        unit: "ms",
        latency: true,
        value: minus(row?.p50, direct?.p50),
      });
      if (rate === 500)
        figures.push({
          name: `${label}: added p99 at ${rate}/s`,
          better: "lower",
          unit: "ms",
          latency: true,
          value: minus(row?.p99, direct?.p99),
        });
    }
    figures.push({
      name: `${label}: added first streamed byte (p50)`,
      better: "lower",
      unit: "ms",
      latency: true,
      value: minus(firstByte(target), firstByte("direct")),
    });
  }
  return figures;
}

/** The headline figures that moved by more than the noise from `before` to `after`. */
export function drifts(before: BenchResults, after: BenchResults): Drift[] {
  const previous = new Map(headlineFigures(before).map((f) => [f.name, f.value]));
  const moved: Drift[] = [];
  for (const figure of headlineFigures(after)) {
    const was = previous.get(figure.name);
    const now = figure.value;
    if (was === undefined || now === undefined) continue;
    const delta = now - was;
    if (figure.latency === true && Math.abs(delta) < LATENCY_FLOOR_MS) continue;
    const change = was === 0 ? Number.POSITIVE_INFINITY * Math.sign(delta) : delta / Math.abs(was);
    if (!(Math.abs(change) > NOISE)) continue;
    const worse = figure.better === "lower" ? delta > 0 : delta < 0;
    moved.push({
      name: figure.name,
      unit: figure.unit,
      before: was,
      after: now,
      change,
      direction: worse ? "worse" : "better",
    });
  }
  return moved;
}

const show = (value: number, unit: Figure["unit"]) =>
  unit === "ms"
    ? `${value.toFixed(2)} ms`
    : unit === "×"
      ? `${value.toFixed(2)}×`
      : `${value.toFixed(0)} req/s`;

/** The guard's verdict as lines of text: a banner when anything moved, one line when nothing did. */
export function guardText(before: BenchResults, after: BenchResults): string[] {
  const moved = drifts(before, after);
  const against = `the last kept run (${before.startedAt}, commit ${before.gateway.commit})`;
  if (moved.length === 0)
    return [`bench guard: no headline figure moved by more than ${NOISE * 100}% against ${against}.`];
  const worse = moved.filter((d) => d.direction === "worse").length;
  const lines = [
    `bench guard: ${moved.length} headline figure(s) moved by more than ${NOISE * 100}% against ${against}` +
      (worse > 0 ? ` — ${worse} WORSE:` : ":"),
  ];
  for (const d of moved) {
    const sign = d.change > 0 ? "+" : "";
    lines.push(
      `  ${d.direction === "worse" ? "WORSE " : "better"}  ${d.name}: ${show(d.before, d.unit)} → ${show(d.after, d.unit)} (${sign}${(d.change * 100).toFixed(0)}%)`,
    );
  }
  return lines;
}
