/**
 * The idempotency port: the `Idempotency-Key`s of billed calls, so that a retried call is
 * answered with its first answer instead of being run (and billed) again. Kept in the store
 * (SQLite or PostgreSQL) so that every gateway host sees every claim.
 */

/** A key as one call claims it. */
export interface IdempotencyClaim {
  /** Keys are scoped to an account: two accounts' keys never meet. */
  readonly accountId: string;
  readonly key: string;
  /** Names this claim (a random id): only its holder completes or releases it. */
  readonly claimId: string;
  /** What the call asked for: a hash of its route and body. */
  readonly requestHash: string;
  readonly now: number;
  /** When the key becomes free again (24 hours on). */
  readonly expiresAt: number;
  /** A call still running from before this instant is abandoned (its host died): it is taken over. */
  readonly staleBefore: number;
}

/** A key someone else holds. */
export interface IdempotencyRecord {
  readonly requestHash: string;
  /** The first call's answer (opaque to the store); undefined while that call runs. */
  readonly answer: Uint8Array | undefined;
  /** The first call finished but its answer was too large to keep. */
  readonly answerDropped: boolean;
}

/** Where idempotency keys are kept. */
export interface IdempotencyStore {
  /**
   * Claims a key atomically: undefined when this call now holds it (it was free, expired, or
   * held by an abandoned call), else the record standing in the way. Two concurrent claims of
   * one key never both succeed.
   */
  claim(claim: IdempotencyClaim): Promise<IdempotencyRecord | undefined>;
  /** Keeps the answer of the call holding `claimId` (undefined: too large to keep). */
  complete(accountId: string, key: string, claimId: string, answer: Uint8Array | undefined): Promise<void>;
  /** Frees a key whose call charged nothing, so that a retry runs afresh. */
  release(accountId: string, key: string, claimId: string): Promise<void>;
  /** Deletes every key expired at `now`; returns how many. */
  sweep(now: number): Promise<number>;
}
