import { Code, ConnectError } from "@connectrpc/connect";
import { errorInfo, reasonError } from "../errors.js";
import {
  type RateLimitDecision,
  type RateLimiter,
  type RateLimiterFactory,
  refusalMetadata,
  retryAfterSeconds,
} from "../ports/rate-limits.js";
import { throttleKey } from "./client-address.js";
import type { Credential } from "./credentials.js";
import { KnownCredentials } from "./known-credentials.js";

/** How failed authentications are throttled per client address. */
export interface AuthFailureLimits {
  /** Where the counts live: this process's memory, or Redis shared by every host. */
  readonly rateLimiter: RateLimiterFactory;
  /** Failures an address may have within a minute; the next one blocks it. */
  readonly perMinute: number;
  /** How long an address stays refused from the failure that went over. */
  readonly blockMs: number;
}

/**
 * The reasons that count as a failure: a key or a signed sign-in was presented and it is none.
 * Not a missing key (nothing was tried), nor a revoked key or suspended account (the key is
 * real, its owner known: one such client must not shut out its neighbours behind a shared
 * address).
 */
const FAILURES: ReadonlySet<string> = new Set(["KEY_MALFORMED", "KEY_UNKNOWN", "SIGN_IN_REFUSED"]);

/** An address over its budget of failed authentications; metadata says when to come back. */
export const authThrottled = (decision: RateLimitDecision, now: number): ConnectError =>
  reasonError(
    Code.ResourceExhausted,
    "AUTH_THROTTLED",
    `Too many failed authentications from this address (more than ${decision.limit} a minute); ` +
      `try again in ${retryAfterSeconds(decision)} s.`,
    refusalMetadata(decision, now),
  );

/**
 * Throttles failed authentications per client address. A blocked address is refused before its
 * credential is looked up (no store lookup): what a guesser costs the gateway stops at one counter
 * read and a hash. Only failures are counted, so any number of valid calls from one address (a
 * NAT, an office) never trips it. While the address is blocked, a credential that authenticated
 * from it before keeps working there (issue 29: behind a shared address, 114 of 120 valid calls
 * were refused during a guessing run); any other credential is refused unchecked, a valid one
 * included: checking it would tell the guesser which guess was right, which is the very thing the
 * throttle exists to slow down.
 */
export class AuthThrottle {
  readonly #failures: RateLimiter | undefined;
  /** Credentials that authenticated, per address: they pass a block of that address. */
  readonly #known = new KnownCredentials();

  /** Without `limits` (TOLLGATE_AUTH_FAILURES_PER_MINUTE=0, or the operator's CLI) nothing is throttled. */
  constructor(
    limits: AuthFailureLimits | undefined,
    private readonly now: () => number,
  ) {
    this.#failures = limits?.rateLimiter("auth_failures", limits.perMinute, 60_000, {
      blockMs: limits.blockMs,
    });
  }

  /**
   * Runs `check` (a key lookup, a sign-in) for the client at `address`: refused with
   * AUTH_THROTTLED without running it while the address is blocked, unless `credential` (the key
   * or token `check` verifies) passed a check from this address before; a failure of `check` is
   * counted, and the one that goes over the budget is answered as the block it starts. Without an
   * address (an in-process call that named none) `check` simply runs.
   */
  async guard<T>(
    address: string | undefined,
    check: () => Promise<T>,
    credential?: string | Credential,
  ): Promise<T> {
    const failures = this.#failures;
    if (failures === undefined || address === undefined || address === "") return await check();
    const key = throttleKey(address);
    const standing = await failures.peek(key);
    if (!standing.allowed && (credential === undefined || !this.#known.has(address, credential))) {
      throw authThrottled(standing, this.now());
    }
    try {
      const passed = await check();
      if (credential !== undefined) this.#known.add(address, credential);
      return passed;
    } catch (error) {
      if (!isFailure(error)) throw error;
      const counted = await failures.consume(key);
      throw counted.allowed ? error : authThrottled(counted, this.now());
    }
  }
}

function isFailure(error: unknown): boolean {
  return error instanceof ConnectError && FAILURES.has(errorInfo(error)?.reason ?? "");
}
