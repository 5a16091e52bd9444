import { MAX_IMAGE_REQUEST_BYTES } from "./images.js";
import { type Env, integer, url } from "./read.js";

/** Rate limits, throttles and caps, and where they are counted. */
export interface LimitsConfig {
  /** Redis for rate limits shared by every gateway host; unset: each process counts in memory. */
  readonly redisUrl: string | undefined;
  /** Requests per minute per key on billed endpoints. */
  readonly rateLimitPerMinute: number;
  /** Requests per minute per key on count_tokens. */
  readonly countTokensPerMinute: number;
  /** Failed authentications a client address may have per minute before it is blocked; 0: no throttle. */
  readonly authFailuresPerMinute: number;
  /** How long an address that went over that budget is refused, from its last counted failure. */
  readonly authBlockMs: number;
  /** Keyless billed calls (x402 offers and payments) a client address may make per minute; 0: unlimited. */
  readonly anonymousCallsPerMinute: number;
  /** Dashboard sign-in nonces a client address may ask for per minute; 0: unlimited. */
  readonly signInNoncesPerMinute: number;
  /**
   * The largest body a keyless call may send before it carries an x402 payment (an offer is all
   * it can get): messages and image generations, and image edits' uploads.
   */
  readonly unpaidBodyBytes: { readonly json: number; readonly upload: number };
  /** Live (unrevoked) API keys an account may have at once. */
  readonly maxLiveKeys: number;
}

export function limitsConfig(env: Env): LimitsConfig {
  return {
    redisUrl: url(env, "TOLLGATE_REDIS_URL", {
      schemes: ["redis:", "rediss:"],
      shape: "redis://[:password@]host:port[/db]",
      problem: "must be a redis:// or rediss:// URL",
    })?.raw,
    rateLimitPerMinute: integer(env, "TOLLGATE_RATE_LIMIT_RPM", 600, 1, 1_000_000),
    countTokensPerMinute: integer(env, "TOLLGATE_COUNT_TOKENS_RPM", 6_000, 1, 1_000_000),
    authFailuresPerMinute: integer(env, "TOLLGATE_AUTH_FAILURES_PER_MINUTE", 30, 0, 1_000_000),
    authBlockMs: integer(env, "TOLLGATE_AUTH_BLOCK_S", 60, 1, 86_400) * 1000,
    anonymousCallsPerMinute: integer(env, "TOLLGATE_ANONYMOUS_CALLS_PER_MINUTE", 300, 0, 1_000_000),
    signInNoncesPerMinute: integer(env, "TOLLGATE_SIGN_IN_NONCES_PER_MINUTE", 30, 0, 1_000_000),
    unpaidBodyBytes: {
      // Anthropic's request limit is 32 MiB; an unpaid call is an offer only.
      json: integer(env, "TOLLGATE_X402_UNPAID_BODY_BYTES", 1024 * 1024, 1024, 32 * 1024 * 1024),
      upload: integer(
        env,
        "TOLLGATE_X402_UNPAID_UPLOAD_BYTES",
        4 * 1024 * 1024,
        1024,
        MAX_IMAGE_REQUEST_BYTES,
      ),
    },
    maxLiveKeys: integer(env, "TOLLGATE_MAX_LIVE_KEYS", 20, 1, 100_000),
  };
}
