import { setTimeout as sleep } from "node:timers/promises";
import { ConnectError } from "@connectrpc/connect";
import { throttleKey } from "../core/auth/client-address.js";
import { errorInfo } from "../core/errors.js";
import type { RateLimitDecision } from "../core/ports/rate-limits.js";

/** Refused addresses remembered at most; past it they are asked about again (a bound, not a policy). */
const REFUSED_LIMIT = 10_000;

/**
 * How long a refusal from the facade's copy is held back. A client waits for its answers, so a
 * flooding address gets about one answer per connection per second instead of as many as the
 * gateway can give: its flood stops competing with other callers for this process (answered at
 * once, 2,000 key guesses over 8 connections doubled a valid caller's median latency; held back,
 * they did not).
 */
const REFUSAL_DELAY_MS = 1_000;

/** Refusals held back at once at most; past it they are answered at once, so held sockets stay bounded. */
const MAX_HELD_REFUSALS = 1_000;

/**
 * The addresses the core refused for one reason (a key-guessing block, an anonymous limit), and
 * until when. Further requests of such an address then cost the facade an answer and no more: no
 * RPC, no counter read (in Redis, a round trip). The copy cannot go stale: neither a block nor a
 * fixed window ends early, and no request of the address reaches the core meanwhile to extend it.
 * The end is the core's `retry_after`, rounded up to the second, so an address may wait up to a
 * second longer here than in the core.
 */
export class RefusedAddresses {
  readonly #until = new Map<string, { readonly until: number; readonly limit: number }>();
  #held = 0;

  /** `reason`: the core's ErrorInfo reason remembered; `refuse`: the error answered meanwhile. */
  constructor(
    private readonly reason: string,
    private readonly refuse: (decision: RateLimitDecision, now: number) => ConnectError,
  ) {}

  /** The refusal for `address` while it lasts; undefined otherwise. */
  refusal(address: string): ConnectError | undefined {
    if (this.#until.size === 0) return undefined;
    const key = throttleKey(address);
    const entry = this.#until.get(key);
    if (entry === undefined) return undefined;
    const now = Date.now();
    if (entry.until <= now) {
      this.#until.delete(key);
      return undefined;
    }
    return this.refuse({ allowed: false, limit: entry.limit, remaining: 0, resetMs: entry.until - now }, now);
  }

  /** Waits before a refusal is sent ({@link REFUSAL_DELAY_MS}), unless too many already wait. */
  async holdBack(): Promise<void> {
    if (this.#held >= MAX_HELD_REFUSALS) return;
    this.#held++;
    try {
      await sleep(REFUSAL_DELAY_MS);
    } finally {
      this.#held--;
    }
  }

  /** Takes note of the core's answer when it refused `address` for this reason. */
  remember(address: string, error: unknown): void {
    if (!(error instanceof ConnectError)) return;
    const info = errorInfo(error);
    if (info?.reason !== this.reason) return;
    if (this.#until.size >= REFUSED_LIMIT) this.#forgetEnded();
    if (this.#until.size >= REFUSED_LIMIT) this.#until.clear();
    this.#until.set(throttleKey(address), {
      until: Date.now() + Number(info.metadata.retry_after) * 1000,
      limit: Number(info.metadata.limit),
    });
  }

  #forgetEnded(): void {
    const now = Date.now();
    for (const [key, entry] of this.#until) if (entry.until <= now) this.#until.delete(key);
  }
}
