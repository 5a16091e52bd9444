import type { Db } from "./database.js";

export type AccountStatusText = "active" | "suspended";

/** An account row as stored. */
export interface AccountRow {
  readonly id: string;
  readonly name: string;
  readonly status: AccountStatusText;
  readonly suspended_reason: string;
  readonly created_at: number;
}

/** A key row as stored, without its digest. */
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

/**
 * Revocations and suspensions per connection. `data_version` does not move for a connection's
 * own commits, and several repositories (the serving core's and an operator core's) can share
 * one connection, so the count lives with the connection, not the repository.
 */
const localChanges = new WeakMap<Db, number>();

const KEY_COLUMNS = "id, account_id, name, prefix, created_at, last_used_at, revoked_at";

/** Accounts and API keys in SQLite. Statements are prepared once, here. */
export class AuthRepository {
  private readonly statements;
  readonly #db: Db;

  constructor(db: Db) {
    this.#db = db;
    this.statements = {
      // Changes whenever another connection (the CLI, another gateway) commits to the file.
      dataVersion: db.prepare<[], number>("PRAGMA data_version").pluck(),
      insertAccount: db.prepare<[string, string, number]>(
        "INSERT INTO accounts (id, name, status, created_at) VALUES (?, ?, 'active', ?)",
      ),
      getAccount: db.prepare<[string], AccountRow>("SELECT * FROM accounts WHERE id = ?"),
      listAccounts: db.prepare<[number, number], AccountRow & { seq: number }>(
        "SELECT rowid AS seq, * FROM accounts WHERE rowid > ? ORDER BY rowid LIMIT ?",
      ),
      setAccountStatus: db.prepare<[AccountStatusText, string, string]>(
        "UPDATE accounts SET status = ?, suspended_reason = ? WHERE id = ?",
      ),
      insertKey: db.prepare<[string, string, string, string, Buffer, number]>(
        "INSERT INTO api_keys (id, account_id, name, prefix, digest, created_at) VALUES (?, ?, ?, ?, ?, ?)",
      ),
      getKey: db.prepare<[string], KeyRow>(`SELECT ${KEY_COLUMNS} FROM api_keys WHERE id = ?`),
      listKeys: db.prepare<[string], KeyRow>(
        `SELECT ${KEY_COLUMNS} FROM api_keys WHERE account_id = ? ORDER BY created_at DESC, rowid DESC`,
      ),
      revokeKey: db.prepare<[number, string]>(
        "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
      ),
      findByDigest: db.prepare<[Buffer], KeyLookupRow>(
        `SELECT k.id, k.account_id, k.name, k.prefix, k.created_at, k.last_used_at, k.revoked_at, k.digest,
                a.status AS account_status
           FROM api_keys k JOIN accounts a ON a.id = k.account_id
          WHERE k.digest = ?`,
      ),
      touchKey: db.prepare<[number, string, number]>(
        "UPDATE api_keys SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)",
      ),
    };
  }

  /** Inserts an active account. */
  createAccount(id: string, name: string, now: number): AccountRow {
    this.statements.insertAccount.run(id, name, now);
    return this.getAccount(id)!;
  }

  getAccount(id: string): AccountRow | undefined {
    return this.statements.getAccount.get(id);
  }

  /** A page of accounts in creation order, after the cursor `afterSeq` (0 for the first page). */
  listAccounts(afterSeq: number, limit: number): { rows: AccountRow[]; lastSeq: number | undefined } {
    const rows = this.statements.listAccounts.all(afterSeq, limit);
    return { rows, lastSeq: rows.at(-1)?.seq };
  }

  setAccountStatus(id: string, status: AccountStatusText, reason: string): void {
    this.#changed();
    this.statements.setAccountStatus.run(status, reason, id);
  }

  createKey(
    id: string,
    accountId: string,
    name: string,
    prefix: string,
    digest: Buffer,
    now: number,
  ): KeyRow {
    this.statements.insertKey.run(id, accountId, name, prefix, digest, now);
    return this.getKey(id)!;
  }

  getKey(id: string): KeyRow | undefined {
    return this.statements.getKey.get(id);
  }

  listKeys(accountId: string): KeyRow[] {
    return this.statements.listKeys.all(accountId);
  }

  /** Marks a key revoked; a key revoked already keeps its first revocation time. */
  revokeKey(id: string, now: number): void {
    this.#changed();
    this.statements.revokeKey.run(now, id);
  }

  findKeyByDigest(digest: Buffer): KeyLookupRow | undefined {
    return this.statements.findByDigest.get(digest);
  }

  /** Records a use, writing only when the stored time is older than `staleBefore`. */
  touchKey(id: string, now: number, staleBefore: number): void {
    this.statements.touchKey.run(now, id, staleBefore);
  }

  /**
   * A stamp that differs whenever a key or account may have changed since it was taken: a
   * revocation or suspension through this repository, or any commit by another connection to
   * the database file (SQLite's `PRAGMA data_version`). Cheap enough to read on every request.
   */
  changeStamp(): string {
    return `${this.statements.dataVersion.get()}:${localChanges.get(this.#db) ?? 0}`;
  }

  #changed(): void {
    localChanges.set(this.#db, (localChanges.get(this.#db) ?? 0) + 1);
  }
}
