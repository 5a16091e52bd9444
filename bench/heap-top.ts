/**
 * `node dist/bench/heap-top.js FILE [CALLS]`: the top allocation sites of a sampling heap profile
 * (`bench/run.ts --gc F --heap-profile FILE`, Chrome DevTools' `.heapprofile`). Prints two lists:
 * the functions that allocated the most themselves, and the gateway's own functions (frames under
 * dist/src/) charged with everything allocated below them that is not itself in the gateway's
 * code (a library's or Node's work done for that function). With CALLS, bytes are also given per
 * call.
 */
import { readFileSync } from "node:fs";

interface Frame {
  readonly functionName: string;
  readonly url: string;
  readonly lineNumber: number;
  readonly columnNumber: number;
}
interface ProfileNode {
  readonly callFrame: Frame;
  readonly selfSize: number;
  readonly children: ProfileNode[];
}

const [file, callsText] = process.argv.slice(2);
if (file === undefined) {
  console.error("usage: node dist/bench/heap-top.js FILE [CALLS]");
  process.exit(2);
}
const calls = callsText === undefined ? undefined : Number(callsText);
const profile = JSON.parse(readFileSync(file, "utf8")) as { head: ProfileNode };

const ours = (frame: Frame) => frame.url.includes("/dist/src/");
const name = (frame: Frame) =>
  `${frame.functionName || "(anonymous)"} ${frame.url.replace(/^.*\/(dist|node_modules)\//, "$1/")}:${frame.lineNumber + 1}`;
const self = new Map<string, number>();
const charged = new Map<string, number>();
let total = 0;
const walk = (node: ProfileNode, owner: string | undefined) => {
  const key = name(node.callFrame);
  const mine = ours(node.callFrame) ? key : owner;
  total += node.selfSize;
  self.set(key, (self.get(key) ?? 0) + node.selfSize);
  const chargedTo = mine ?? "(outside the gateway's code)";
  charged.set(chargedTo, (charged.get(chargedTo) ?? 0) + node.selfSize);
  for (const child of node.children) walk(child, mine);
};
walk(profile.head, undefined);

const show = (title: string, map: Map<string, number>) => {
  console.log(`\n${title}`);
  for (const [key, bytes] of [...map].sort((a, b) => b[1] - a[1]).slice(0, 30)) {
    const share = ((bytes * 100) / total).toFixed(1).padStart(5);
    const perCall = calls === undefined ? "" : `${(bytes / calls).toFixed(0).padStart(8)} B/call`;
    console.log(`${share}% ${(bytes / 2 ** 20).toFixed(1).padStart(8)} MiB ${perCall}  ${key}`);
  }
};
console.log(
  `sampled allocations: ${(total / 2 ** 20).toFixed(1)} MiB` +
    (calls === undefined ? "" : `, ${(total / calls / 1024).toFixed(1)} KiB per call over ${calls} calls`),
);
show("allocated by the function itself", self);
show("charged to the gateway's own frame nearest above", charged);
