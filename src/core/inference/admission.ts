import { x402NotTaken } from "../errors.js";
import type { RateLimitDecision, RateLimiter } from "../ports/rate-limits.js";
import { clientNotAllowed, rateLimited } from "./inference-errors.js";

/** The client policies, as TOLLGATE_CLIENT_POLICY names them. */
export const CLIENT_POLICIES = ["any", "coding-agent-only"] as const;

/** Which clients may make text calls: everyone, or only the Claude Code CLI. */
export type ClientPolicy = (typeof CLIENT_POLICIES)[number];

/** The Claude Code CLI's user agent: `claude-cli/<version> (external, cli|sdk-cli)`. */
const CODING_AGENT = /^claude-cli\//;

/** Whether a text call from a client with this `User-Agent` is admitted under `policy`. */
export function clientAllowed(policy: ClientPolicy, userAgent: string): boolean {
  return policy === "any" || CODING_AGENT.test(userAgent);
}

/** Who pays for a model call (text or image), as the Inference service hands it over. */
export interface PaidCaller {
  /** "" for a call without a key: it pays with {@link payment} (x402). */
  readonly accountId: string;
  readonly keyId: string;
  readonly requestId: string;
  readonly billingChain: string;
  /** A keyless call's x402 payment (the PAYMENT-SIGNATURE value); "" when none. */
  readonly payment: string;
  /** The gateway's origin as the facade saw it, for an x402 offer's resource URL. */
  readonly origin: string | undefined;
}

/** What admitting a caller needs. */
export interface AdmissionDeps {
  readonly now: () => number;
  /** Present when calls may pay with x402 instead of a key. */
  readonly x402?: unknown;
}

/**
 * Admits a paid call's caller before its request is read: a text call's client (`client`, its
 * policy and User-Agent) must be one the deployment admits (403); a keyless call is refused (401)
 * where x402 is not taken; a keyed call takes one from its key's `limit` (429 past it). A keyless
 * call is limited per payer once its payment says who pays ({@link holdPaidCall}): undefined then.
 */
export async function admitCaller(
  deps: AdmissionDeps,
  limit: RateLimiter,
  caller: PaidCaller,
  client?: { readonly policy: ClientPolicy; readonly userAgent: string },
): Promise<RateLimitDecision | undefined> {
  if (client !== undefined) checkClient(client.policy, client.userAgent);
  if (caller.accountId !== "") return takeLimit(deps, limit, caller.keyId);
  if (deps.x402 === undefined) throw x402NotTaken();
  return undefined;
}

/** Takes one call from `limit` under `key`; 429 past it. */
export async function takeLimit(
  deps: Pick<AdmissionDeps, "now">,
  limit: RateLimiter,
  key: string,
): Promise<RateLimitDecision> {
  const decision = await limit.consume(key);
  if (!decision.allowed) throw rateLimited(decision, deps.now());
  return decision;
}

/** Refuses a text call from a client the deployment's policy does not admit. */
export function checkClient(policy: ClientPolicy, userAgent: string): void {
  if (!clientAllowed(policy, userAgent)) throw clientNotAllowed();
}
