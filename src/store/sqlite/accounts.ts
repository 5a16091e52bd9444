import { isStorageFull } from "../../core/errors.js";
import type {
  AccountPage,
  AccountRow,
  AccountStatusText,
  AccountStore,
  KeyLookupRow,
  KeyRow,
} from "../../core/ports/accounts.js";
import type { Db } from "./database.js";

const KEY_COLUMNS = "id, account_id, name, prefix, created_at, last_used_at, revoked_at";

/** Inserts an active account; shared with the first wallet sign-in, which creates one. */
export const INSERT_ACCOUNT_SQL =
  "INSERT INTO accounts (id, name, status, created_at) VALUES (?, ?, 'active', ?)";

/**
 * Accounts and API keys in SQLite, the core's {@link AccountStore}. Statements are prepared once,
 * here. The work is synchronous underneath; the port's methods simply answer in a promise.
 */
export class AuthRepository implements AccountStore {
  private readonly statements;
  readonly #db: Db;

  constructor(db: Db) {
    this.#db = db;
    this.statements = {
      // Bumped by triggers (migration 6) on the changes that can alter an authentication.
      authVersion: db.prepare<[], number>("SELECT n FROM auth_version WHERE id = 1").pluck(),
      insertAccount: db.prepare<[string, string, number]>(INSERT_ACCOUNT_SQL),
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
      countLiveKeys: db
        .prepare<[string], number>(
          "SELECT COUNT(*) FROM api_keys WHERE account_id = ? AND revoked_at IS NULL",
        )
        .pluck(),
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

  /**
   * Inserts an active account, synchronously: for tests and tools that hold the database and
   * want the row at once. The core goes through {@link insertAccount}.
   */
  createAccount(id: string, name: string, now: number): AccountRow {
    this.statements.insertAccount.run(id, name, now);
    return this.statements.getAccount.get(id)!;
  }

  async insertAccount(id: string, name: string, now: number): Promise<AccountRow> {
    return this.createAccount(id, name, now);
  }

  async getAccount(id: string): Promise<AccountRow | undefined> {
    return this.statements.getAccount.get(id);
  }

  async listAccounts(afterSeq: number, limit: number): Promise<AccountPage> {
    const rows = this.statements.listAccounts.all(afterSeq, limit);
    return { rows, lastSeq: rows.at(-1)?.seq };
  }

  async setAccountStatus(id: string, status: AccountStatusText, reason: string): Promise<void> {
    this.statements.setAccountStatus.run(status, reason, id);
  }

  async insertKey(
    id: string,
    accountId: string,
    name: string,
    prefix: string,
    digest: Buffer,
    now: number,
  ): Promise<KeyRow> {
    this.statements.insertKey.run(id, accountId, name, prefix, digest, now);
    return this.statements.getKey.get(id)!;
  }

  /**
   * One IMMEDIATE transaction takes the write lock before counting, so no other connection (the
   * operator's CLI on the same file) inserts between the count and the insert.
   */
  async insertKeyWithinCap(
    id: string,
    accountId: string,
    name: string,
    prefix: string,
    digest: Buffer,
    now: number,
    maxLive: number,
  ): Promise<KeyRow | undefined> {
    return this.#db
      .transaction(() => {
        if (this.statements.countLiveKeys.get(accountId)! >= maxLive) return undefined;
        this.statements.insertKey.run(id, accountId, name, prefix, digest, now);
        return this.statements.getKey.get(id)!;
      })
      .immediate();
  }

  async getKey(id: string): Promise<KeyRow | undefined> {
    return this.statements.getKey.get(id);
  }

  async listKeys(accountId: string): Promise<KeyRow[]> {
    return this.statements.listKeys.all(accountId);
  }

  async revokeKey(id: string, now: number): Promise<void> {
    this.statements.revokeKey.run(now, id);
  }

  async findKeyByDigest(digest: Buffer): Promise<KeyLookupRow | undefined> {
    return this.statements.findByDigest.get(digest);
  }

  /** Best effort: a full disk skips the last-use time rather than refusing the call it is for. */
  async touchKey(id: string, now: number, staleBefore: number): Promise<void> {
    try {
      this.statements.touchKey.run(now, id, staleBefore);
    } catch (error) {
      if (!isStorageFull(error)) throw error;
    }
  }

  /**
   * The `auth_version` counter: triggers bump it in the transaction of every revocation,
   * suspension, reactivation or deletion of a key or account, through any connection. Commits to
   * other tables (the ledger, sessions, last-use times) leave it alone, unlike `PRAGMA data_version`.
   */
  async changeStamp(): Promise<number> {
    return this.statements.authVersion.get()!;
  }
}
