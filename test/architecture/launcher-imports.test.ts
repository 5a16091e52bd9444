import { existsSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

/*
 * `tollgate serve` re-runs itself in a child node with its own semi-space, and the launcher stays
 * running beside the gateway for as long as it serves (src/cli/semi-space.ts). It decides before
 * the CLI loads anything (src/cli/main.ts), so that it stays a bare node process: 44 MB of RSS
 * where it was 73 MB when it decided after loading the CLI's commands. What node evaluates
 * before that decision is the static import closure of main.ts; this keeps it free of packages.
 */

const SRC = resolve(import.meta.dirname, "../../src");

/** The modules a source text loads when it is evaluated: static imports and re-exports, not types. */
function staticImports(source: string): string[] {
  const found: string[] = [];
  for (const m of source.matchAll(/^\s*(import|export)\s+(type\s+)?[^;]*?\sfrom\s*["']([^"']+)["']/gm))
    if (m[2] === undefined) found.push(m[3]!);
  for (const m of source.matchAll(/^\s*import\s*["']([^"']+)["']/gm)) found.push(m[1]!);
  return found;
}

/** The source files (under src/) and the bare specifiers `entry` loads before its first line runs. */
function closure(entry: string): { files: string[]; bare: string[] } {
  const files = new Set<string>();
  const bare = new Set<string>();
  const visit = (file: string) => {
    if (files.has(file)) return;
    files.add(file);
    for (const specifier of staticImports(readFileSync(join(SRC, file), "utf8"))) {
      if (!specifier.startsWith(".")) {
        bare.add(specifier);
        continue;
      }
      const target = relative(SRC, resolve(dirname(join(SRC, file)), specifier)).replace(/\.js$/, ".ts");
      if (!existsSync(join(SRC, target))) throw new Error(`${file} imports ${specifier}: no src/${target}`);
      visit(target);
    }
  };
  visit(entry);
  return { files: [...files].sort(), bare: [...bare].sort() };
}

describe("the serve launcher", () => {
  it("decides on a re-run before any package is loaded: main.ts's static imports are node built-ins and a few leaves", () => {
    const { files, bare } = closure("cli/main.ts");
    expect(bare.filter((specifier) => !specifier.startsWith("node:"))).toEqual([]);
    expect(files).toEqual(["cli/main.ts", "cli/semi-space.ts", "config/read.ts", "core/billing/money.ts"]);
  });

  it("sees what a fat entry would load (the walk is not blind)", () => {
    const { files, bare } = closure("cli/run-cli.ts");
    expect(bare).toContain("@connectrpc/connect");
    expect(files.length).toBeGreaterThan(20);
  });
});
