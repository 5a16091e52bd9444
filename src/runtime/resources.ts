import type { Logger } from "pino";
import type { Config } from "../config/config.js";
import { type Log, silentLog } from "../core/ports/log.js";
import type { LogLevel } from "../logger.js";
import type { Runtime, RuntimeMode } from "./types.js";

/** How a resource is closed: with the drain budget left, when it has one. */
export type Closer = (drain: { readonly deadline: number; readonly reason: string }) => Promise<void> | void;

/**
 * Resources in the order they were opened, closed in reverse. A closer that fails does not stop
 * the ones after it; the first failure is rethrown once all have run.
 */
export class ResourceStack {
  private readonly closers: Closer[] = [];
  private closing: Promise<void> | undefined;

  defer(closer: Closer): void {
    this.closers.push(closer);
  }

  close(timeoutMs: number, reason: string): Promise<void> {
    this.closing ??= (async () => {
      const drain = { deadline: Date.now() + timeoutMs, reason };
      let failure: unknown;
      for (const closer of this.closers.reverse()) {
        try {
          await closer(drain);
        } catch (error) {
          failure ??= error;
        }
      }
      if (failure !== undefined) throw failure;
    })();
    return this.closing;
  }
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

/** What a runtime has opened so far: filled in by the recipe as it goes. */
export type RuntimeParts = Mutable<Omit<Runtime, "close" | "mode" | "config">>;

/** Nothing opened yet. */
export function emptyParts(): RuntimeParts {
  return {
    facade: undefined,
    core: undefined,
    transport: undefined,
    stores: undefined,
    sweeper: undefined,
    counters: undefined,
    metrics: undefined,
    textUpstream: undefined,
    images: undefined,
    chains: undefined,
    chainsWorker: undefined,
    dev: { images: false },
    log: silentLog,
  };
}

/**
 * A runtime being opened: what every recipe and builder works on. `config` is the configuration
 * in force, which dev mode fills in as its stand-ins start; `stack` owns what has been opened.
 */
export interface Assembly {
  readonly mode: RuntimeMode;
  config: Config;
  readonly stack: ResourceStack;
  readonly parts: RuntimeParts;
  /** The JSON logger, when the runtime logs (else undefined: the facade logs nothing). */
  readonly logger: Logger | undefined;
  /** Where the runtime's own lines go: the logger, or errors only, opened on first use. */
  readonly log: Log;
  readonly logLevel: LogLevel;
  /** The clock the core and its parts read; the system's when undefined. */
  readonly now: (() => number) | undefined;
  /** Operator mode: whether to build the chain adapters (see RuntimeOptions.chainAdapters). */
  readonly chainAdapters: boolean;
}
