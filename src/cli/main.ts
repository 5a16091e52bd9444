#!/usr/bin/env node
/**
 * The `tollgate` command. `serve` first decides whether to re-run itself in a child node with its
 * own semi-space (docs/performance.md §21), before anything else is loaded: the launcher it
 * leaves running beside the gateway stays a bare node process.
 * Everything else, `serve`'s own checks included, is the CLI's (run-cli.ts).
 */
import { serveRelaunch } from "./semi-space.js";

const argv = process.argv.slice(2);
const launched = argv.length === 1 && argv[0] === "serve" ? await serveRelaunch() : undefined;
if (launched !== undefined) process.exitCode = launched;
else {
  const { runCli } = await import("./run-cli.js");
  const code = await runCli(argv);
  if (code >= 0) process.exitCode = code;
}
