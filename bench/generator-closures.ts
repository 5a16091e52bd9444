/**
 * What a generator function made per call costs the young generation (docs/performance.md §28):
 * the same 300 calls a second for 4 s, each holding ~10 KB, with its generator function shared
 * (declared at module level) or made per call (a nested `async function*`), and with no
 * generator at all. Prints, for each, the bytes its scavenges promoted to old space and their
 * pauses, from `--trace-gc-nvp` of a child process per shape.
 *
 *   node dist/bench/generator-closures.js
 */
import { spawnSync } from "node:child_process";

const SHAPES = ["none", "shared", "per-call"] as const;
type Shape = (typeof SHAPES)[number];

/** One call: 200 small objects, held until the call's iteration ends. */
async function call(shape: Shape): Promise<number> {
  const held = Array.from({ length: 200 }, (_, i) => ({ i, text: `item ${i}` }));
  if (shape === "none") {
    await Promise.resolve();
    return held.length;
  }
  const items =
    shape === "shared"
      ? yieldingLength(held)
      : (async function* perCall() {
          yield held.length;
        })();
  let total = 0;
  for await (const n of items) total += n;
  return total;
}

async function* yieldingLength(held: readonly unknown[]): AsyncGenerator<number> {
  yield held.length;
}

function child(shape: Shape): void {
  const timer = setInterval(() => {
    for (let i = 0; i < 3; i++) void call(shape);
  }, 10);
  setTimeout(() => clearInterval(timer), 4000);
}

function parent(): void {
  for (const shape of SHAPES) {
    const run = spawnSync(
      process.execPath,
      ["--trace-gc-nvp", "--max-semi-space-size=32", import.meta.filename, shape],
      { encoding: "utf8" },
    );
    const scavenges = [...run.stdout.matchAll(/pause=([\d.]+) .*? gc=s .*? promoted=(\d+)/g)].map((m) => ({
      pauseMs: Number(m[1]),
      promoted: Number(m[2]),
    }));
    const promoted = scavenges.reduce((sum, s) => sum + s.promoted, 0);
    const pauses = scavenges.map((s) => s.pauseMs).sort((a, b) => a - b);
    console.log(
      `${shape.padEnd(8)} ${scavenges.length} scavenges, promoted ${(promoted / 2 ** 20).toFixed(1)} MiB ` +
        `in all, pause p50 ${(pauses[Math.floor(pauses.length / 2)] ?? 0).toFixed(1)} ms, ` +
        `max ${(pauses.at(-1) ?? 0).toFixed(1)} ms`,
    );
  }
}

const shape = process.argv[2] as Shape | undefined;
if (shape === undefined) parent();
else child(shape);
