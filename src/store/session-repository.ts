import type { Db } from "./database.js";

/** The wallet families that can sign in. */
export type WalletFamilyText = "evm" | "solana";

/** A wallet identity as stored. */
export interface IdentityRow {
  readonly family: WalletFamilyText;
  readonly address: string;
  readonly account_id: string;
  readonly linked_at: number;
}

/** A session as stored: never the token, only its digest. */
export interface SessionRow {
  readonly id: string;
  readonly account_id: string;
  readonly created_at: number;
  readonly expires_at: number;
  readonly ended_at: number | null;
}

/** Sign-in nonces, wallet identities and dashboard sessions in SQLite. */
export class SessionRepository {
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

  /** Runs `work` in one transaction. */
  transaction<T>(work: () => T): T {
    return this.db.transaction(work).immediate();
  }

  insertNonce(nonce: string, expiresAt: number): void {
    this.statements.insertNonce.run(nonce, expiresAt);
  }

  /** Marks a nonce used; false when it is unknown, used already, or expired at `now`. */
  useNonce(nonce: string, now: number): boolean {
    return this.statements.useNonce.run(now, nonce, now).changes === 1;
  }

  /** Forgets nonces that expired before `now`: they can no longer be used either way. */
  purgeNonces(now: number): void {
    this.statements.purgeNonces.run(now);
  }

  getIdentity(family: WalletFamilyText, address: string): IdentityRow | undefined {
    return this.statements.getIdentity.get(family, address);
  }

  insertIdentity(family: WalletFamilyText, address: string, accountId: string, now: number): void {
    this.statements.insertIdentity.run(family, address, accountId, now);
  }

  listIdentities(accountId: string): IdentityRow[] {
    return this.statements.listIdentities.all(accountId);
  }

  insertSession(id: string, digest: Buffer, accountId: string, now: number, expiresAt: number): void {
    this.statements.insertSession.run(id, digest, accountId, now, expiresAt);
  }

  findSession(digest: Buffer): SessionRow | undefined {
    return this.statements.findSession.get(digest);
  }

  endSession(id: string, now: number): void {
    this.statements.endSession.run(now, id);
  }
}
