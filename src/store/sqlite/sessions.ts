import type {
  IdentityRow,
  NewAccount,
  SessionRow,
  SessionStore,
  WalletFamilyText,
} from "../../core/ports/accounts.js";
import { INSERT_ACCOUNT_SQL } from "./accounts.js";
import type { Db } from "./database.js";
import type { NonceWrites } from "./ledger-writes.js";

/** The nonce writes as synchronous statements, for the connection that group-commits them. */
export function nonceStatements(db: Db) {
  const insert = db.prepare<[string, number]>("INSERT INTO sign_in_nonces (nonce, expires_at) VALUES (?, ?)");
  const purge = db.prepare<[number]>("DELETE FROM sign_in_nonces WHERE expires_at <= ?");
  return {
    insert: (nonce: string, expiresAt: number): void => {
      insert.run(nonce, expiresAt);
    },
    purge: (now: number): void => {
      purge.run(now);
    },
  };
}

/** Nonce writes run on `db` in this thread, each its own commit. */
function nonceWritesOn(db: Db): NonceWrites {
  const statements = nonceStatements(db);
  return {
    insertNonce: async (nonce, expiresAt) => statements.insert(nonce, expiresAt),
    purgeNonces: async (now) => statements.purge(now),
  };
}

/**
 * Sign-in nonces, wallet identities and dashboard sessions in SQLite, the core's
 * {@link SessionStore}. The work is synchronous underneath; the port's methods answer in a
 * promise. Issuing a nonce is the one write anyone may ask for without a credential, so it goes
 * through `nonces` — the ledger's writer thread in a serving process — and never holds the
 * request loop for a commit.
 */
export class SessionRepository implements SessionStore {
  private readonly statements;
  private readonly db: Db;

  private readonly nonces: NonceWrites;

  /** `nonces`: where nonces are written; on `db`, in this thread, when absent (tests and tools). */
  constructor(db: Db, nonces?: NonceWrites) {
    this.db = db;
    this.nonces = nonces ?? nonceWritesOn(db);
    this.statements = {
      useNonce: db.prepare<[number, string, number]>(
        "UPDATE sign_in_nonces SET used_at = ? WHERE nonce = ? AND used_at IS NULL AND expires_at > ?",
      ),
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

  insertNonce(nonce: string, expiresAt: number): Promise<void> {
    return this.nonces.insertNonce(nonce, expiresAt);
  }

  async useNonce(nonce: string, now: number): Promise<boolean> {
    return this.statements.useNonce.run(now, nonce, now).changes === 1;
  }

  purgeNonces(now: number): Promise<void> {
    return this.nonces.purgeNonces(now);
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
