import { isStorageFull, isStoreUnavailable } from "../errors.js";
import type { Billing } from "./billing.js";

/** How the sweeper runs. */
export interface HoldSweeperOptions {
  /** The longest a call may run: a hold older than this belongs to a call that died. */
  readonly maxCallMs: number;
  /** How often to sweep after the first sweep at start. */
  readonly intervalMs: number;
  /** Told about a sweep that failed (e.g. the database was busy past its timeout); it retries next tick. */
  readonly onError?: (error: unknown) => void;
}

/** Voids holds orphaned by a crash or a lost settle: at start-up, then periodically. */
export interface HoldSweeper {
  /** Sweeps once now, then every interval; resolves with how many holds the first sweep voided. */
  start(): Promise<number>;
  /** Stops the periodic sweeps. Safe to call twice. */
  stop(): void;
  /** One sweep; resolves with how many holds it voided. */
  sweep(): Promise<number>;
}

/** A sweeper over the billing core. Its timer is unref'd: it never keeps the process alive. */
export function createHoldSweeper(billing: Billing, options: HoldSweeperOptions): HoldSweeper {
  let timer: NodeJS.Timeout | undefined;
  const sweep = () => billing.expireHolds(options.maxCallMs);
  return {
    sweep,
    async start() {
      // A store that refuses writes for now (its disk full, its server unreachable: a kept
      // resolution waits, and the sweep waits behind it) does not stop the start: the next tick
      // sweeps again (docs/store.md, "When the store refuses a settlement").
      const first = await sweep().catch((error: unknown) => {
        if (!isStorageFull(error) && !isStoreUnavailable(error)) throw error;
        options.onError?.(error);
        return 0;
      });
      if (timer === undefined) {
        timer = setInterval(() => {
          sweep().catch((error: unknown) => options.onError?.(error));
        }, options.intervalMs);
        timer.unref();
      }
      return first;
    },
    stop() {
      if (timer !== undefined) clearInterval(timer);
      timer = undefined;
    },
  };
}
