import { execFile } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync } from "node:fs";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type GatewayProcess, startGateway, tempDir } from "../helpers/process.js";

const run = promisify(execFile);
const ROOT = resolve(import.meta.dirname, "../..");
/** What the build reads. The package is packed from a copy of these, never from the checkout's dist/. */
const SOURCES = ["package.json", "README.md", "tsconfig.json", "tsconfig.build.json", "scripts", "src"];
const PAGE = ["index.html", "app.js", "app.css"];

let work: ReturnType<typeof tempDir> | undefined;
let installed: string;
let tarballFiles: string[];
let gateway: GatewayProcess | undefined;

beforeAll(async () => {
  work = tempDir("tollgate-pack-");
  const project = join(work.path, "project");
  for (const name of SOURCES) cpSync(join(ROOT, name), join(project, name), { recursive: true });
  // The build's tools (tsc, esbuild) from the checkout's node_modules, as a local `npm install` leaves them.
  symlinkSync(join(ROOT, "node_modules"), join(project, "node_modules"), "dir");
  const packs = join(work.path, "packs");
  mkdirSync(packs);
  // `npm pack` runs the package's `prepare` (the one build) before it packs: no make involved.
  await run("npm", ["pack", "--pack-destination", packs], {
    cwd: project,
    env: { ...process.env, npm_config_update_notifier: "false", npm_config_fund: "false" },
    maxBuffer: 64 << 20,
  });
  const tarball = readdirSync(packs).find((name) => name.endsWith(".tgz"));
  if (tarball === undefined) throw new Error(`npm pack left no tarball in ${packs}`);
  tarballFiles = (await run("tar", ["-tzf", join(packs, tarball)], { maxBuffer: 64 << 20 })).stdout
    .split("\n")
    .filter((line) => line !== "");

  // Installed where npm installs a tarball (node_modules/<name>, the tarball's package/ folder).
  // Its dependencies are the checkout's own, linked rather than fetched: no registry, no native
  // compile, and what is under test is only what the tarball carries.
  installed = join(work.path, "app", "node_modules", "tollgate");
  mkdirSync(installed, { recursive: true });
  await run("tar", ["-xzf", join(packs, tarball), "-C", installed, "--strip-components=1"]);
  symlinkSync(join(ROOT, "node_modules"), join(installed, "node_modules"), "dir");
}, 300_000);

afterAll(async () => {
  await gateway?.stop();
  // rmSync removes the node_modules links themselves, never what they point at.
  work?.cleanup();
});

describe("a package made with npm pack and installed elsewhere", () => {
  it("carries the CLI and the built dashboard, and not the unit tests", () => {
    const pkg = JSON.parse(readFileSync(join(installed, "package.json"), "utf8")) as {
      bin: { tollgate: string };
    };
    expect(existsSync(join(installed, pkg.bin.tollgate))).toBe(true);
    for (const name of PAGE) expect(tarballFiles).toContain(`package/dist/dashboard/${name}`);
    expect(tarballFiles.filter((path) => /\.test\.|^package\/(test|src)\//.test(path))).toEqual([]);
  });

  it("serves /dashboard and its bundle from the installed tollgate", async () => {
    const pkg = JSON.parse(readFileSync(join(installed, "package.json"), "utf8")) as {
      bin: { tollgate: string };
    };
    gateway = await startGateway(
      { TOLLGATE_DATA_DIR: join(work!.path, "data") },
      60_000,
      "dev",
      join(installed, pkg.bin.tollgate),
    );

    const page = await fetch(`${gateway.facadeUrl}/dashboard`);
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toMatch(/^text\/html/);
    expect(await page.text()).toContain('src="/dashboard/assets/app.js"');

    for (const [name, type] of [
      ["app.js", /javascript/],
      ["app.css", /^text\/css/],
    ] as const) {
      const asset = await fetch(`${gateway.facadeUrl}/dashboard/assets/${name}`);
      expect(asset.status).toBe(200);
      expect(asset.headers.get("content-type")).toMatch(type);
      const body = Buffer.from(await asset.arrayBuffer());
      expect(body.length).toBeGreaterThan(0);
      expect(body.equals(readFileSync(join(installed, "dist", "dashboard", name)))).toBe(true);
    }
  }, 90_000);
});
