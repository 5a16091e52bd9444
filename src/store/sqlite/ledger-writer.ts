import { channel } from "node:diagnostics_channel";
import { Worker } from "node:worker_threads";
import { isStorageFull, storageFull } from "../../core/errors.js";
import { threadEntry } from "../../thread-entry.js";
import { CLOSE_OP, expandAnswer, OP_NUMBER, type WireReplies, type WireRequests } from "./ledger-wire.js";
import { eachWrite, type LedgerWriteOp, type LedgerWrites } from "./ledger-writes.js";

/**
 * Each write when it is sent and when its answer (durable) is back, in the asking call's async
 * context, for whoever subscribes (bench/timeline-hook.ts); silent while nobody does.
 */
const writes = channel("tollgate:ledger:write");
/**
 * Each batch of writes when it crosses to the writer thread and its answers when they are back:
 * the message itself (ledger-wire.ts; bench/crossing.ts measures its structured clone).
 */
const crossings = channel("tollgate:ledger:crossing");

/** A failed write's error as it crosses back (structured clone drops `code`). */
export interface WireError {
  readonly name: string;
  readonly message: string;
  readonly code: string | undefined;
}

interface Pending {
  /** The write's op number and arguments: its answer is rebuilt from them (ledger-wire.ts). */
  readonly op: number;
  readonly args: readonly unknown[];
  readonly resolve: (value: unknown) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * A failed write's error on this side of the thread: a write the full disk refused is the
 * core's STORAGE_FULL (a 503 through any transport), anything else keeps its name and code.
 */
function rebuild(error: WireError): Error {
  if (isStorageFull(error)) return storageFull();
  return Object.assign(new Error(error.message), { name: error.name, code: error.code });
}

/**
 * Starts the ledger writer: a worker thread with its own connection to the database in
 * `dataDir`, through which every ledger write goes, group-committed there. The request loop
 * only posts a message and later receives the answer, which comes after the commit's fsync;
 * it never waits on the disk. If the thread dies, every write in flight and every later one
 * fails (nothing is acknowledged that was not committed).
 */
export async function startLedgerWriter(dataDir: string): Promise<LedgerWrites> {
  const worker = new Worker(await threadEntry(new URL("./ledger-writer-thread.js", import.meta.url)), {
    workerData: { dataDir },
  });
  const pending = new Map<number, Pending>();
  let nextId = 1;
  let failure: Error | undefined;
  let ready!: () => void;
  let notReady!: (error: unknown) => void;
  const started = new Promise<void>((resolve, reject) => {
    ready = resolve;
    notReady = reject;
  });
  const fail = (error: Error) => {
    failure ??= error;
    notReady(failure);
    for (const p of pending.values()) p.reject(failure);
    pending.clear();
  };
  // Answers come in batches: one message per group commit, not one per write.
  worker.on("message", (replies: WireReplies) => {
    if (crossings.hasSubscribers) crossings.publish({ phase: "arrived", message: replies });
    for (let i = 0; i < replies.length; i += 3) {
      const id = replies[i] as number;
      if (id === 0) {
        ready();
        continue;
      }
      const p = pending.get(id);
      if (p === undefined) continue;
      pending.delete(id);
      if (replies[i + 1] === 1) p.resolve(expandAnswer(p.op, p.args, replies[i + 2]));
      else p.reject(rebuild(replies[i + 2] as WireError));
    }
    if (pending.size === 0) worker.unref();
  });
  worker.on("error", (error) =>
    fail(new Error(`the ledger writer failed: ${error.message}`, { cause: error })),
  );
  worker.on("exit", (code) => fail(new Error(`the ledger writer stopped (exit code ${code})`)));
  // The thread keeps the process alive only while a write (or its start) awaits an answer.
  await started;
  worker.unref();

  // Writes asked for during one turn of the event loop cross in one message: each message
  // costs both threads a wake-up, and they would share one group commit anyway.
  let outbox: WireRequests = [];
  const post = () => {
    const batch = outbox;
    outbox = [];
    if (crossings.hasSubscribers) crossings.publish({ phase: "posted", message: batch });
    if (failure === undefined) worker.postMessage(batch);
  };
  const call = (name: LedgerWriteOp | "close", args: readonly unknown[]): Promise<never> => {
    if (failure !== undefined) return Promise.reject(failure);
    const id = nextId++;
    const op = name === "close" ? CLOSE_OP : OP_NUMBER.get(name)!;
    if (pending.size === 0) worker.ref();
    const answer = new Promise<never>((resolve, reject) => {
      pending.set(id, { op, args, resolve: resolve as (value: unknown) => void, reject });
      if (outbox.length === 0) setImmediate(post);
      outbox.push(id, op, args);
    });
    if (writes.hasSubscribers) {
      writes.publish({ op: name, id, phase: "sent" });
      const done = () => writes.publish({ op: name, id, phase: "done" });
      answer.then(done, done);
    }
    return answer;
  };
  let closed: Promise<void> | undefined;
  return {
    ...eachWrite((op, ...args) => call(op, args)),
    close: () => {
      closed ??= (async () => {
        if (failure === undefined) await call("close", []);
        await worker.terminate();
      })();
      return closed;
    },
  };
}
