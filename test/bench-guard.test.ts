import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { drifts, guardText, headlineFigures } from "../bench/guard.js";
import type { BenchResults } from "../bench/results.js";

const kept = (): BenchResults =>
  JSON.parse(readFileSync(new URL("../bench/results/latest.json", import.meta.url), "utf8")) as BenchResults;

/**
 * A copy of `run` with the gateway's saturation row scaled, and its added p99 at 500/s (over the
 * direct p99 of the same run) set to `addedP99At500` ms when given.
 */
function changed(
  run: BenchResults,
  { cpu = 1, throughput = 1, addedP99At500 }: { cpu?: number; throughput?: number; addedP99At500?: number },
): BenchResults {
  const copy = structuredClone(run);
  const sat = copy.saturation.find((r) => r.target === "gateway" && r.scenario === "messages")!;
  Object.assign(sat, {
    cpuPerRequestMs: sat.cpuPerRequestMs! * cpu,
    requestsPerSecond: sat.requestsPerSecond * throughput,
  });
  if (addedP99At500 !== undefined) {
    const at500 = (target: string) =>
      copy.rates.find((r) => r.target === target && r.scenario === "messages" && r.targetRate === 500)!;
    const rate = at500("gateway");
    Object.assign(rate, {
      latencyMs: { ...rate.latencyMs, p99: at500("direct").latencyMs.p99 + addedP99At500 },
    });
  }
  return copy;
}

describe("bench guard: a full run against the last kept one", () => {
  it("reads every headline figure of a kept full run, gateway's and peer's", () => {
    const figures = headlineFigures(kept());
    expect(figures.map((f) => f.name)).toContain("gateway: CPU per non-streaming call");
    for (const f of figures.filter((f) => f.name.startsWith("gateway"))) expect(f.value).toBeTypeOf("number");
  });

  it("is silent when nothing moved, or moved within the noise", () => {
    expect(drifts(kept(), kept())).toEqual([]);
    expect(drifts(kept(), changed(kept(), { cpu: 1.09, throughput: 0.92 }))).toEqual([]);
    expect(guardText(kept(), kept())).toHaveLength(1);
  });

  it("names a figure that moved past 10%, worse or better, with both values", () => {
    const before = kept();
    const after = changed(before, { cpu: 1.25, throughput: 1.2 });
    const moved = drifts(before, after);
    expect(moved.map((d) => [d.name, d.direction])).toEqual(
      expect.arrayContaining([
        ["gateway: CPU per non-streaming call", "worse"],
        ["gateway: throughput", "better"],
      ]),
    );
    const cpu = moved.find((d) => d.name === "gateway: CPU per non-streaming call")!;
    expect(cpu.change).toBeCloseTo(0.25, 5);
    const text = guardText(before, after).join("\n");
    expect(text).toMatch(/WORSE\s+gateway: CPU per non-streaming call: .* \(\+25%\)/);
  });

  it("ignores added-latency changes under half a millisecond, reports larger ones", () => {
    const before = changed(kept(), { addedP99At500: 1 });
    const name = "gateway: added p99 at 500/s";
    // +40%, but 0.4 ms: under the floor.
    expect(drifts(before, changed(before, { addedP99At500: 1.4 })).map((d) => d.name)).not.toContain(name);
    // +100%, 1 ms: reported, and worse.
    const tail = drifts(before, changed(before, { addedP99At500: 2 })).find((d) => d.name === name);
    expect(tail?.direction).toBe("worse");
    expect(tail?.change).toBeCloseTo(1, 5);
  });
});
