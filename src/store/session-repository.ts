import type {
  IdentityRow,
  NewAccount,
  SessionRow,
  SessionStore,
  WalletFamilyText,
} from "../core/ports/accounts.js";
import { INSERT_ACCOUNT_SQL } from "./auth-repository.js";
import type { Db } from "./database.js";

/**
 * Sign-in nonces, wallet identities and dashboard sessions in SQLite, the core's
 * {@link SessionStore}. The work is synchronous underneath; the port's methods answer in a promise.
 */
export class SessionRepository implements SessionStore {
  private readonly statements;
  private readonly db: Db;

  constructor(db: Db) {
    this.db = db;
    this.statements = {
      insertNonce: db.prepare<[string, number]>(
        "INSERT INTO sign_in_nonces (nonce, expires_at) VALUES (?, ?)",
      ),
      useNonce: db.prepare<[number, string, number]>(
        "UPDATE sign_in_nonces SET used_at = ? WHERE nonce = ? AND used_at IS NULL AND expires_at > ?",
      ),
      purgeNonces: db.prepare<[number]>("DELETE FROM sign_in_nonces WHERE expires_at <= ?"),
      insertAccount: db.prepare<[string, string, number]>(INSERT_ACCOUNT_SQL),
      getIdentity: db.prepare<[WalletFamilyText, string], IdentityRow>(
        "SELECT * FROM wallet_identities WHERE family = ? AND address = ?",
      ),
      insertIdentity: db.prepare<[WalletFamilyText, string, string, number]>(
        "INSERT INTO wallet_identities (family, address, account_id, linked_at) VALUES (?, ?, ?, ?)",
      ),
      listIdentities: db.prepare<[string], IdentityRow>(
        "SELECT * FROM wallet_identities WHERE account_id = ? ORDER BY linked_at, family",
      ),
      insertSession: db.prepare<[string, Buffer, string, number, number]>(
        "INSERT INTO sessions (id, digest, account_id, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
      ),
      findSession: db.prepare<[Buffer], SessionRow>(
        "SELECT id, account_id, created_at, expires_at, ended_at FROM sessions WHERE digest = ?",
      ),
      endSession: db.prepare<[number, string]>(
        "UPDATE sessions SET ended_at = ? WHERE id = ? AND ended_at IS NULL",
      ),
    };
  }

  async insertNonce(nonce: string, expiresAt: number): Promise<void> {
    this.statements.insertNonce.run(nonce, expiresAt);
  }

  async useNonce(nonce: string, now: number): Promise<boolean> {
    return this.statements.useNonce.run(now, nonce, now).changes === 1;
  }

  async purgeNonces(now: number): Promise<void> {
    this.statements.purgeNonces.run(now);
  }

  async accountForIdentity(
    family: WalletFamilyText,
    address: string,
    account: NewAccount,
    now: number,
  ): Promise<{ accountId: string; created: boolean }> {
    return this.#immediate(() => {
      const known = this.statements.getIdentity.get(family, address);
      if (known !== undefined) return { accountId: known.account_id, created: false };
      this.statements.insertAccount.run(account.id, account.name, now);
      this.statements.insertIdentity.run(family, address, account.id, now);
      return { accountId: account.id, created: true };
    });
  }

  async linkIdentity(
    family: WalletFamilyText,
    address: string,
    accountId: string,
    now: number,
  ): Promise<string> {
    return this.#immediate(() => {
      const known = this.statements.getIdentity.get(family, address);
      if (known !== undefined) return known.account_id;
      this.statements.insertIdentity.run(family, address, accountId, now);
      return accountId;
    });
  }

  async listIdentities(accountId: string): Promise<IdentityRow[]> {
    return this.statements.listIdentities.all(accountId);
  }

  async insertSession(
    id: string,
    digest: Buffer,
    accountId: string,
    now: number,
    expiresAt: number,
  ): Promise<void> {
    this.statements.insertSession.run(id, digest, accountId, now, expiresAt);
  }

  async findSession(digest: Buffer): Promise<SessionRow | undefined> {
    return this.statements.findSession.get(digest);
  }

  async endSession(id: string, now: number): Promise<void> {
    this.statements.endSession.run(now, id);
  }

  /** Runs `work` in one IMMEDIATE transaction, so a read and the write it decides are not split. */
  #immediate<T>(work: () => T): T {
    return this.db.transaction(work).immediate();
  }
}
