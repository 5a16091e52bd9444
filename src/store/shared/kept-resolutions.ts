import { isStorageFull, storageFull } from "../../core/errors.js";

/** How long a kept resolution waits before it is tried again. */
const RETRY_MS = 1_000;

/**
 * The resolutions of holds (settle, void) that the full disk refused, kept in memory and tried
 * again until they commit.
 *
 * Why: a settle asked for after a stream was delivered cannot be undone by failing it. Left
 * alone, the hold would stay open and the sweeper would void it once space returns: the caller
 * would have been served for nothing. Kept, it is written as soon as the disk takes it, for the
 * amount the call was priced at.
 *
 * The rules: a refused resolution is kept, and its caller still gets the refusal (STORAGE_FULL),
 * so that it can tell its own caller the truth. A later resolution asked for the same hold
 * replaces the kept one (a non-streaming call whose settle was refused releases its hold: its
 * answer was never sent); callers ask for it at once, before the first retry. Retries run
 * every second, and {@link flush} runs them on demand: the sweeper flushes first, so it never
 * voids a hold whose settlement is waiting. The ledger still resolves a hold once: a retry of
 * a resolution already written elsewhere changes nothing. Kept resolutions live in this process
 * only: if it dies before space returns, the sweeper voids their holds after the restart, and
 * those callers are charged nothing (docs/store.md, "When the disk is full").
 */
export class KeptResolutions {
  readonly #kept = new Map<string, () => Promise<unknown>>();
  #timer: NodeJS.Timeout | undefined;

  /** How many resolutions wait for space. */
  get size(): number {
    return this.#kept.size;
  }

  /**
   * Runs `write`, the resolution of `holdId`; if the full disk refuses it, keeps it for a retry
   * and rejects with {@link storageFull}. Replaces any resolution kept for the same hold.
   */
  async run<T>(holdId: string, write: () => Promise<T>): Promise<T> {
    this.#kept.delete(holdId);
    try {
      return await write();
    } catch (error) {
      if (!isStorageFull(error)) throw error;
      this.#kept.set(holdId, write);
      this.#schedule();
      throw storageFull();
    }
  }

  /**
   * Writes every kept resolution; rejects with {@link storageFull} while one still does not
   * fit. A kept write that fails otherwise is dropped: its hold is left to the sweeper.
   */
  async flush(): Promise<void> {
    let full = false;
    for (const [holdId, write] of [...this.#kept]) {
      try {
        await write();
      } catch (error) {
        if (isStorageFull(error)) {
          full = true;
          continue;
        }
      }
      // Unless a newer resolution of the hold replaced this one meanwhile.
      if (this.#kept.get(holdId) === write) this.#kept.delete(holdId);
    }
    if (full) throw storageFull();
  }

  /** Stops the retries (the kept resolutions stay, for a last {@link flush}). */
  stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #schedule(): void {
    if (this.#timer !== undefined) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.flush().catch(() => {
        if (this.#kept.size > 0) this.#schedule();
      });
    }, RETRY_MS);
    // Never what keeps a finished process alive: closing the ledger flushes one last time.
    this.#timer.unref();
  }
}
