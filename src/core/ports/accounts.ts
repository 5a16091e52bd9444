/**
 * What the auth code needs from storage: accounts and their API keys, and the wallet sign-in
 * tables (nonces, identities, dashboard sessions). The core declares these ports and `src/store/`
 * implements them; every method is asynchronous so a store may live off the event loop.
 */

/** An account's standing: a suspended account's keys and sessions are refused. */
export type AccountStatusText = "active" | "suspended";

/** An account as stored. */
export interface AccountRow {
  readonly id: string;
  readonly name: string;
  readonly status: AccountStatusText;
  readonly suspended_reason: string;
  readonly created_at: number;
}

/** A page of accounts, and the cursor of its last one (undefined for an empty page). */
export interface AccountPage {
  readonly rows: AccountRow[];
  readonly lastSeq: number | undefined;
}

/** An API key as stored, without its digest. */
export interface KeyRow {
  readonly id: string;
  readonly account_id: string;
  readonly name: string;
  readonly prefix: string;
  readonly created_at: number;
  readonly last_used_at: number | null;
  readonly revoked_at: number | null;
}

/** What authenticating a digest needs: the key, its stored digest and its account's status. */
export interface KeyLookupRow extends KeyRow {
  readonly digest: Buffer;
  readonly account_status: AccountStatusText;
}

/** The wallet families that can sign in. */
export type WalletFamilyText = "evm" | "solana";

/** A wallet address that signs in to an account. */
export interface IdentityRow {
  readonly family: WalletFamilyText;
  readonly address: string;
  readonly account_id: string;
  readonly linked_at: number;
}

/** A dashboard session as stored: never the token, only its digest. */
export interface SessionRow {
  readonly id: string;
  readonly account_id: string;
  readonly created_at: number;
  readonly expires_at: number;
  readonly ended_at: number | null;
}

/** The account a first sign-in creates, named by the caller so the store need not mint ids. */
export interface NewAccount {
  readonly id: string;
  readonly name: string;
}

/** Accounts and their API keys. */
export interface AccountStore {
  /** Inserts an active account and returns it. */
  insertAccount(id: string, name: string, now: number): Promise<AccountRow>;
  /** The account with this id, if there is one. */
  getAccount(id: string): Promise<AccountRow | undefined>;
  /** A page of accounts in creation order, after the cursor `afterSeq` (0 for the first page). */
  listAccounts(afterSeq: number, limit: number): Promise<AccountPage>;
  /** Sets an account's status and the reason shown for it ("" once active again). */
  setAccountStatus(id: string, status: AccountStatusText, reason: string): Promise<void>;
  /** Inserts a key by its digest (the secret is never stored) and returns it. */
  insertKey(
    id: string,
    accountId: string,
    name: string,
    prefix: string,
    digest: Buffer,
    now: number,
  ): Promise<KeyRow>;
  /**
   * Inserts a key like {@link insertKey} only while the account has fewer than `maxLive` live
   * (unrevoked) keys; undefined, with nothing written, when it has that many already. The count
   * and the insert are one atomic step: of two concurrent calls for the last free place, one
   * inserts and the other gets undefined, on every host.
   */
  insertKeyWithinCap(
    id: string,
    accountId: string,
    name: string,
    prefix: string,
    digest: Buffer,
    now: number,
    maxLive: number,
  ): Promise<KeyRow | undefined>;
  /** The key with this id, revoked or not, if there is one. */
  getKey(id: string): Promise<KeyRow | undefined>;
  /** An account's keys, newest first. */
  listKeys(accountId: string): Promise<KeyRow[]>;
  /** Marks a key revoked; a key revoked already keeps its first revocation time. */
  revokeKey(id: string, now: number): Promise<void>;
  /** The key with this digest and its account's status, for authentication. */
  findKeyByDigest(digest: Buffer): Promise<KeyLookupRow | undefined>;
  /** Records a use, writing only when the stored time is older than `staleBefore`. */
  touchKey(id: string, now: number, staleBefore: number): Promise<void>;
  /**
   * A number that changes whenever a key or account changes in a way that can alter an
   * authentication (revocation, suspension, reactivation, deletion), whichever process made the
   * change, and on nothing else: cached lookups stay valid while it stands still. Read per request.
   */
  changeStamp(): Promise<number>;
}

/** Sign-in nonces, wallet identities and dashboard sessions. */
export interface SessionStore {
  /** Stores a single-use sign-in nonce that is void from `expiresAt`. */
  insertNonce(nonce: string, expiresAt: number): Promise<void>;
  /** Marks a nonce used; false when it is unknown, used already, or expired at `now`. */
  useNonce(nonce: string, now: number): Promise<boolean>;
  /** Forgets nonces that expired before `now`: they can no longer be used either way. */
  purgeNonces(now: number): Promise<void>;
  /**
   * The account an identity signs in to. An identity not seen before gets `account` (created
   * active) in the same transaction as the identity, so two first sign-ins cannot make two.
   */
  accountForIdentity(
    family: WalletFamilyText,
    address: string,
    account: NewAccount,
    now: number,
  ): Promise<{ accountId: string; created: boolean }>;
  /**
   * Links an identity to `accountId` unless it is linked already, in one transaction; returns the
   * account it is linked to, which is another one when it already signed in elsewhere.
   */
  linkIdentity(family: WalletFamilyText, address: string, accountId: string, now: number): Promise<string>;
  /** An account's identities, oldest link first. */
  listIdentities(accountId: string): Promise<IdentityRow[]>;
  /** Stores a session under its token's digest. */
  insertSession(id: string, digest: Buffer, accountId: string, now: number, expiresAt: number): Promise<void>;
  /** The session whose token has this digest, ended or expired or not. */
  findSession(digest: Buffer): Promise<SessionRow | undefined>;
  /** Ends a session; ending an ended one keeps its first end time. */
  endSession(id: string, now: number): Promise<void>;
}
