import { readFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "../..");

/*
 * No generator function is made per call. V8 gives each closure of a generator function (sync or
 * async, a nested `function*` or an object literal's `*method()`) its own map when it is first
 * called, and maps live in old space: the map holds the closure, so everything the call's
 * closure reaches survives every scavenge until the next full collection. One such closure per
 * call made each scavenge at 300 calls/s copy and promote 2-4 MB (docs/performance.md §28).
 * Generator functions are declared at module level or as class methods, both shared by every
 * call; the few made once per process (a service's implementation, built by its factory) are
 * listed here by name.
 */
const MADE_ONCE: ReadonlySet<string> = new Set([
  // The inference service's implementation, made once by createInferenceService.
  "src/core/inference/inference-service.ts: responses",
  "src/core/inference/inference-service.ts: createMessage",
]);

/** `file: name` of every generator function in `file` nested in another function. */
function nestedGenerators(file: string): string[] {
  const path = relative(ROOT, file);
  const source = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.ES2022, true);
  const found: string[] = [];
  const visit = (node: ts.Node, insideFunction: boolean): void => {
    const isFunction =
      ts.isFunctionLike(node) && !ts.isTypeNode(node) && "body" in node && node.body !== undefined;
    const generator = isFunction && (node as ts.FunctionLikeDeclaration).asteriskToken !== undefined;
    // A class's methods are its prototype's: one function for every instance.
    const shared = ts.isMethodDeclaration(node) && ts.isClassLike(node.parent);
    if (generator && insideFunction && !shared) {
      const name = (node as ts.FunctionLikeDeclaration).name;
      found.push(`${path}: ${name === undefined ? "(anonymous)" : name.getText(source)}`);
    }
    ts.forEachChild(node, (child) => visit(child, insideFunction || (isFunction && !shared)));
  };
  visit(source, false);
  return found;
}

function sourceFiles(): string[] {
  const listed = ts.sys.readDirectory(join(ROOT, "src"), [".ts"], undefined, undefined);
  return listed.filter((file) => !file.endsWith(".test.ts") && !file.endsWith(".d.ts"));
}

describe("generator functions", () => {
  it("none is made per call in src/: each is declared at module level, as a class method, or listed", () => {
    const nested = sourceFiles().flatMap(nestedGenerators);
    expect(nested.filter((entry) => !MADE_ONCE.has(entry))).toEqual([]);
    // The list stays true: each entry still names a nested generator function.
    expect([...MADE_ONCE].filter((entry) => !nested.includes(entry))).toEqual([]);
  });

  it("finds one made per call (the check can fail)", () => {
    const probe = join(ROOT, "test/architecture/fixtures/per-call-generator.ts");
    expect(nestedGenerators(probe)).toEqual([
      "test/architecture/fixtures/per-call-generator.ts: inner",
      "test/architecture/fixtures/per-call-generator.ts: [Symbol.asyncIterator]",
    ]);
  });
});
