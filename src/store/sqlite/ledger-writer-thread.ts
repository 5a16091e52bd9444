/**
 * The ledger writer's thread: it holds the SQLite connection every ledger write goes through,
 * group-commits them (one transaction and one fsync for the writes that arrive together) and
 * answers each one after its commit. Started by ledger-writer.ts; never imported.
 */
import { channel } from "node:diagnostics_channel";
import { parentPort, workerData } from "node:worker_threads";
import { openDatabase } from "./database.js";
import { groupCommittedWrites } from "./ledger-store.js";
import type { WriteReply, WriteRequest } from "./ledger-writer.js";
import type { LedgerWriteOp } from "./ledger-writes.js";

const port = parentPort;
if (port === null) throw new Error("ledger-writer-thread.ts runs only as a worker thread");
const db = openDatabase((workerData as { dataDir: string }).dataDir);
const writes = groupCommittedWrites(db);
/** Each batch when it arrives and its answers when they leave, for whoever subscribes (bench/timeline-hook.ts). */
const crossings = channel("tollgate:ledger:crossing");

// The answers of one group commit arrive together (its writes settle in one microtask run):
// they cross back in one message.
let answers: WriteReply[] = [];
const reply = (message: WriteReply) => {
  if (answers.length === 0) setImmediate(sendAnswers);
  answers.push(message);
};
function sendAnswers(): void {
  const batch = answers;
  answers = [];
  if (crossings.hasSubscribers) crossings.publish({ phase: "replied", ids: batch.map((a) => a.id) });
  port!.postMessage(batch);
}

/** What crosses back for a failed write: enough to rebuild the error (structured clone drops `code`). */
function describe(error: unknown): { name: string; message: string; code: string | undefined } {
  if (!(error instanceof Error)) return { name: "Error", message: String(error), code: undefined };
  const code = (error as { code?: unknown }).code;
  return { name: error.name, message: error.message, code: typeof code === "string" ? code : undefined };
}

port.on("message", (batch: readonly WriteRequest[]) => {
  if (crossings.hasSubscribers) crossings.publish({ phase: "received", ids: batch.map((w) => w.id) });
  for (const { id, op, args } of batch) {
    if (op === "close") {
      writes.close().then(
        () => {
          db.close();
          reply({ id, ok: true, value: undefined });
          sendAnswers();
          port.close();
        },
        (error: unknown) => reply({ id, ok: false, error: describe(error) }),
      );
      continue;
    }
    const write = writes[op as LedgerWriteOp] as (...a: unknown[]) => Promise<unknown>;
    write(...args).then(
      (value) => reply({ id, ok: true, value }),
      (error: unknown) => reply({ id, ok: false, error: describe(error) }),
    );
  }
});
reply({ id: 0, ok: true, value: "ready" });
