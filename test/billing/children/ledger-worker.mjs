// A second OS process on the same database file, built from the compiled dist/ (run
// `npx tsc -p tsconfig.build.json` first). Reads one JSON job from argv, prints "ready", waits
// for a line on stdin (so several workers start together), runs the job and prints its result.
import { createInterface } from "node:readline";
import { Billing } from "../../../dist/src/core/billing/billing.js";
import { defaultPriceCatalog } from "../../../dist/src/core/billing/default-catalog.js";
import { defaultChainRegistry } from "../../../dist/src/core/billing/default-chains.js";
import { openDatabase } from "../../../dist/src/store/database.js";
import { LedgerRepository } from "../../../dist/src/store/ledger-repository.js";

const job = JSON.parse(process.argv[2]);
const db = openDatabase(job.dataDir);
const billing = new Billing({
  ledger: new LedgerRepository(db),
  chains: defaultChainRegistry(),
  catalog: defaultPriceCatalog(),
  now: Date.now,
});
const call = { kind: "text", model: "model-haiku-4-5", inputTokens: 1000n, maxTokens: 1000n };
const counts = { held: 0, insufficient: 0, settled: 0, charged: "0" };
let charged = 0n;

function hold(i) {
  try {
    const state = billing.hold({
      accountId: job.accountId,
      requestId: `${job.prefix}-${i}`,
      keyId: "",
      chain: "base",
      call,
    });
    counts.held++;
    return state.hold.id;
  } catch (error) {
    const reason = error?.findDetails ? error.rawMessage : String(error);
    if (!/Insufficient funds/.test(reason)) throw error;
    counts.insufficient++;
    return undefined;
  }
}

process.stdout.write("ready\n");
const input = createInterface({ input: process.stdin });
input.once("line", () => {
  for (let i = 0; i < job.attempts; i++) {
    const id = hold(i);
    if (id === undefined || job.mode === "hold") continue;
    if (job.mode === "hang") continue;
    // 100 output tokens of haiku: 500 units charged out of the 7000 held.
    const settled = billing.settle(id, {
      inputTokens: 0n,
      outputTokens: 100n,
      cacheWrite5mTokens: 0n,
      cacheWrite1hTokens: 0n,
      cacheReadTokens: 0n,
      images: 0,
    });
    counts.settled++;
    charged += settled.resolution.amount;
  }
  counts.charged = charged.toString();
  process.stdout.write(`${JSON.stringify(counts)}\n`);
  if (job.mode === "hang") {
    // Held and never resolved: the parent kills this process with SIGKILL.
    setInterval(() => {}, 1000);
    return;
  }
  input.close();
  db.close();
});
