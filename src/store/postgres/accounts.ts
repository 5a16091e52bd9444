import pg from "pg";
import type {
  AccountPage,
  AccountRow,
  AccountStatusText,
  AccountStore,
  KeyLookupRow,
  KeyRow,
} from "../../core/ports/accounts.js";
import { inTransaction } from "./database.js";

const ACCOUNT_COLUMNS = "id, name, status, suspended_reason, created_at";
const KEY_COLUMNS = "id, account_id, name, prefix, created_at, last_used_at, revoked_at";
/** A new account's row (also written by a first wallet sign-in: see sessions.ts). */
export const INSERT_ACCOUNT =
  "INSERT INTO accounts (id, name, status, created_at) VALUES ($1, $2, 'active', $3) RETURNING " +
  ACCOUNT_COLUMNS;

/** The channel the auth change counter is announced on (migration 5). */
const AUTH_CHANNEL = "tollgate_auth_version";
/** The channel an account's billing settings' changes are announced on (migration 15). */
const BILLING_CHANNEL = "tollgate_billing";
/** How long a lost listener waits before it connects again (meanwhile the counter is read). */
const RELISTEN_MS = 1_000;

/**
 * The auth change counter as PostgreSQL announces it: one connection of its own LISTENs on
 * `tollgate_auth_version`, to which every change's trigger notifies the new value at its commit,
 * so a host learns of a revocation on any other host within the notification's delivery
 * (milliseconds) without reading the counter on every call. While that connection is down the
 * counter is unknown here and the store reads it per call, as without a listener.
 *
 * The same connection LISTENs on `tollgate_billing` (the account whose default chain or spend
 * caps changed, migration 15) for the billing cache (billing-cache.ts): each announcement is
 * passed to {@link onBillingChange}'s listeners, and so is `undefined` (forget everything)
 * whenever the connection is lost or made, since changes may have been missed meanwhile.
 */
export class PgAuthStamp {
  #client: pg.Client | undefined;
  #stamp: number | undefined;
  #retry: NodeJS.Timeout | undefined;
  #closed = false;
  readonly #billing = new Set<(accountId: string | undefined) => void>();

  constructor(private readonly url: string) {}

