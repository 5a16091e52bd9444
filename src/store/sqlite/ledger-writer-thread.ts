/**
 * The ledger writer's thread: it holds the SQLite connection every ledger write goes through,
 * group-commits them (one transaction and one fsync for the writes that arrive together) and
 * answers each one after its commit. Started by ledger-writer.ts; never imported.
 */
import { channel } from "node:diagnostics_channel";
import { parentPort, workerData } from "node:worker_threads";
import { openDatabase } from "./database.js";
import { groupCommittedWrites } from "./ledger-store.js";
import { CLOSE_OP, shrinkAnswer, type WireReplies, type WireRequests } from "./ledger-wire.js";
import type { WireError } from "./ledger-writer.js";
import { LEDGER_WRITES } from "./ledger-writes.js";

const port = parentPort;
if (port === null) throw new Error("ledger-writer-thread.ts runs only as a worker thread");
const db = openDatabase((workerData as { dataDir: string }).dataDir);
const writes = groupCommittedWrites(db);
/** Each batch when it arrives and its answers when they leave, for whoever subscribes (bench/timeline-hook.ts). */
const crossings = channel("tollgate:ledger:crossing");

// The answers of one group commit arrive together (its writes settle in one microtask run):
// they cross back in one message.
let answers: WireReplies = [];
const reply = (id: number, ok: 0 | 1, value: unknown) => {
  if (answers.length === 0) setImmediate(sendAnswers);
  answers.push(id, ok, value);
};
function sendAnswers(): void {
  const batch = answers;
  answers = [];
  if (crossings.hasSubscribers) crossings.publish({ phase: "replied", message: batch });
  port!.postMessage(batch);
}

/** What crosses back for a failed write: enough to rebuild the error (structured clone drops `code`). */
function describe(error: unknown): WireError {
  if (!(error instanceof Error)) return { name: "Error", message: String(error), code: undefined };
  const code = (error as { code?: unknown }).code;
  return { name: error.name, message: error.message, code: typeof code === "string" ? code : undefined };
}

port.on("message", (batch: WireRequests) => {
  if (crossings.hasSubscribers) crossings.publish({ phase: "received", message: batch });
  for (let i = 0; i < batch.length; i += 3) {
    const id = batch[i] as number;
    const op = batch[i + 1] as number;
    if (op === CLOSE_OP) {
      writes.close().then(
        () => {
          db.close();
          reply(id, 1, undefined);
          sendAnswers();
          port.close();
        },
        (error: unknown) => reply(id, 0, describe(error)),
      );
      continue;
    }
    const write = writes[LEDGER_WRITES[op]!] as (...a: readonly unknown[]) => Promise<unknown>;
    write(...(batch[i + 2] as readonly unknown[])).then(
      (value) => reply(id, 1, shrinkAnswer(op, value)),
      (error: unknown) => reply(id, 0, describe(error)),
    );
  }
});
reply(0, 1, "ready");
