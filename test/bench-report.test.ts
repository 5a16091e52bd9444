import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { renderMarkdown } from "../bench/report.js";
import type { BenchResults, StoreFigure } from "../bench/results.js";

/** A kept full run from before the many-account rows (latest.json now has them). */
const kept = (): BenchResults =>
  JSON.parse(
    readFileSync(new URL("../bench/results/2026-11-28T15-49-45-866Z.json", import.meta.url), "utf8"),
  ) as BenchResults;

/** The store table's row for `label`, split into its cells. */
function row(page: string, label: string): string[] {
  const line = page.split("\n").find((l) => l.startsWith(`| ${label} |`));
  if (line === undefined) throw new Error(`no row ${label}`);
  return line.split("|").map((cell) => cell.trim());
}

describe("the store table (bench/report.ts)", () => {
  it("renders a run from before the many-account rows, each ratio against one-account SQLite", () => {
    const run = kept();
    const sqlite = run.stores!.find((r) => r.config === "sqlite-1")!.saturate.requestsPerSecond;
    const pg = run.stores!.find((r) => r.config === "postgres-1")!;
    const page = renderMarkdown(run, "benchmarks.svg");
    expect(row(page, "1 host, SQLite")[3]).toBe("1.00×");
    expect(row(page, "1 host, PostgreSQL")[3]).toBe(
      `${(pg.saturate.requestsPerSecond / sqlite).toFixed(2)}×`,
    );
    expect(page).toContain("Every call of this run is made with one account's key.");
  });

  it("compares each many-account row with SQLite with as many accounts", () => {
    const run = structuredClone(kept());
    const many = run.stores!.map(
      (r): StoreFigure => ({
        ...r,
        config: `${r.config}-many` as StoreFigure["config"],
        label: `${r.label}, 64 accounts`,
        accounts: 64,
        saturate: {
          ...r.saturate,
          requestsPerSecond: r.config === "sqlite-1" ? 500 : r.config === "postgres-1" ? 400 : 600,
        },
      }),
    );
    run.stores!.push(...many);
    const page = renderMarkdown(run, "benchmarks.svg");
    expect(row(page, "1 host, SQLite, 64 accounts")[3]).toBe("1.00×");
    expect(row(page, "1 host, PostgreSQL, 64 accounts")[3]).toBe("0.80×");
    expect(row(page, "2 hosts, PostgreSQL, 64 accounts")[3]).toBe("1.20×");
    expect(row(page, "1 host, SQLite")[3]).toBe("1.00×");
    expect(page).toContain("spread over 64 accounts, a key each");
  });

  it("shows the hosts' CPU and the disk's slow fsyncs beside each 300/s run that measured them, and no such table before", () => {
    const before = renderMarkdown(kept(), "benchmarks.svg");
    expect(before).not.toContain("fsyncs over 20 ms");
    const run = structuredClone(kept());
    const pg = run.stores!.find((r) => r.config === "postgres-1")! as {
      -readonly [K in keyof StoreFigure]: StoreFigure[K];
    };
    const at300 = pg.rate300 ?? pg.rate;
    pg.rate300 = {
      ...at300,
      gatewayCpuMsPerCall: 1.77,
      gatewayMainCpuMsPerCall: 1.65,
      disk: { fsyncs: 162, p50Ms: 0.1, p99Ms: 0.4, maxMs: 156.04, over20Ms: 2 },
    };
    pg.floor300 ??= pg.floor;
    const page = renderMarkdown(run, "benchmarks.svg").split("\n");
    const heading = page.findIndex((l) => l.includes("fsyncs over 20 ms (the longest)"));
    expect(heading).toBeGreaterThan(0);
    const cells = page
      .slice(heading)
      .find((l) => l.startsWith("| 1 host, PostgreSQL |"))!
      .split("|")
      .map((cell) => cell.trim());
    expect(cells.slice(3)).toEqual(["1.77 ms", "1.65 ms", "2 of 162 (156 ms)", ""]);
    // Only the rows that measured them.
    expect(page.slice(heading).some((l) => l.startsWith("| 1 host, SQLite |"))).toBe(false);
  });
});
