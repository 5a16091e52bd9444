import type pg from "pg";
import type {
  IdentityRow,
  NewAccount,
  SessionRow,
  SessionStore,
  WalletFamilyText,
} from "../../core/ports/accounts.js";
import { INSERT_ACCOUNT } from "./accounts.js";
import { inTransaction } from "./database.js";

/** Sign-in nonces, wallet identities and dashboard sessions in PostgreSQL, the core's {@link SessionStore}. */
export class PgSessionStore implements SessionStore {
  constructor(private readonly pool: pg.Pool) {}

  async insertNonce(nonce: string, expiresAt: number): Promise<void> {
    await this.pool.query("INSERT INTO sign_in_nonces (nonce, expires_at) VALUES ($1, $2)", [
      nonce,
      expiresAt,
    ]);
  }

  /** One UPDATE: of two hosts using one nonce at once, exactly one sees a row changed. */
  async useNonce(nonce: string, now: number): Promise<boolean> {
    const { rowCount } = await this.pool.query(
      "UPDATE sign_in_nonces SET used_at = $1 WHERE nonce = $2 AND used_at IS NULL AND expires_at > $1",
      [now, nonce],
    );
    return rowCount === 1;
  }

  async purgeNonces(now: number): Promise<void> {
    await this.pool.query("DELETE FROM sign_in_nonces WHERE expires_at <= $1", [now]);
  }

  /**
   * The identity's account, creating both in one transaction if the identity is new. Two first
   * sign-ins at once: the second's identity insert conflicts on the primary key and does nothing,
   * its transaction rolls back (its account too), and it answers with the first one's account.
   */
  async accountForIdentity(
    family: WalletFamilyText,
    address: string,
    account: NewAccount,
    now: number,
  ): Promise<{ accountId: string; created: boolean }> {
    const known = await this.identityAccount(family, address);
    if (known !== undefined) return { accountId: known, created: false };
    const created = await inTransaction(this.pool, async (client) => {
      await client.query(INSERT_ACCOUNT, [account.id, account.name, now]);
      const inserted = await client.query(
        `INSERT INTO wallet_identities (family, address, account_id, linked_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (family, address) DO NOTHING`,
        [family, address, account.id, now],
      );
      if (inserted.rowCount !== 1) throw new IdentityTaken();
      return true;
    }).catch((error: unknown) => {
      if (error instanceof IdentityTaken) return false;
      throw error;
    });
    if (created) return { accountId: account.id, created: true };
    return { accountId: (await this.identityAccount(family, address))!, created: false };
  }

  async linkIdentity(
    family: WalletFamilyText,
    address: string,
    accountId: string,
    now: number,
  ): Promise<string> {
    await this.pool.query(
      `INSERT INTO wallet_identities (family, address, account_id, linked_at) VALUES ($1, $2, $3, $4)
       ON CONFLICT (family, address) DO NOTHING`,
      [family, address, accountId, now],
    );
    return (await this.identityAccount(family, address))!;
  }

  async listIdentities(accountId: string): Promise<IdentityRow[]> {
    return (
      await this.pool.query<IdentityRow>(
        "SELECT family, address, account_id, linked_at FROM wallet_identities WHERE account_id = $1 ORDER BY linked_at, family",
        [accountId],
      )
    ).rows;
  }

  async insertSession(
    id: string,
    digest: Buffer,
    accountId: string,
    now: number,
    expiresAt: number,
  ): Promise<void> {
    await this.pool.query(
      "INSERT INTO sessions (id, digest, account_id, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)",
      [id, digest, accountId, now, expiresAt],
    );
  }

  async findSession(digest: Buffer): Promise<SessionRow | undefined> {
    return (
      await this.pool.query<SessionRow>(
        "SELECT id, account_id, created_at, expires_at, ended_at FROM sessions WHERE digest = $1",
        [digest],
      )
    ).rows[0];
  }

  async endSession(id: string, now: number): Promise<void> {
    await this.pool.query("UPDATE sessions SET ended_at = $1 WHERE id = $2 AND ended_at IS NULL", [now, id]);
  }

  private async identityAccount(family: WalletFamilyText, address: string): Promise<string | undefined> {
    const { rows } = await this.pool.query<{ account_id: string }>(
      "SELECT account_id FROM wallet_identities WHERE family = $1 AND address = $2",
      [family, address],
    );
    return rows[0]?.account_id;
  }
}

/** Another sign-in linked the identity first (its transaction rolls back). */
class IdentityTaken extends Error {}
