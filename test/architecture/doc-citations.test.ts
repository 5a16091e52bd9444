import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "../..");

function sourceFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === "gen" ? [] : sourceFiles(path);
    return entry.name.endsWith(".ts") ? [path] : [];
  });
}

/** A document's section titles (its Markdown headings, without the #s). */
function headings(doc: string): Set<string> {
  const text = readFileSync(join(ROOT, doc), "utf8");
  return new Set([...text.matchAll(/^#+\s+(.+?)\s*$/gm)].map((m) => m[1]!));
}

/**
 * What a source text cites: `docs/x.md`, optionally with a section (`docs/x.md, "Title"` or
 * `docs/x.md ("Title"`), and any citation of a document the repository does not have.
 */
function citations(source: string): { doc: string; section: string | undefined }[] {
  return [...source.matchAll(/\bdocs\/([A-Za-z0-9_-]+\.md)(?:(?:, | \()"([^"]+)")?/g)].map((m) => ({
    doc: `docs/${m[1]}`,
    section: m[2],
  }));
}

/** Every source and test file but this one (its own examples are not citations). */
const FILES = [...sourceFiles("src"), ...sourceFiles("test")].filter(
  (file) => !file.endsWith("doc-citations.test.ts"),
);

describe("comments cite documents inside the repository", () => {
  it("every docs/ page cited exists, and every cited section is one of its headings", () => {
    const missing: string[] = [];
    for (const file of FILES) {
      for (const { doc, section } of citations(readFileSync(join(ROOT, file), "utf8"))) {
        if (!existsSync(join(ROOT, doc))) missing.push(`${file}: ${doc}`);
        else if (section !== undefined && !headings(doc).has(section))
          missing.push(`${file}: ${doc}, "${section}"`);
      }
    }
    expect(missing).toEqual([]);
  });

  it("no comment cites the PROTOCOLS page the repository does not have", () => {
    const citing = FILES.filter((file) => readFileSync(join(ROOT, file), "utf8").includes("PROTOCOLS"));
    expect(citing).toEqual([]);
  });

  it("reads citations with and without a section", () => {
    expect(
      citations('(docs/protocols.md, "Errors") and docs/store.md ("When the disk is full") and docs/x402.md'),
    ).toEqual([
      { doc: "docs/protocols.md", section: "Errors" },
      { doc: "docs/store.md", section: "When the disk is full" },
      { doc: "docs/x402.md", section: undefined },
    ]);
  });
});
