import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "../..");
const DOC = readFileSync(join(ROOT, "docs/architecture.md"), "utf8");

/** One stop of a walk table: `| n | `path` | function | ↩ |`. */
interface Stop {
  readonly n: number;
  readonly file: string;
  readonly marked: boolean;
}

/** The stops of the walk's tables in `text`, in order. */
function stops(text: string): Stop[] {
  return [...text.matchAll(/^\| (\d+) \| `([^`]+)` \| [^|]+\|([^|]*)\|$/gm)].map((m) => ({
    n: Number(m[1]),
    file: m[2]!,
    marked: m[3]!.includes("↩"),
  }));
}

/** The figures of a walk: stops, distinct files, and stops in a file the walk had already left. */
function figures(walk: readonly Stop[]) {
  const seen = new Set<string>();
  let returns = 0;
  walk.forEach((stop, i) => {
    if (seen.has(stop.file) && walk[i - 1]?.file !== stop.file) returns++;
    seen.add(stop.file);
  });
  return { stops: walk.length, files: seen.size, returns };
}

const before = stops(
  DOC.slice(DOC.indexOf("### Before the reshaping"), DOC.indexOf("### After the reshaping")),
);

describe("docs/architecture.md, the walk of one paid call", () => {
  it("numbers its stops in order and names only files that exist", () => {
    expect(before.length).toBeGreaterThan(50);
    expect(before.map((s) => s.n)).toEqual(before.map((_, i) => i + 1));
    expect(before.filter((s) => !existsSync(join(ROOT, "src", s.file))).map((s) => s.file)).toEqual([]);
  });

  it("marks exactly the returns, and states the figures its tables count", () => {
    const seen = new Set<string>();
    const wrong = before.filter((stop, i) => {
      const isReturn = seen.has(stop.file) && before[i - 1]?.file !== stop.file;
      seen.add(stop.file);
      return isReturn !== stop.marked;
    });
    expect(wrong.map((s) => s.n)).toEqual([]);
    const { stops: n, files, returns } = figures(before);
    expect(DOC).toContain(
      `**Figures: ${n} stops, ${files} files, ${returns} returns to a file already left.**`,
    );
    expect(DOC).toContain(`| **the whole call** | **${n}** | **${files}** | **${returns}** |`);
  });

  it("counts a return only for a file left earlier", () => {
    const walk = ["a", "b", "a", "c", "b", "b"].map((file, i) => ({ n: i + 1, file, marked: false }));
    expect(figures(walk)).toEqual({ stops: 6, files: 3, returns: 2 });
  });
});
