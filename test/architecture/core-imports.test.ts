import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const SRC = resolve(import.meta.dirname, "../../src");

/**
 * What the core may not depend on: the adapters that implement its ports, the stand-ins, the
 * facade, and the configuration (the composition root reads it and passes values in).
 */
const FORBIDDEN = ["store/", "upstream/", "chains/", "limits/", "dev/", "facade/", "config.ts", "runtime.ts"];

/** Every module specifier of a source text: static imports and re-exports, and dynamic imports. */
function specifiers(source: string): string[] {
  const found: string[] = [];
  const patterns = [
    /\b(?:import|export)\s[^;]*?\sfrom\s*["']([^"']+)["']/g,
    /\bimport\s*\(\s*["']([^"']+)["']\s*\)/g,
  ];
  for (const pattern of patterns) for (const match of source.matchAll(pattern)) found.push(match[1]!);
  return found;
}

/** The forbidden imports of one file at `file` (a path under src/), as "specifier → src path". */
function forbiddenImports(file: string, source: string): string[] {
  const offending: string[] = [];
  for (const specifier of specifiers(source)) {
    if (!specifier.startsWith(".")) continue;
    const target = relative(SRC, resolve(dirname(join(SRC, file)), specifier)).replace(/\.js$/, ".ts");
    if (FORBIDDEN.some((f) => (f.endsWith("/") ? target.startsWith(f) : target === f))) {
      offending.push(`${specifier} → src/${target}`);
    }
  }
  return offending;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(join(SRC, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith(".ts") ? [path] : [];
  });
}

describe("the core's dependencies", () => {
  it("no file in src/core imports store/, upstream/, chains/, limits/, dev/, facade/ or config.ts", () => {
    const files = sourceFiles("core");
    expect(files.length).toBeGreaterThan(40);
    const violations = files.flatMap((file) =>
      forbiddenImports(file, readFileSync(join(SRC, file), "utf8")).map((v) => `src/${file}: ${v}`),
    );
    expect(violations).toEqual([]);
  });

  it("the check catches each kind of forbidden import", () => {
    const source = [
      'import { AuthRepository } from "../../store/auth-repository.js";',
      'import type { Config } from "../../config.js";',
      'import { parseHeader } from "../header.js";',
      'export { ChainsRuntime } from "../../chains/chains-runtime.js";',
      'const m = await import("../../upstream/anthropic/client.js");',
      "import {\n  memoryRateLimiter,\n} from '../../limits/memory.js';",
      'import { money } from "./money.js";',
      'import { create } from "@bufbuild/protobuf";',
    ].join("\n");
    expect(forbiddenImports("core/billing/example.ts", source)).toEqual([
      "../../store/auth-repository.js → src/store/auth-repository.ts",
      "../../config.js → src/config.ts",
      "../../chains/chains-runtime.js → src/chains/chains-runtime.ts",
      "../../limits/memory.js → src/limits/memory.ts",
      "../../upstream/anthropic/client.js → src/upstream/anthropic/client.ts",
    ]);
  });
});
