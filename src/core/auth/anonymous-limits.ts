import { Code, type ConnectError } from "@connectrpc/connect";
import { reasonError } from "../errors.js";
import {
  type RateLimitDecision,
  type RateLimiter,
  type RateLimiterFactory,
  refusalMetadata,
  retryAfterSeconds,
} from "../ports/rate-limits.js";
import { throttleKey } from "./client-address.js";

/**
 * Work anyone may ask for without a key, each limited per client address: a keyless billed call
 * (an x402 offer, or a payment to verify) and a dashboard sign-in nonce.
 */
export type AnonymousWork = "call" | "nonce";

/** How anonymous work is limited per client address (TOLLGATE_ANONYMOUS_CALLS_PER_MINUTE, …). */
export interface AnonymousLimitsConfig {
  /** Where the counts live: this process's memory, or Redis shared by every host. */
  readonly rateLimiter: RateLimiterFactory;
  /** Keyless billed calls (offers and payments alike) an address may make per minute; 0: unlimited. */
  readonly callsPerMinute: number;
  /** Sign-in nonces an address may ask for per minute; 0: unlimited. */
  readonly noncesPerMinute: number;
}

/** The limits' names in a shared store (`tollgate:rl:<name>:<address>` in Redis). */
const LIMIT_NAMES: Record<AnonymousWork, string> = {
  call: "anonymous_calls",
  nonce: "sign_in_nonces",
};

const WHAT: Record<AnonymousWork, string> = {
  call: "calls without an API key",
  nonce: "sign-in nonces",
};

/** An address over its budget of anonymous work; metadata says when to come back. */
export const anonymousThrottled = (
  work: AnonymousWork,
  decision: RateLimitDecision,
  now: number,
): ConnectError =>
  reasonError(
    Code.ResourceExhausted,
    "ANONYMOUS_THROTTLED",
    `Too many ${WHAT[work]} from this address (more than ${decision.limit} a minute); ` +
      `try again in ${retryAfterSeconds(decision)} s.`,
    { work, ...refusalMetadata(decision, now) },
  );

/**
 * Counts anonymous work per client address (its IPv6 /64, see {@link throttleKey}) and refuses
 * what goes over, before the work costs anything: a keyless call before its body is read or its
 * payment reaches the facilitator, a nonce before it is written. A key's own calls are never
 * counted here (they have their per-key limits).
 */
export class AnonymousLimits {
  readonly #limits: Partial<Record<AnonymousWork, RateLimiter>> = {};

  /** Without `config` (the operator's CLI, or an embedding that sets none) nothing is limited. */
  constructor(
    config: AnonymousLimitsConfig | undefined,
    private readonly now: () => number,
  ) {
    if (config === undefined) return;
    const perMinute: Record<AnonymousWork, number> = {
      call: config.callsPerMinute,
      nonce: config.noncesPerMinute,
    };
    for (const work of ["call", "nonce"] as const) {
      if (perMinute[work] > 0) {
        this.#limits[work] = config.rateLimiter(LIMIT_NAMES[work], perMinute[work], 60_000);
      }
    }
  }

  /**
   * Counts one piece of `work` for the client at `address`, or throws ANONYMOUS_THROTTLED when
   * the address is over its limit. Without an address (an in-process call that named none)
   * nothing is counted.
   */
  async admit(work: AnonymousWork, address: string | undefined): Promise<void> {
    const limit = this.#limits[work];
    if (limit === undefined || address === undefined || address === "") return;
    const decision = await limit.consume(throttleKey(address));
    if (!decision.allowed) throw anonymousThrottled(work, decision, this.now());
  }
}
