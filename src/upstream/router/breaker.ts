/**
 * The circuit breaker of one endpoint for one model (docs/providers.md, "Circuit breaker"):
 * closed, it lets every call through and counts failures; after `failures` of them within
 * `windowMs` it opens and the endpoint is skipped for `cooldownMs`; then it lets ONE call probe
 * it (half-open): a probe that succeeds closes it, one that fails opens it again. A `retry-after`
 * from the endpoint is a cooldown of its own, whatever the breaker's state.
 */
import type { BreakerState, BreakerView } from "./router-events.js";

/** When a breaker opens, and for how long. */
export interface BreakerSettings {
  /** Failures within {@link windowMs} that open the breaker. */
  readonly failures: number;
  readonly windowMs: number;
  /** How long an open breaker skips the endpoint before one call may probe it. */
  readonly cooldownMs: number;
}

/** What {@link CircuitBreaker.acquire} grants: a normal attempt, the one probe, or nothing. */
export type BreakerGrant = "closed" | "probe" | undefined;

/** One endpoint-and-model breaker; `now` is the clock (ms). */
export class CircuitBreaker {
  #state: BreakerState = "closed";
  /** Times of the failures within the window (closed state only). */
  #failures: number[] = [];
  #openedAt = 0;
  #probing = false;
  #coolUntil = 0;

  constructor(
    private readonly settings: BreakerSettings,
    private readonly now: () => number,
  ) {}

  /** The state, an open breaker past its cooldown showing as half-open. */
  get state(): BreakerState {
    if (this.#state === "open" && this.now() >= this.#openedAt + this.settings.cooldownMs) return "half-open";
    return this.#state;
  }

  /** When the endpoint may next be tried (ms); now or earlier when it may be tried now. */
  get availableAt(): number {
    const cooled = this.#coolUntil;
    if (this.#state === "closed") return cooled;
    if (this.#probing) return Number.POSITIVE_INFINITY;
    return Math.max(cooled, this.#openedAt + this.settings.cooldownMs);
  }

  /** Whether a call may be sent now (no claim taken). */
  get available(): boolean {
    return this.availableAt <= this.now();
  }

  /** Claims an attempt: "closed" for a normal one, "probe" for the one half-open attempt. */
  acquire(): BreakerGrant {
    if (!this.available) return undefined;
    if (this.#state === "closed") return "closed";
    this.#state = "half-open";
    this.#probing = true;
    return "probe";
  }

  /** The endpoint answered (anything but a failure that fails over): closes the breaker. */
  succeeded(): void {
    this.#state = "closed";
    this.#probing = false;
    this.#failures = [];
  }

  /** The endpoint failed: counts it, opening the breaker at the threshold (a failed probe at once). */
  failed(): void {
    const now = this.now();
    if (this.#state !== "closed") {
      this.#open(now);
      return;
    }
    this.#failures = this.#failures.filter((at) => at > now - this.settings.windowMs);
    this.#failures.push(now);
    if (this.#failures.length >= this.settings.failures) this.#open(now);
  }

  /** A claimed attempt ended without a verdict (the caller left): a probe is given back. */
  released(grant: BreakerGrant): void {
    if (grant === "probe") this.#probing = false;
  }

  /** The endpoint asked for a pause (`retry-after`): skipped until `until` (ms), breaker aside. */
  coolUntil(until: number): void {
    this.#coolUntil = Math.max(this.#coolUntil, until);
  }

  #open(now: number): void {
    this.#state = "open";
    this.#openedAt = now;
    this.#probing = false;
    this.#failures = [];
  }
}

/** A router's breakers, one per endpoint and model, each made on first use. */
export class Breakers {
  readonly #breakers = new Map<string, CircuitBreaker>();

  constructor(
    private readonly settings: BreakerSettings,
    private readonly now: () => number,
  ) {}

  /** The breaker of `endpoint` for `model`, made on first use. */
  of(endpoint: string, model: string): CircuitBreaker {
    const key = `${endpoint}\n${model}`;
    let breaker = this.#breakers.get(key);
    if (breaker === undefined) {
      breaker = new CircuitBreaker(this.settings, this.now);
      this.#breakers.set(key, breaker);
    }
    return breaker;
  }

  /** Every endpoint-and-model breaker so far, for health and metrics. */
  views(): BreakerView[] {
    return [...this.#breakers].map(([key, breaker]) => {
      const [endpoint = "", model = ""] = key.split("\n");
      return { endpoint, model, state: breaker.state };
    });
  }
}
