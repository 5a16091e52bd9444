import type { RateLimiter } from "../ports/rate-limits.js";
import { type ClientPolicy, checkClient, takeLimit } from "./admission.js";
import { upstreamError } from "./inference-errors.js";
import { outgoingBody, type PrepareDeps, prepareRequest } from "./prepare.js";
import { countWithProvider, inputTokensOf, type ProviderDeps } from "./provider-call.js";
import type { TextCall, TokenCount } from "./text-call.js";

/** What counting a request's tokens needs. */
export interface CountTokensDeps extends PrepareDeps, ProviderDeps {
  /** Per-key limit on count_tokens. */
  readonly countTokensLimit: RateLimiter;
  readonly clientPolicy: ClientPolicy;
  readonly now: () => number;
}

/** A count_tokens call, as the Inference service hands it over (no payment, no hold). */
export type CountTokensCall = Omit<
  TextCall,
  "accountId" | "billingChain" | "requestId" | "payment" | "origin"
> & {
  readonly requestId?: string;
};

/** Counts a request's input tokens with the provider's counter; not funds-gated, not billed. */
export async function countTokens(deps: CountTokensDeps, call: CountTokensCall): Promise<TokenCount> {
  checkClient(deps.clientPolicy, call.userAgent);
  const rateLimit = await takeLimit(deps, deps.countTokensLimit, call.keyId);
  // The same repair, tool checks and model names as a call: what can be counted can be sent.
  const prepared = prepareRequest(deps, call.body, "count_tokens");
  const text = await countWithProvider(deps, outgoingBody(prepared, call.body), call, prepared);
  let inputTokens: number;
  try {
    inputTokens = inputTokensOf(text);
  } catch (error) {
    deps.log.error({ err: error, requestId: call.requestId }, "provider answered count_tokens with no count");
    throw upstreamError("a count without input_tokens");
  }
  return { inputTokens, body: Buffer.from(text), rateLimit, repairedParams: prepared.repaired };
}
