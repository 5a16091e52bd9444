#!/usr/bin/env node
/**
 * The one build: bundles the dashboard page into dist/dashboard (esbuild; no CDN at run time) and
 * compiles the TypeScript in src/ into dist/src (tsc -p tsconfig.build.json). `npm run build`,
 * npm's `prepare` (a local `npm install`, `npm pack`, `npm publish`) and `make build` all run
 * this file, so a gateway built or packed any of those ways serves /dashboard.
 *
 *   node scripts/build.mjs             everything
 *   node scripts/build.mjs dashboard   only the dashboard page (`make dashboard`)
 */
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const require = createRequire(join(root, "package.json"));

/** esbuild bundles src/dashboard/main.ts; the page's HTML and CSS are copied beside it. */
async function buildDashboard() {
  const out = join(root, "dist", "dashboard");
  mkdirSync(out, { recursive: true });
  const { build } = await import("esbuild");
  await build({
    absWorkingDir: root,
    entryPoints: ["src/dashboard/main.ts"],
    bundle: true,
    format: "esm",
    target: "es2022",
    minify: true,
    logLevel: "warning",
    outfile: join(out, "app.js"),
  });
  for (const name of ["index.html", "app.css"]) {
    copyFileSync(join(root, "src", "dashboard", name), join(out, name));
  }
}

/** tsc from the project's own typescript, in a child so its exit code is the build's. */
function compileTypeScript() {
  const tsc = require.resolve("typescript/bin/tsc");
  const result = spawnSync(process.execPath, [tsc, "-p", "tsconfig.build.json"], {
    cwd: root,
    stdio: "inherit",
  });
  if (result.error !== undefined) throw result.error;
  if (result.status !== 0) {
    console.error(`tsc -p tsconfig.build.json failed (exit ${result.status ?? result.signal})`);
    process.exit(1);
  }
}

const what = process.argv[2] ?? "all";
if (what !== "all" && what !== "dashboard") {
  console.error(`usage: node scripts/build.mjs [dashboard]  (unknown target: ${what})`);
  process.exit(2);
}
await buildDashboard();
if (what === "all") compileTypeScript();
