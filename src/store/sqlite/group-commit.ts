import { channel } from "node:diagnostics_channel";
import { performance } from "node:perf_hooks";
import type { Db } from "./database.js";

/**
 * Each group's size and timings, for whoever subscribes (bench/timeline-hook.ts); nothing is
 * measured while nobody does.
 */
const groups = channel("tollgate:ledger:group");

/** Most writes one grouped transaction carries; more wait for the next one (bounds the write lock). */
const MAX_GROUP = 256;

interface Pending {
  readonly op: () => unknown;
  /** `op` opens its own transaction (a savepoint inside the group's): it needs no other. */
  readonly ownTransaction: boolean;
  readonly resolve: (value: unknown) => void;
  readonly reject: (error: unknown) => void;
}

type Outcome =
  | { readonly ok: true; readonly value: unknown }
  | { readonly ok: false; readonly error: unknown };

/**
 * Group commit for synchronous ledger writes. Writes queued during one turn of the event loop
 * run together in one `BEGIN IMMEDIATE` transaction — each in its own savepoint, so one that
 * throws rolls back alone — and the transaction commits once, with one fsync for all of them.
 * Every caller is answered only after that commit: a result is never reported for a write that
 * could still be lost. If the commit itself fails, or a write fails in a way that makes SQLite
 * roll the whole transaction back (a full disk), every caller in the group gets the error and
 * none of the group's writes happened.
 *
 * Why: with `synchronous=FULL` each commit blocks the event loop for its fsync; a call's hold and
 * settle as separate commits cap the process at a few hundred calls per second on a slow disk.
 */
export class GroupCommit {
  #queue: Pending[] = [];
  #scheduled = false;
  readonly #group: (batch: readonly Pending[]) => Outcome[];
  /** When the oldest queued write arrived, and when the last group's statements ended (timed groups). */
  #queuedAt = 0;
  #statementsEnd = 0;

  constructor(db: Db) {
    // A nested better-sqlite3 transaction is a savepoint: a failing write undoes only itself.
    const isolated = db.transaction((op: () => unknown) => op());
    const group = db.transaction((batch: readonly Pending[]): Outcome[] => {
      const outcomes = batch.map((pending): Outcome => {
        try {
          return { ok: true, value: pending.ownTransaction ? pending.op() : isolated(pending.op) };
        } catch (error) {
          // SQLite rolled the whole transaction back (it may, on SQLITE_FULL or an I/O error):
          // the group's earlier writes are gone, and a later one would run, and commit, on its
          // own. The group fails as one.
          if (!db.inTransaction) throw error;
          return { ok: false, error };
        }
      });
      if (groups.hasSubscribers) this.#statementsEnd = performance.now();
      return outcomes;
    });
    this.#group = (batch) => group.immediate(batch);
  }

  /**
   * Runs `op` (synchronous database work) in the next grouped transaction; resolves with its
   * result, or rejects with what it threw, once that transaction has committed. `ownTransaction`:
   * `op` runs in a better-sqlite3 transaction of its own, which inside the group's is a savepoint
   * that a throw rolls back; the group then adds none around it (two statements fewer per write).
   */
  run<T>(op: () => T, ownTransaction = false): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (this.#queue.length === 0 && groups.hasSubscribers) this.#queuedAt = performance.now();
      this.#queue.push({ op, ownTransaction, resolve: resolve as (value: unknown) => void, reject });
      if (!this.#scheduled) {
        this.#scheduled = true;
        // After this turn's I/O callbacks: everything that arrived together commits together.
        setImmediate(() => this.#flush());
      }
    });
  }

  #flush(): void {
    const batch = this.#queue.splice(0, MAX_GROUP);
    this.#scheduled = this.#queue.length > 0;
    if (this.#scheduled) setImmediate(() => this.#flush());
    let outcomes: Outcome[];
    const timed = groups.hasSubscribers;
    const start = timed ? performance.now() : 0;
    try {
      outcomes = this.#group(batch);
      if (timed) {
        const end = performance.now();
        groups.publish({
          writes: batch.length,
          waitedMs: start - this.#queuedAt,
          statementsMs: this.#statementsEnd - start,
          commitMs: end - this.#statementsEnd,
        });
        this.#queuedAt = end;
      }
    } catch (error) {
      // The commit failed (or BEGIN did): better-sqlite3 rolled the whole group back.
      for (const pending of batch) pending.reject(error);
      return;
    }
    batch.forEach((pending, i) => {
      const outcome = outcomes[i]!;
      if (outcome.ok) pending.resolve(outcome.value);
      else pending.reject(outcome.error);
    });
  }
}
