import { createHash } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { invalidField, reasonError } from "../errors.js";
import { newId } from "../ids.js";
import type { IdempotencyRecord, IdempotencyStore } from "../ports/idempotency.js";

/** How long a key names its first call: a retry within it is answered from the store. */
export const IDEMPOTENCY_TTL_MS = 24 * 60 * 60_000;
/**
 * The largest answer kept for a replay (a stream's events, an image's bytes). 64 MiB: a
 * non-streaming message (read up to that size) always fits; a stream above it is refused on
 * retry (409 IDEMPOTENCY_ANSWER_NOT_KEPT) rather than run again.
 */
export const IDEMPOTENCY_ANSWER_LIMIT = 64 * 1024 * 1024;
/** A key: 1 to 255 printable ASCII characters (as Stripe's and the SDKs' keys are). */
const KEY_FORMAT = /^[\x21-\x7e][\x20-\x7e]{0,254}$/;
/** Expired keys are swept by a claim at most this often (a claim also frees its own expired key). */
const SWEEP_INTERVAL_MS = 60_000;

/** What idempotent calls are built from. */
export interface IdempotencyDeps {
  readonly store: IdempotencyStore;
  readonly now: () => number;
  /** The longest a call may run (hold expiry): a claim older than this was abandoned. */
  readonly maxCallMs: number;
  readonly onError: (error: unknown, context: string) => void;
}

/** What a call with a key is to do: replay the first call's answer, or run and keep its answer. */
export type IdempotentStart =
  | { readonly kind: "replay"; readonly answer: Uint8Array }
  | { readonly kind: "run"; readonly claim: IdempotentClaim };

/** A key this call holds while it runs. */
export interface IdempotentClaim {
  /**
   * Keeps the call's answer for the retries; undefined (or an answer above
   * {@link IDEMPOTENCY_ANSWER_LIMIT}) keeps only that it was answered, refused on retry.
   */
  complete(answer: Uint8Array | undefined): Promise<void>;
  /** Frees the key: the call charged nothing, so a retry runs afresh. */
  release(): Promise<void>;
}

/**
 * `Idempotency-Key` for billed calls (docs/inference.md, "Idempotent calls"): the first call
 * with a key runs and its answer is kept for 24 hours; a retry with the same key and the same
 * route and body gets that answer without running or billing again (a 409 while the first still
 * runs), the same key with another body is a 422. Keys are per account.
 */
export class IdempotentCalls {
  private lastSweep = 0;

  constructor(private readonly deps: IdempotencyDeps) {}

  /**
   * Claims `key` for a call on `route` whose request is `request` (its bytes as sent); undefined
   * when no key was given. Throws 400 for a malformed key, 409 while the first call runs (or when
   * its answer was too large to keep), 422 when the key named another request.
   */
  async start(
    accountId: string,
    key: string,
    route: string,
    request: Uint8Array,
  ): Promise<IdempotentStart | undefined> {
    if (key === "") return undefined;
    if (!KEY_FORMAT.test(key))
      throw invalidField(
        "idempotency_key",
        "Idempotency-Key must be 1 to 255 printable ASCII characters, not starting with a space.",
      );
    const requestHash = createHash("sha256").update(route).update("\n").update(request).digest("hex");
    this.sweepNowAndThen();
    const now = this.deps.now();
    const claimId = newId("idem");
    const held = await this.deps.store.claim({
      accountId,
      key,
      claimId,
      requestHash,
      now,
      expiresAt: now + IDEMPOTENCY_TTL_MS,
      staleBefore: now - this.deps.maxCallMs,
    });
    if (held === undefined) return { kind: "run", claim: this.claim(accountId, key, claimId) };
    return { kind: "replay", answer: answerOf(held, requestHash) };
  }

  private claim(accountId: string, key: string, claimId: string): IdempotentClaim {
    const { store, onError } = this.deps;
    return {
      complete: async (answer) => {
        const kept =
          answer !== undefined && answer.byteLength <= IDEMPOTENCY_ANSWER_LIMIT ? answer : undefined;
        // A failed write leaves the key held until the claim is stale: a retry meanwhile gets a
        // 409, never a second billed run.
        await store.complete(accountId, key, claimId, kept).catch((error: unknown) => {
          onError(error, `keeping the answer of idempotency key ${JSON.stringify(key)}`);
        });
      },
      release: async () => {
        await store.release(accountId, key, claimId).catch((error: unknown) => {
          onError(error, `releasing idempotency key ${JSON.stringify(key)}`);
        });
      },
    };
  }

  /** Deletes expired keys at most once a minute, in the background of a claim. */
  private sweepNowAndThen(): void {
    const now = this.deps.now();
    if (now - this.lastSweep < SWEEP_INTERVAL_MS) return;
    this.lastSweep = now;
    this.deps.store.sweep(now).catch((error: unknown) => {
      this.deps.onError(error, "sweeping expired idempotency keys");
    });
  }
}

/**
 * Starts a call with `key` on `calls`, or refuses a key when the core keeps none (Unimplemented:
 * a key ignored would let a retry bill twice).
 */
export function startIdempotent(
  calls: IdempotentCalls | undefined,
  accountId: string,
  key: string,
  route: string,
  request: Uint8Array,
): Promise<IdempotentStart | undefined> {
  if (key === "") return Promise.resolve(undefined);
  if (calls === undefined)
    return Promise.reject(new ConnectError("This core keeps no idempotency keys.", Code.Unimplemented));
  return calls.start(accountId, key, route, request);
}

/**
 * The kept answer of the call holding a key. Throws when the key names another request, or its
 * answer is not to be had (yet).
 */
function answerOf(held: IdempotencyRecord, requestHash: string): Uint8Array {
  if (held.requestHash !== requestHash)
    throw reasonError(
      Code.FailedPrecondition,
      "IDEMPOTENCY_KEY_REUSED",
      "This Idempotency-Key was used with a different request in the last 24 hours; use a new key for a new request.",
    );
  if (held.answerDropped)
    throw reasonError(
      Code.FailedPrecondition,
      "IDEMPOTENCY_ANSWER_NOT_KEPT",
      "The call with this Idempotency-Key was answered and billed, but its answer was too large to keep for a replay; use a new key to run it again.",
    );
  if (held.answer === undefined) throw keyInUse();
  return held.answer;
}

const keyInUse = (): ConnectError =>
  reasonError(
    Code.Aborted,
    "IDEMPOTENCY_KEY_IN_USE",
    "A call with this Idempotency-Key is still running; retry once it has finished to get its answer.",
  );
