import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import type { HealthService } from "../gen/tollgate/health/v1/health_pb.js";
import { callerKey, requireOperator } from "./caller.js";

/** One dependency check: resolves to a short detail when healthy, throws when not. */
export interface HealthProbe {
  readonly name: string;
  readonly required: boolean;
  check(): Promise<string> | string;
}

/** What one check of one dependency found. */
export interface ProbeResult {
  readonly name: string;
  readonly ok: boolean;
  readonly required: boolean;
  /** Operator-facing: addresses, balances, errors. Never in the public answer. */
  readonly detail: string;
  readonly latencyMicros: number;
}

/** One round of checks: every probe once. */
export interface HealthRound {
  readonly ready: boolean;
  readonly dependencies: readonly ProbeResult[];
  /** When the round finished (ms since the epoch). */
  readonly checkedAt: number;
}

/** How the monitor runs its rounds. */
export interface HealthMonitorOptions {
  /** Between the end of one round and the start of the next. */
  readonly intervalMs: number;
  /** A check that takes longer is reported failed ("timed out"); at most the interval. */
  readonly probeTimeoutMs?: number | undefined;
  readonly now?: (() => number) | undefined;
}

/** A check that has not answered by then is reported failed, so a round always ends. */
const DEFAULT_PROBE_TIMEOUT_MS = 5_000;

/**
 * Checks every dependency in the background, one round every `intervalMs`, and keeps the last
 * round for whoever asks: a health request reads memory and runs no check (issue 29: each
 * request used to cost several chain RPCs and, on SQLite, a scan of the settlement outbox on
 * the event loop). Rounds never overlap, and each check is bounded in time. Not started, it runs
 * one round when first asked and keeps that (tests, the operator's one-shot commands).
 */
export class HealthMonitor {
  #last: HealthRound | undefined;
  #running: Promise<HealthRound> | undefined;
  #timer: NodeJS.Timeout | undefined;
  #started = false;
  #stopped = false;
  #rounds = 0;
  readonly #now: () => number;
  readonly #timeoutMs: number;

  constructor(
    private readonly probes: readonly HealthProbe[],
    readonly options: HealthMonitorOptions,
  ) {
    this.#now = options.now ?? Date.now;
    this.#timeoutMs = Math.min(options.probeTimeoutMs ?? DEFAULT_PROBE_TIMEOUT_MS, options.intervalMs);
  }

  /** Rounds run so far (each checks every probe once). */
  get rounds(): number {
    return this.#rounds;
  }

  /** Runs the first round now, then one every interval on an unref'd timer, until {@link stop}. */
  start(): void {
    if (this.#started || this.#stopped) return;
    this.#started = true;
    this.#loop();
  }

  /**
   * Stops the rounds: no other starts. One in progress is not waited for (a chain that does not
   * answer would hold the shutdown up to the check's timeout); a check that then finds its store
   * or adapter closed is recorded failed, and nobody reads it.
   */
  stop(): void {
    this.#stopped = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /** The last finished round; the first round (run now if none started) when none has finished. */
  async latest(): Promise<HealthRound> {
    if (this.#last !== undefined) return this.#last;
    return await (this.#running ?? this.#round());
  }

  #loop(): void {
    void this.#round().finally(() => {
      if (this.#stopped) return;
      this.#timer = setTimeout(() => this.#loop(), this.options.intervalMs);
      this.#timer.unref();
    });
  }

  #round(): Promise<HealthRound> {
    this.#running ??= (async () => {
      try {
        const dependencies = await Promise.all(this.probes.map((probe) => this.#check(probe)));
        const round: HealthRound = {
          ready: dependencies.every((d) => d.ok || !d.required),
          dependencies,
          checkedAt: this.#now(),
        };
        this.#rounds++;
        this.#last = round;
        return round;
      } finally {
        this.#running = undefined;
      }
    })();
    return this.#running;
  }

  async #check(probe: HealthProbe): Promise<ProbeResult> {
    const started = process.hrtime.bigint();
    let ok = true;
    let detail: string;
    let timer: NodeJS.Timeout | undefined;
    try {
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`no answer within ${this.#timeoutMs} ms`)),
          this.#timeoutMs,
        );
        timer.unref();
      });
      detail = await Promise.race([Promise.resolve().then(() => probe.check()), timeout]);
    } catch (error) {
      ok = false;
      detail = error instanceof Error ? error.message : String(error);
    } finally {
      clearTimeout(timer);
    }
    const latencyMicros = Number((process.hrtime.bigint() - started) / 1000n);
    return { name: probe.name, ok, required: probe.required, detail, latencyMicros };
  }
}

/**
 * The HealthService RPCs over the monitor's last round: Check, public, says only whether each
 * dependency is up; Inspect, the operator's, has the details.
 */
export function createHealthService(monitor: HealthMonitor): ServiceImpl<typeof HealthService> {
  return {
    async check() {
      const round = await monitor.latest();
      return {
        ready: round.ready,
        dependencies: round.dependencies.map(({ name, ok, required }) => ({ name, ok, required })),
        checkedAt: timestampFromMs(round.checkedAt),
      };
    },
    async inspect(_req, ctx) {
      requireOperator(ctx.values.get(callerKey));
      const round = await monitor.latest();
      return {
        ready: round.ready,
        dependencies: round.dependencies.map((d) => ({ ...d })),
        checkedAt: timestampFromMs(round.checkedAt),
        rounds: BigInt(monitor.rounds),
        intervalMs: monitor.options.intervalMs,
      };
    },
  };
}
