import { createHash } from "node:crypto";
import { existsSync, mkdirSync, renameSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * The module a worker thread runs, given the URL of the thread's source module (`./x.js`
 * beside the caller, written as `new URL("./x.js", import.meta.url)`). Built, that is the file
 * itself. Run from the TypeScript sources (the test runner), Node cannot load a `.ts` thread,
 * so the source is bundled once per version with esbuild (a dev dependency) into
 * node_modules/.cache, where its imports resolve as the sources' do.
 */
export async function threadEntry(module: URL): Promise<URL | string> {
  if (!module.pathname.endsWith(".js") || existsSync(module)) return module;
  const source = fileURLToPath(module).replace(/\.js$/, ".ts");
  if (!existsSync(source)) return module;
  const { buildSync } = await import("esbuild");
  const bundle = buildSync({
    entryPoints: [source],
    bundle: true,
    platform: "node",
    format: "esm",
    packages: "external",
    write: false,
  });
  const code = bundle.outputFiles[0]!.text;
  const root = fileURLToPath(new URL("..", import.meta.url));
  const digest = createHash("sha256").update(code).digest("hex").slice(0, 16);
  const name = source.slice(source.lastIndexOf("/") + 1).replace(/\.ts$/, "");
  const out = join(root, "node_modules", ".cache", "tollgate", `${name}.${digest}.mjs`);
  if (!existsSync(out)) {
    mkdirSync(dirname(out), { recursive: true });
    // Written aside and renamed: two test processes may bundle at once.
    writeFileSync(`${out}.${process.pid}`, code);
    renameSync(`${out}.${process.pid}`, out);
  }
  return out;
}
