import { channel } from "node:diagnostics_channel";
import { Worker } from "node:worker_threads";
import { isStorageFull, storageFull } from "../../core/errors.js";
import { threadEntry } from "../../thread-entry.js";
import { eachWrite, type LedgerWriteOp, type LedgerWrites } from "./ledger-writes.js";

/**
 * Each write when it is sent and when its answer (durable) is back, in the asking call's async
 * context, for whoever subscribes (bench/timeline-hook.ts); silent while nobody does.
 */
const writes = channel("tollgate:ledger:write");
/**
 * Each batch of writes when it crosses to the writer thread and its answers when they are back,
 * with the message itself (bench/crossing.ts measures its structured clone).
 */
const crossings = channel("tollgate:ledger:crossing");

/** One write sent to the writer thread. */
export interface WriteRequest {
  readonly id: number;
  readonly op: LedgerWriteOp | "close";
  readonly args: readonly unknown[];
}

/** The writer thread's answer to one write (id 0: the thread is ready). */
export type WriteReply =
  | { readonly id: number; readonly ok: true; readonly value: unknown }
  | {
      readonly id: number;
      readonly ok: false;
      readonly error: { readonly name: string; readonly message: string; readonly code: string | undefined };
    };

interface Pending {
  readonly resolve: (value: unknown) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * A failed write's error on this side of the thread: a write the full disk refused is the
 * core's STORAGE_FULL (a 503 through any transport), anything else keeps its name and code.
 */
function rebuild(error: Extract<WriteReply, { ok: false }>["error"]): Error {
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
  worker.on("message", (replies: readonly WriteReply[]) => {
    if (crossings.hasSubscribers)
      crossings.publish({ phase: "arrived", ids: replies.map((r) => r.id), message: replies });
    for (const reply of replies) {
      if (reply.id === 0) {
        ready();
        continue;
      }
      const p = pending.get(reply.id);
      if (p === undefined) continue;
      pending.delete(reply.id);
      if (reply.ok) p.resolve(reply.value);
      else p.reject(rebuild(reply.error));
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
  let outbox: WriteRequest[] = [];
  const post = () => {
    const batch = outbox;
    outbox = [];
    if (crossings.hasSubscribers)
      crossings.publish({ phase: "posted", ids: batch.map((w) => w.id), message: batch });
    if (failure === undefined) worker.postMessage(batch);
  };
  const call = (op: WriteRequest["op"], args: readonly unknown[]): Promise<never> => {
    if (failure !== undefined) return Promise.reject(failure);
    const id = nextId++;
    if (pending.size === 0) worker.ref();
    const answer = new Promise<never>((resolve, reject) => {
      pending.set(id, { resolve: resolve as (value: unknown) => void, reject });
      if (outbox.length === 0) setImmediate(post);
      outbox.push({ id, op, args });
    });
    if (writes.hasSubscribers) {
      writes.publish({ op, id, phase: "sent" });
      const done = () => writes.publish({ op, id, phase: "done" });
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
