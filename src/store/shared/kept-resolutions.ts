import type { ResolveResult } from "../../core/ports/ledger.js";
import type { Resolution, ResolutionSpool } from "./resolution-spool.js";

/** How long a kept resolution waits before it is tried again. */
const RETRY_MS = 1_000;

/**
 * What a store keeps a refused resolution for: the error its caller gets instead (a disk full
 * becomes STORAGE_FULL, a lost connection STORE_UNAVAILABLE), or undefined for a refusal that is
 * not kept (the write itself is wrong: retrying would never help).
 */
export type KeptRefusal = (error: unknown) => Error | undefined;

/**
 * The resolutions of holds (settle, void) that the store refused — a full disk, and on
 * PostgreSQL a lost connection or a server restarting — kept and tried again until they commit.
 *
 * Why: a settle asked for after a stream was delivered cannot be undone by failing it. Left
 * alone, the hold would stay open and the sweeper would void it once the store is back: the
 * caller would have been served for nothing. Kept, it is written as soon as the store takes it,
 * for the amount the call was priced at.
 *
 * The rules: a refused resolution is kept, and its caller still gets the refusal, so that it can
 * tell its own caller the truth. A later resolution asked for the same hold replaces the kept one
 * (a non-streaming call whose settle was refused releases its hold: its answer was never sent);
 * callers ask for it at once, before the first retry. Retries run every second, and
 * {@link flush} runs them on demand: the sweeper flushes first, so it never voids a hold whose
 * settlement is waiting. The ledger resolves a hold once: a retry of a resolution already
 * written (a commit whose answer the lost connection swallowed, a record replayed twice) changes
 * nothing.
 *
 * With a spool ({@link useSpool}: every serving process has one), a kept resolution is also on
 * disk before its caller is answered, and a process that starts takes over what the previous
 * one left (docs/store.md, "When the store refuses a settlement").
 */
export class KeptResolutions {
  readonly #kept = new Map<string, Resolution>();
  #timer: NodeJS.Timeout | undefined;
  #spool: ResolutionSpool | undefined;

  /**
   * `write` writes a resolution to the store; `refusal` says which of its failures are kept.
   * `warn` is told of a resolution kept in memory only (the spool refused it).
   */
  constructor(
    private readonly write: (resolution: Resolution) => Promise<ResolveResult>,
    private readonly refusal: KeptRefusal,
    private readonly warn: (message: string) => void = (message) =>
      process.emitWarning(message, { code: "TOLLGATE_SPOOL" }),
  ) {}

  /** How many resolutions wait for the store. */
  get size(): number {
    return this.#kept.size;
  }

  /**
   * Keeps every refused resolution in `spool` too, and takes over the ones a previous process
   * left in it (a hold's last one wins), written at once if the store takes them, else retried.
   */
  async useSpool(spool: ResolutionSpool): Promise<void> {
    this.#spool = spool;
    for (const resolution of spool.found) this.#kept.set(resolution.holdId, resolution);
    if (spool.torn) this.warn(`${spool.path}: its last record was torn (never acknowledged) and is ignored`);
    await this.flush().catch(() => this.#schedule());
  }

  /**
   * Writes `resolution`; if the store refuses it (see {@link KeptRefusal}), keeps it for a retry
   * — in the spool, on disk, before answering — and rejects with the refusal. Replaces any
   * resolution kept for the same hold.
   */
  async run(resolution: Resolution): Promise<ResolveResult> {
    this.#kept.delete(resolution.holdId);
    try {
      return await this.write(resolution);
    } catch (error) {
      const refusal = this.refusal(error);
      if (refusal === undefined) throw error;
      this.#kept.set(resolution.holdId, resolution);
      this.#schedule();
      try {
        await this.#spool?.append(resolution);
      } catch (spoolError) {
        this.warn(
          `the resolution of hold ${resolution.holdId} is kept in memory only: ${(spoolError as Error).message}`,
        );
      }
      throw refusal;
    }
  }

  /**
   * Writes every kept resolution; rejects with the store's refusal while one is still refused.
   * A kept write that fails otherwise is dropped: its hold is left to the sweeper. Once nothing
   * is kept, the spool is emptied.
   */
  async flush(): Promise<void> {
    let refused: Error | undefined;
    for (const [holdId, resolution] of [...this.#kept]) {
      try {
        await this.write(resolution);
      } catch (error) {
        const refusal = this.refusal(error);
        if (refusal !== undefined) {
          refused = refusal;
          continue;
        }
      }
      // Unless a newer resolution of the hold replaced this one meanwhile.
      if (this.#kept.get(holdId) === resolution) this.#kept.delete(holdId);
    }
    if (refused !== undefined) throw refused;
    await this.#spool?.clearIfEmpty(() => this.#kept.size === 0);
  }

  /** Stops the retries (the kept resolutions stay, for a last {@link flush}). */
  stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /** Stops the retries, tries the kept resolutions one last time, and closes the spool. */
  async close(): Promise<void> {
    this.stop();
    await this.flush().catch(() => undefined);
    await this.#spool?.close();
    this.#spool = undefined;
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
