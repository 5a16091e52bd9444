import { timingSafeEqual } from "node:crypto";
import { accountSuspended, keyMalformed, keyMissing, keyRevoked, keyUnknown } from "../errors.js";
import type { AccountStore, KeyLookupRow } from "../ports/accounts.js";
import { type Credential, credentialOf } from "./credentials.js";
import { isWellFormedKey } from "./keys.js";

/** Who an authenticated key belongs to. */
export interface AuthenticatedKey {
  readonly accountId: string;
  readonly keyId: string;
}

/** Last use is recorded at most this often per key, so authentication rarely writes. */
export const LAST_USED_GRANULARITY_MS = 60_000;

/** Keys remembered at most; past it the cache starts over (a bound, not an eviction policy). */
const CACHE_LIMIT = 10_000;

/** A looked-up key, and when this process last recorded its use. */
interface CachedKey {
  readonly row: KeyLookupRow;
  lastUsedAt: number;
}

/** Turns a presented API key into its account, or the precise reason it cannot. */
export class Authenticator {
  /** Known keys by digest, valid while the store's change stamp is `#stamp`. */
  readonly #cache = new Map<string, CachedKey>();
  #stamp: number | undefined;

  constructor(
    private readonly store: AccountStore,
    private readonly now: () => number,
  ) {}

  /**
   * Checks `presented` against the stored digests. Lookups are cached, but the whole cache is
   * dropped as soon as the store's change stamp moves — a revocation, suspension or reactivation
   * by this process or another such as the CLI — so they take effect on the very next request. A
   * cached key costs one stamp read and no other store call. The digest is the credential's own
   * (computed once per credential, shared with the known-credentials records).
   */
  async authenticate(presented: string | Credential | undefined): Promise<AuthenticatedKey> {
    if (presented === undefined || presented === "") throw keyMissing();
    const credential = credentialOf(presented);
    if (credential.secret === "") throw keyMissing();
    if (!isWellFormedKey(credential.secret)) throw keyMalformed();
    const digest = credential.digest;
    const entry = await this.lookup(digest);
    const row = entry?.row;
    // The lookup is by digest; the constant-time compare guards against any collation surprise.
    if (row === undefined || !timingSafeEqual(row.digest, digest)) throw keyUnknown();
    if (row.revoked_at !== null) throw keyRevoked();
    if (row.account_status !== "active") throw accountSuspended();
    const now = this.now();
    if (entry!.lastUsedAt < now - LAST_USED_GRANULARITY_MS) {
      await this.store.touchKey(row.id, now, now - LAST_USED_GRANULARITY_MS);
      entry!.lastUsedAt = now;
    }
    return { accountId: row.account_id, keyId: row.id };
  }

  private async lookup(digest: Buffer): Promise<CachedKey | undefined> {
    const stamp = await this.store.changeStamp();
    if (stamp !== this.#stamp) {
      this.#cache.clear();
      this.#stamp = stamp;
    }
    const id = digest.toString("base64");
    const cached = this.#cache.get(id);
    if (cached !== undefined) return cached;
    // Unknown keys are not remembered: a key created a moment later must work at once.
    const row = await this.store.findKeyByDigest(digest);
    if (row === undefined) return undefined;
    const entry = { row, lastUsedAt: row.last_used_at ?? Number.NEGATIVE_INFINITY };
    // The row is at least as new as `stamp`. If a concurrent request has since seen the stamp
    // move, the row may predate that change: it answers this request but is not remembered.
    if (this.#stamp !== stamp) return entry;
    if (this.#cache.size >= CACHE_LIMIT) this.#cache.clear();
    this.#cache.set(id, entry);
    return entry;
  }
}
