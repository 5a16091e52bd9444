// A gateway-like OS process on the same database file, built from the compiled dist/ (run
// `make build` first): Billing over the SQLite ledger with its writes in the ledger writer
// thread, as `tollgate serve` runs it. Reads one JSON job from argv, prints "ready", waits for a
// line on stdin (so several processes start together), runs the job and prints its result.
// With `acks`, it prints "held <id>" and "settled <id> <charge>" the moment each write is
// acknowledged, so a parent that kills it can check that nothing acknowledged was lost.
import { createInterface } from "node:readline";
import { Billing } from "../../../dist/src/core/billing/billing.js";
import { defaultPriceCatalog } from "../../../dist/src/core/billing/default-catalog.js";
import { defaultChainRegistry } from "../../../dist/src/core/billing/default-chains.js";
import { openDatabase } from "../../../dist/src/store/sqlite/database.js";
import { openSqliteLedger } from "../../../dist/src/store/sqlite/ledger-store.js";

const job = JSON.parse(process.argv[2]);
const db = openDatabase(job.dataDir);
const ledger = await openSqliteLedger(db, job.dataDir, { thread: true });
const billing = new Billing({
  ledger,
  chains: defaultChainRegistry(),
  catalog: defaultPriceCatalog(),
  now: Date.now,
});
const call = { kind: "text", model: "model-haiku-4-5", inputTokens: 1000n, maxTokens: 1000n };
const counts = { held: 0, insufficient: 0, settled: 0, charged: "0" };
let charged = 0n;
// Pipes are written synchronously on Linux: an ack printed here is in the pipe before the
// process can be killed.
const ack = (line) => job.acks && process.stdout.write(`${line}\n`);

async function hold(i) {
  try {
    const state = await billing.hold({
      accountId: job.accountId,
      requestId: `${job.prefix}-${i}`,
      keyId: "",
      chain: "base",
      call,
    });
    counts.held++;
    ack(`held ${state.hold.id}`);
    return state.hold.id;
  } catch (error) {
    const reason = error?.findDetails ? error.rawMessage : String(error);
    if (!/Insufficient funds/.test(reason)) throw error;
    counts.insufficient++;
    return undefined;
  }
}

/** One caller: takes the next index until the job's attempts are used up. */
let next = 0;
async function caller() {
  while (next < job.attempts) {
    const id = await hold(next++);
    if (id === undefined || job.mode === "hold" || job.mode === "hang") continue;
    // 100 output tokens of haiku: 500 units charged out of the 7000 held.
    const settled = await billing.settle(id, {
      inputTokens: 0n,
      outputTokens: 100n,
      cacheWrite5mTokens: 0n,
      cacheWrite1hTokens: 0n,
      cacheReadTokens: 0n,
      images: 0,
    });
    counts.settled++;
    charged += settled.resolution.amount;
    ack(`settled ${id} ${settled.resolution.amount}`);
  }
}

process.stdout.write("ready\n");
const input = createInterface({ input: process.stdin });
input.once("line", async () => {
  // `concurrency` calls in flight at once, as on a busy gateway: their writes share commits.
  await Promise.all(Array.from({ length: job.concurrency ?? 1 }, caller));
  counts.charged = charged.toString();
  process.stdout.write(`${JSON.stringify(counts)}\n`);
  if (job.mode === "hang") {
    // Held and never resolved: the parent kills this process with SIGKILL.
    setInterval(() => {}, 1000);
    return;
  }
  input.close();
  await ledger.close();
  db.close();
});