  /** Connects and listens; the counter is read after LISTEN, so no change falls between. */
  async start(): Promise<void> {
    const client = new pg.Client({ connectionString: this.url, application_name: "tollgate auth listener" });
    client.on("error", () => this.#lost(client));
    client.on("end", () => this.#lost(client));
    // Announcements that arrive before the first read are kept, not dropped.
    let heard = 0;
    client.on("notification", (message) => {
      if (message.channel === BILLING_CHANNEL) {
        for (const listener of this.#billing) listener(message.payload);
        return;
      }
      const n = Number(message.payload);
      if (!Number.isFinite(n)) return;
      heard = Math.max(heard, n);
      if (this.#client === client && this.#stamp !== undefined && n > this.#stamp) this.#stamp = n;
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${AUTH_CHANNEL}; LISTEN ${BILLING_CHANNEL}`);
      const { rows } = await client.query<{ n: string }>(
        "SELECT n::text AS n FROM auth_version WHERE id = 1",
      );
      if (this.#closed) throw new Error("closed");
      this.#client = client;
      this.#stamp = Math.max(heard, Number(rows[0]!.n));
      for (const listener of this.#billing) listener(undefined);
    } catch (error) {
      await client.end().catch(() => {});
      throw error;
    }
  }

  /** The counter as last announced, or undefined while not listening. */
  current(): number | undefined {
    return this.#stamp;
  }

  /** True while announcements arrive: what is cached by them may be used. */
  listening(): boolean {
    return this.#stamp !== undefined;
  }

  /**
   * Calls `listener` with each account whose billing settings changed, and with `undefined`
   * when every account's may have (the connection lost or made).
   */
  onBillingChange(listener: (accountId: string | undefined) => void): void {
    this.#billing.add(listener);
  }

  /** A value read from the table: never lets the cached counter go back. */
  observe(n: number): void {
    if (this.#stamp !== undefined && n > this.#stamp) this.#stamp = n;
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#retry);
    const client = this.#client;
    this.#client = undefined;
    this.#stamp = undefined;
    await client?.end().catch(() => {});
  }

  #lost(client: pg.Client): void {
    if (this.#client !== client) return;
    this.#client = undefined;
    this.#stamp = undefined;
    for (const listener of this.#billing) listener(undefined);
    void client.end().catch(() => {});
    if (this.#closed) return;
    const again = () => {
      if (this.#closed) return;
      this.start().catch(() => {
        this.#retry = setTimeout(again, RELISTEN_MS);
        this.#retry.unref();
      });
    };
    this.#retry = setTimeout(again, RELISTEN_MS);
    this.#retry.unref();
  }
}

/** Accounts and API keys in PostgreSQL, the core's {@link AccountStore}. */
export class PgAccountStore implements AccountStore {
  /** This process changed something an authentication depends on: read the counter next time. */
  #changed = false;

  /** `stamp`: the announced counter (a serving host); without it the counter is read per call. */
  constructor(
    private readonly pool: pg.Pool,
    private readonly stamp?: PgAuthStamp,
  ) {}

  async insertAccount(id: string, name: string, now: number): Promise<AccountRow> {
    return (await this.pool.query<AccountRow>(INSERT_ACCOUNT, [id, name, now])).rows[0]!;
  }

  async getAccount(id: string): Promise<AccountRow | undefined> {
    return (await this.pool.query<AccountRow>(`SELECT ${ACCOUNT_COLUMNS} FROM accounts WHERE id = $1`, [id]))
      .rows[0];
  }

  async listAccounts(afterSeq: number, limit: number): Promise<AccountPage> {
    const { rows } = await this.pool.query<AccountRow & { seq: number }>(
      `SELECT seq, ${ACCOUNT_COLUMNS} FROM accounts WHERE seq > $1 ORDER BY seq LIMIT $2`,
      [afterSeq, limit],
    );
    return { rows: rows.map(({ seq: _, ...row }) => row), lastSeq: rows.at(-1)?.seq };
  }

  async setAccountStatus(id: string, status: AccountStatusText, reason: string): Promise<void> {
    await this.pool.query("UPDATE accounts SET status = $1, suspended_reason = $2 WHERE id = $3", [
      status,
      reason,
      id,
    ]);
    this.#changed = true;
  }

  async insertKey(
    id: string,
    accountId: string,
    name: string,
    prefix: string,
    digest: Buffer,
    now: number,
  ): Promise<KeyRow> {
    const { rows } = await this.pool.query<KeyRow>(
      `INSERT INTO api_keys (id, account_id, name, prefix, digest, created_at) VALUES ($1, $2, $3, $4, $5, $6)
       RETURNING ${KEY_COLUMNS}`,
      [id, accountId, name, prefix, digest, now],
    );
    return rows[0]!;
  }

  /**
   * The account's row is locked (FOR UPDATE) before its live keys are counted: a second
   * CreateKey for the same account, on any host, waits for the first to commit and then counts
   * its key. A count alone would not do under READ COMMITTED: both would count the same keys.
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
    return await inTransaction(this.pool, async (client) => {
      await client.query("SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE", [accountId]);
      const { rows: counted } = await client.query<{ n: number }>(
        "SELECT COUNT(*)::int AS n FROM api_keys WHERE account_id = $1 AND revoked_at IS NULL",
        [accountId],
      );
      if (counted[0]!.n >= maxLive) return undefined;
      const { rows } = await client.query<KeyRow>(
        `INSERT INTO api_keys (id, account_id, name, prefix, digest, created_at) VALUES ($1, $2, $3, $4, $5, $6)
         RETURNING ${KEY_COLUMNS}`,
        [id, accountId, name, prefix, digest, now],
      );
      return rows[0]!;
    });
  }

  async getKey(id: string): Promise<KeyRow | undefined> {
    return (await this.pool.query<KeyRow>(`SELECT ${KEY_COLUMNS} FROM api_keys WHERE id = $1`, [id])).rows[0];
  }

  async listKeys(accountId: string): Promise<KeyRow[]> {
    return (
      await this.pool.query<KeyRow>(
        `SELECT ${KEY_COLUMNS} FROM api_keys WHERE account_id = $1 ORDER BY created_at DESC, seq DESC`,
        [accountId],
      )
    ).rows;
  }

  async revokeKey(id: string, now: number): Promise<void> {
    await this.pool.query("UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL", [
      now,
      id,
    ]);
    this.#changed = true;
  }

  async findKeyByDigest(digest: Buffer): Promise<KeyLookupRow | undefined> {
    const { rows } = await this.pool.query<KeyLookupRow>(
      `SELECT k.id, k.account_id, k.name, k.prefix, k.created_at, k.last_used_at, k.revoked_at, k.digest,
              a.status AS account_status
         FROM api_keys k JOIN accounts a ON a.id = k.account_id
        WHERE k.digest = $1`,
      [digest],
    );
    return rows[0];
  }

  async touchKey(id: string, now: number, staleBefore: number): Promise<void> {
    await this.pool.query(
      "UPDATE api_keys SET last_used_at = $1 WHERE id = $2 AND (last_used_at IS NULL OR last_used_at < $3)",
      [now, id, staleBefore],
    );
  }

  /**
   * The `auth_version` counter, bumped by triggers on every host's changes (migrations 1 and 5):
   * as announced when listening, read from the table otherwise — and after this process's own
   * change, which must bite on its very next request.
   */
  async changeStamp(): Promise<number> {
    const announced = this.stamp?.current();
    if (announced !== undefined && !this.#changed) return announced;
    this.#changed = false;
    const n = (await this.pool.query<{ n: number }>("SELECT n FROM auth_version WHERE id = 1")).rows[0]!.n;
    this.stamp?.observe(n);
    return n;
  }
}
