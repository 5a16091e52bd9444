/**
 * What the resolution spool costs (docs/store.md, "When the store refuses a settlement"): making
 * the preallocated file at a first start, appending `N` settles (each waits for its fdatasync),
 * reopening the file with them (what a start after a crash reads), and clearing it. Only a
 * settlement the store refused pays an append; every serving start pays an open.
 *
 * Usage: node dist/bench/spool-append.js [N] [DIR, on the disk to measure; default the OS temp dir]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { openResolutionSpool, type Resolution } from "../src/store/shared/resolution-spool.js";

const n = Number(process.argv[2] ?? 200);
const dir = mkdtempSync(join(process.argv[3] ?? tmpdir(), "tollgate-spool-bench-"));
const settle: Resolution = {
  kind: "settle",
  holdId: "hold_0123456789abcdef0123",
  charge: 54n,
  usage: {
    inputTokens: 4n,
    outputTokens: 10n,
    cacheWrite5mTokens: 0n,
    cacheWrite1hTokens: 0n,
    cacheReadTokens: 0n,
    images: 0,
  },
  now: Date.now(),
  charges: JSON.stringify({
    lines: [
      { kind: "input", tokens: "4" },
      { kind: "output", tokens: "10" },
    ],
  }),
};

const timed = async (work: () => Promise<unknown>) => {
  const start = performance.now();
  await work();
  return performance.now() - start;
};

try {
  let spool = await openResolutionSpool(dir);
  const create = await timed(async () => {
    await spool.close();
    rmSync(join(dir, "resolution-spool"), { recursive: true });
    spool = await openResolutionSpool(dir);
  });
  const appends: number[] = [];
  for (let i = 0; i < n; i++) appends.push(await timed(() => spool.append(settle)));
  await spool.close();
  const reopen = await timed(async () => {
    spool = await openResolutionSpool(dir);
  });
  const clear = await timed(() => spool.clearIfEmpty(() => true));
  await spool.close();
  appends.sort((a, b) => a - b);
  const at = (q: number) => appends[Math.min(appends.length - 1, Math.floor(q * appends.length))]!.toFixed(2);
  console.log(
    `spool: create ${create.toFixed(1)} ms; append p50 ${at(0.5)} ms, p99 ${at(0.99)} ms (${n}); ` +
      `open with ${n} records ${reopen.toFixed(1)} ms; clear ${clear.toFixed(1)} ms`,
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
