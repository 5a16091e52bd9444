import { channel } from "node:diagnostics_channel";

/**
 * Each batch of two or more when its answers are back: how many items, and the SQLSTATE of each
 * item that failed and goes again alone (bench/timeline-hook.ts); silent while nobody subscribes.
 */
const answered = channel("tollgate:ledger:batch");

/**
 * One item's answer from a batch: its value, or the SQLSTATE it failed with (it is then sent
 * again alone, which answers it as it always did).
 */
export type BatchAnswer<R> = { readonly value: R } | { readonly failed: string };

/**
 * How many statements of a kind may be in flight at once (`inFlight`), how many items one batch
 * may carry (`size`), and after how long a statement in flight stops counting against the limit
 * (`slowMs`): one waiting on a row another host keeps locked must not hold up the rest.
 */
export interface BatchLimits {
  readonly inFlight: number;
  readonly size: number;
  readonly slowMs: number;
}

/**
 * The holds' and resolutions' limits: one statement of a kind in flight per host, and the calls
 * that arrive meanwhile go together in the next one (docs/store.md, "Batches"). 32 items at
 * most: each is a subtransaction, and PostgreSQL keeps 64 of a transaction's in its cache. A
 * batch of 32 runs in a few milliseconds; one still in flight after 50 ms is waiting on a lock
 * (a row another host keeps), and the next goes without it.
 */
export const CALL_BATCHES: BatchLimits = { inFlight: 1, size: 32, slowMs: 50 };

/**
 * Batches of two or more sent, the items they carried, and the items a batch failed and sent
 * again alone (exported as metrics: docs/operations.md, "Ledger batches").
 */
export interface BatchCount {
  batches: number;
  items: number;
  retried: number;
}

interface Waiting<T, R> {
  readonly item: T;
  readonly resolve: (value: R | Promise<R>) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * Sends a kind of statement (a hold, a resolution) the way a busy host benefits from: while
 * fewer than `limits.inFlight` are in flight, each goes at once, alone, as it always did; the
 * ones that arrive while the limit is reached wait for the next free slot and go together, as
 * one statement (`together`: one round trip, one transaction, one commit). An item the batch
 * names as failed (its subtransaction rolled back: nothing of it remains) is sent again alone;
 * a batch that fails as a whole (the connection lost, the server refusing the commit) fails
 * each of its items with that error, as each alone would have failed.
 */
export class Batches<T, R> {
  readonly #waiting: Waiting<T, R>[] = [];
  #inFlight = 0;
  /** Batches of two or more sent, and the items they carried (for tests and benchmarks). */
  readonly sent: BatchCount = { batches: 0, items: 0, retried: 0 };

  constructor(
    private readonly alone: (item: T) => Promise<R>,
    private readonly together: (items: readonly T[]) => Promise<readonly BatchAnswer<R>[]>,
    private readonly limits: BatchLimits = CALL_BATCHES,
  ) {}

  run(item: T): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.#waiting.push({ item, resolve, reject });
      this.#pump();
    });
  }

  #pump(): void {
    while (this.#inFlight < this.limits.inFlight && this.#waiting.length > 0) {
      const batch = this.#waiting.splice(0, this.limits.size);
      this.#inFlight++;
      let counted = true;
      const free = () => {
        if (!counted) return;
        counted = false;
        clearTimeout(slow);
        this.#inFlight--;
        this.#pump();
      };
      const slow = setTimeout(free, this.limits.slowMs);
      void this.#send(batch).finally(free);
    }
  }

  async #send(batch: readonly Waiting<T, R>[]): Promise<void> {
    if (batch.length === 1) {
      const [only] = batch;
      await this.alone(only!.item).then(only!.resolve, only!.reject);
      return;
    }
    this.sent.batches++;
    this.sent.items += batch.length;
    let answers: readonly BatchAnswer<R>[];
    try {
      answers = await this.together(batch.map((w) => w.item));
      if (answers.length !== batch.length) {
        throw new Error(`a batch of ${batch.length} answered ${answers.length} items`);
      }
    } catch (error) {
      for (const w of batch) w.reject(error);
      return;
    }
    if (answered.hasSubscribers)
      answered.publish({
        items: batch.length,
        failed: answers.flatMap((answer) => ("failed" in answer ? [answer.failed] : [])),
      });
    batch.forEach((w, i) => {
      const answer = answers[i]!;
      // Out of the slot: a failed item is rare (a race lost, an id taken) and must not hold the next batch.
      if ("value" in answer) w.resolve(answer.value);
      else {
        this.sent.retried++;
        w.resolve(this.alone(w.item));
      }
    });
  }
}
