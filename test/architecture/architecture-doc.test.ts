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

/**
 * The figures of a walk: stops, distinct files, and stops in a file the walk had already left.
 * `earlier`: the stops before these (a stage's returns count files left in earlier stages).
 */
function figures(walk: readonly Stop[], earlier: readonly Stop[] = []) {
  const seen = new Set(earlier.map((stop) => stop.file));
  let previous = earlier.at(-1)?.file;
  let returns = 0;
  for (const stop of walk) {
    if (seen.has(stop.file) && previous !== stop.file) returns++;
    seen.add(stop.file);
    previous = stop.file;
  }
  return { stops: walk.length, files: new Set(walk.map((stop) => stop.file)).size, returns };
}

/** A walk's section of the document: its text, its stops, and its stages (a bold title, then a table). */
function walk(from: string, to: string | undefined) {
  const start = DOC.indexOf(from);
  const end = to === undefined ? DOC.length : DOC.indexOf(to);
  expect(start).toBeGreaterThanOrEqual(0);
  expect(end).toBeGreaterThan(start);
  const text = DOC.slice(start, end);
  const parts = text.split(/^\*\*(\d\. [^*]+)\*\*$/m);
  const stages = [];
  for (let i = 1; i < parts.length; i += 2) stages.push({ title: parts[i]!, stops: stops(parts[i + 1]!) });
  return { text, stops: stops(text), stages };
}

const walks = {
  before: walk("### Before the reshaping", "### After the reshaping"),
  after: walk("### After the reshaping", undefined),
};

describe("docs/architecture.md, the walk of one paid call", () => {
  describe.each(Object.entries(walks))("%s the reshaping", (_name, { text, stops: all, stages }) => {
    it("numbers its stops in order and names only files that exist", () => {
      expect(all.length).toBeGreaterThan(50);
      expect(all.map((s) => s.n)).toEqual(all.map((_, i) => i + 1));
      expect(all.filter((s) => !existsSync(join(ROOT, "src", s.file))).map((s) => s.file)).toEqual([]);
    });

    it("marks exactly the returns, and states the figures its tables count", () => {
      const seen = new Set<string>();
      const wrong = all.filter((stop, i) => {
        const isReturn = seen.has(stop.file) && all[i - 1]?.file !== stop.file;
        seen.add(stop.file);
        return isReturn !== stop.marked;
      });
      expect(wrong.map((s) => s.n)).toEqual([]);
      const { stops: n, files, returns } = figures(all);
      expect(new Set(all.map((s) => s.file)).size).toBe(seen.size);
      expect(text).toContain(
        `**Figures: ${n} stops, ${files} files, ${returns} returns to a file already left.**`,
      );
      expect(text).toContain(`| **the whole call** | **${n}** | **${files}** | **${returns}** |`);
    });

    it("states each stage's figures as its table counts them", () => {
      expect(stages.length).toBe(7);
      expect(stages.flatMap((stage) => stage.stops)).toEqual(all);
      let earlier: Stop[] = [];
      for (const { title, stops: own } of stages) {
        const { stops: n, files, returns } = figures(own, earlier);
        expect(text).toContain(`| ${title} | ${n} | ${files} | ${returns} |`);
        earlier = [...earlier, ...own];
      }
    });
  });

  it("compares the two walks with the figures their tables count", () => {
    const before = figures(walks.before.stops);
    const after = figures(walks.after.stops);
    // Prose wraps: compared with its line breaks as spaces.
    const prose = walks.after.text.replace(/\s+/g, " ");
    expect(prose).toContain(
      `${after.stops} stops against ${before.stops}, ${after.files} files against ${before.files}, ` +
        `${after.returns} returns against ${before.returns}`,
    );
    // The doc says which way the walk went; it must be the way the tables count.
    const shorter = after.stops < before.stops && after.returns < before.returns;
    expect(prose).toContain(shorter ? "The walk is shorter" : "The walk is longer, not shorter");
  });

  // Issue 30's "Done when: the walk is shorter".
  it("the walk after the reshaping has fewer stops and fewer returns than the walk before it", () => {
    const before = figures(walks.before.stops);
    const after = figures(walks.after.stops);
    expect(after.stops).toBeLessThan(before.stops);
    expect(after.returns).toBeLessThan(before.returns);
  });

  it("counts a return only for a file left earlier", () => {
    const walk = ["a", "b", "a", "c", "b", "b"].map((file, i) => ({ n: i + 1, file, marked: false }));
    expect(figures(walk)).toEqual({ stops: 6, files: 3, returns: 2 });
    expect(figures(walk.slice(3), walk.slice(0, 3))).toEqual({ stops: 3, files: 2, returns: 1 });
  });
});
