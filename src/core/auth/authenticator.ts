import { timingSafeEqual } from "node:crypto";
import type { AuthRepository } from "../../store/auth-repository.js";
import { accountSuspended, keyMalformed, keyMissing, keyRevoked, keyUnknown } from "../errors.js";
import { digestKey, isWellFormedKey } from "./keys.js";

/** Who an authenticated key belongs to. */
export interface AuthenticatedKey {
  readonly accountId: string;
  readonly keyId: string;
}

/** Last use is recorded at most this often per key, so authentication rarely writes. */
export const LAST_USED_GRANULARITY_MS = 60_000;

/** Turns a presented API key into its account, or the precise reason it cannot. */
export class Authenticator {
  constructor(
    private readonly repo: AuthRepository,
    private readonly now: () => number,
  ) {}

  /**
   * Checks `presented` against the stored digests. Revocation and suspension are read from the
   * database on every call, so they take effect on the very next request.
   */
  authenticate(presented: string | undefined): AuthenticatedKey {
    if (presented === undefined || presented === "") throw keyMissing();
    if (!isWellFormedKey(presented)) throw keyMalformed();
    const digest = digestKey(presented);
    const row = this.repo.findKeyByDigest(digest);
    // The lookup is by digest; the constant-time compare guards against any collation surprise.
    if (row === undefined || !timingSafeEqual(row.digest, digest)) throw keyUnknown();
    if (row.revoked_at !== null) throw keyRevoked();
    if (row.account_status !== "active") throw accountSuspended();
    const now = this.now();
    this.repo.touchKey(row.id, now, now - LAST_USED_GRANULARITY_MS);
    return { accountId: row.account_id, keyId: row.id };
  }
}
