/**
 * The shapes of a text call as the Inference service hands it over and gets it back: the call, the
 * parts of its answer (head, body or events, settled part) and a count_tokens answer. The steps
 * (text-inference.ts and the files it calls) share them.
 */
import type { RateLimitDecision } from "../ports/rate-limits.js";
import type { PaidCaller } from "./admission.js";
import type { Settled } from "./settlement.js";

/** A paying caller's text call, as the Inference service hands it over. */
export interface TextCall extends PaidCaller {
  readonly body: Uint8Array;
  readonly anthropicVersion: string;
  readonly anthropicBeta: string;
  readonly userAgent: string;
}

/** Everything known before the first byte of an answer. */
export interface MessageHead {
  readonly requestId: string;
  readonly billingChain: string;
  readonly model: string;
  readonly repairedParams: readonly string[];
  /** The client's max_tokens when it was clamped, else undefined. */
  readonly clampedFrom: number | undefined;
  readonly rateLimit: RateLimitDecision;
  readonly stream: boolean;
  readonly upstreamRequestId: string;
}

/**
 * One piece of an answer: the head first, then one message or a run of events, then — when the
 * call ran to its end — what it was charged (in the chain's ledger units), once settled.
 */
export type MessagePart =
  | { readonly kind: "head"; readonly head: MessageHead }
  | { readonly kind: "message"; readonly body: Uint8Array }
  | { readonly kind: "event"; readonly event: string; readonly data: string }
  | { readonly kind: "comment"; readonly text: string }
  | ({ readonly kind: "settled" } & Settled);

/** A count_tokens answer. */
export interface TokenCount {
  readonly inputTokens: number;
  readonly body: Uint8Array;
  readonly rateLimit: RateLimitDecision;
  readonly repairedParams: readonly string[];
}
