/**
 * The PostgreSQL schema, as numbered migrations applied in order (pg-database.ts). The same
 * tables and rules as the SQLite store's (src/store/migrations.ts), in PostgreSQL's types: times
 * are BIGINT milliseconds, digests BYTEA, and what SQLite checks with triggers PostgreSQL checks
 * with its own (plpgsql).
 */
export interface PgMigration {
  readonly version: number;
  readonly name: string;
  readonly sql: string;
}

export const PG_MIGRATIONS: readonly PgMigration[] = [
  {
    version: 1,
    name: "accounts, api keys and the auth change counter",
    sql: `
      CREATE TABLE accounts (
        seq              BIGSERIAL UNIQUE,
        id               TEXT PRIMARY KEY,
        name             TEXT NOT NULL DEFAULT '',
        status           TEXT NOT NULL CHECK (status IN ('active', 'suspended')),
        suspended_reason TEXT NOT NULL DEFAULT '',
        created_at       BIGINT NOT NULL
      );

      CREATE TABLE api_keys (
        seq          BIGSERIAL UNIQUE,
        id           TEXT PRIMARY KEY,
        account_id   TEXT NOT NULL REFERENCES accounts (id),
        name         TEXT NOT NULL DEFAULT '',
        prefix       TEXT NOT NULL,
        digest       BYTEA NOT NULL UNIQUE,
        created_at   BIGINT NOT NULL,
        last_used_at BIGINT,
        revoked_at   BIGINT
      );
      CREATE INDEX api_keys_by_account ON api_keys (account_id, created_at);

      -- Counts the changes that can alter an authentication (a key revoked, deleted or moved, an
      -- account suspended, reactivated or deleted), whichever host made them: every gateway's key
      -- cache holds while it stands still. Inserts and last-use times are not counted.
      CREATE TABLE auth_version (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        n  BIGINT NOT NULL
      );
      INSERT INTO auth_version (id, n) VALUES (1, 0);
      CREATE FUNCTION bump_auth_version() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          UPDATE auth_version SET n = n + 1 WHERE id = 1;
          RETURN NULL;
        END $$;
      CREATE TRIGGER api_keys_auth_version AFTER UPDATE OF id, account_id, digest, revoked_at ON api_keys
        FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id OR OLD.account_id IS DISTINCT FROM NEW.account_id
          OR OLD.digest IS DISTINCT FROM NEW.digest OR OLD.revoked_at IS DISTINCT FROM NEW.revoked_at)
        EXECUTE FUNCTION bump_auth_version();
      CREATE TRIGGER api_keys_deleted_auth_version AFTER DELETE ON api_keys
        FOR EACH ROW EXECUTE FUNCTION bump_auth_version();
      CREATE TRIGGER accounts_auth_version AFTER UPDATE OF id, status ON accounts
        FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id OR OLD.status IS DISTINCT FROM NEW.status)
        EXECUTE FUNCTION bump_auth_version();
      CREATE TRIGGER accounts_deleted_auth_version AFTER DELETE ON accounts
        FOR EACH ROW EXECUTE FUNCTION bump_auth_version();
    `,
  },
  {
    version: 2,
    name: "dashboard sign-in: nonces, wallet identities, sessions",
    sql: `
      CREATE TABLE sign_in_nonces (
        nonce      TEXT PRIMARY KEY,
        expires_at BIGINT NOT NULL,
        used_at    BIGINT
      );
      CREATE INDEX sign_in_nonces_expiry ON sign_in_nonces (expires_at);

      CREATE TABLE wallet_identities (
        family     TEXT NOT NULL CHECK (family IN ('evm', 'solana')),
        address    TEXT NOT NULL,
        account_id TEXT NOT NULL REFERENCES accounts (id),
        linked_at  BIGINT NOT NULL,
        PRIMARY KEY (family, address)
      );
      CREATE INDEX wallet_identities_account ON wallet_identities (account_id);

      CREATE TABLE sessions (
        id         TEXT PRIMARY KEY,
        digest     BYTEA NOT NULL UNIQUE,
        account_id TEXT NOT NULL REFERENCES accounts (id),
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        ended_at   BIGINT
      );
    `,
  },
  {
    version: 3,
    name: "billing ledger",
    sql: `
      -- The chain an account bills when a call says auto; no row means the registry's default.
      CREATE TABLE billing_accounts (
        account_id    TEXT PRIMARY KEY REFERENCES accounts (id),
        default_chain TEXT NOT NULL,
        updated_at    BIGINT NOT NULL
      );

      -- Double-entry and append-only (triggers below): each row moves amount from debit_account to
      -- credit_account on one chain, in ledger units. A pending row (a hold) counts until its hold
      -- is resolved in hold_resolutions; corrections are new rows.
      CREATE TABLE ledger_entries (
        seq            BIGSERIAL PRIMARY KEY,
        id             TEXT NOT NULL UNIQUE,
        chain          TEXT NOT NULL,
        debit_account  TEXT NOT NULL,
        credit_account TEXT NOT NULL CHECK (credit_account <> debit_account),
        amount         BIGINT NOT NULL CHECK (amount > 0),
        pending        BOOLEAN NOT NULL,
        kind           TEXT NOT NULL CHECK (kind IN ('credit', 'hold', 'charge', 'deposit', 'withdrawal')),
        hold_id        TEXT,
        memo           TEXT NOT NULL DEFAULT '',
        created_at     BIGINT NOT NULL
      );
      CREATE INDEX ledger_entries_by_hold ON ledger_entries (hold_id) WHERE hold_id IS NOT NULL;

      -- One row per call, immutable; its outcome is in hold_resolutions.
      CREATE TABLE holds (
        seq          BIGSERIAL UNIQUE,
        id           TEXT PRIMARY KEY,
        account_id   TEXT NOT NULL REFERENCES accounts (id),
        request_id   TEXT NOT NULL,
        key_id       TEXT NOT NULL DEFAULT '',
        chain        TEXT NOT NULL,
        amount       BIGINT NOT NULL CHECK (amount >= 0),
        call_kind    TEXT NOT NULL CHECK (call_kind IN ('text', 'image')),
        model        TEXT NOT NULL,
        input_tokens BIGINT NOT NULL,
        max_tokens   BIGINT NOT NULL,
        image_size   TEXT NOT NULL DEFAULT '',
        image_count  INTEGER NOT NULL DEFAULT 0,
        created_at   BIGINT NOT NULL
      );
      CREATE INDEX holds_by_account ON holds (account_id, seq);

      -- How each hold ended. The primary key makes a hold resolve at most once, on every host.
      CREATE TABLE hold_resolutions (
        hold_id               TEXT PRIMARY KEY REFERENCES holds (id),
        status                TEXT NOT NULL CHECK (status IN ('settled', 'released', 'expired')),
        amount                BIGINT NOT NULL CHECK (amount >= 0),
        input_tokens          BIGINT NOT NULL DEFAULT 0,
        output_tokens         BIGINT NOT NULL DEFAULT 0,
        cache_write_5m_tokens BIGINT NOT NULL DEFAULT 0,
        cache_write_1h_tokens BIGINT NOT NULL DEFAULT 0,
        cache_read_tokens     BIGINT NOT NULL DEFAULT 0,
        images                INTEGER NOT NULL DEFAULT 0,
        charges               TEXT NOT NULL DEFAULT '',
        resolved_at           BIGINT NOT NULL
      );

      -- The unresolved holds, for the sweeper: deleted in the transaction that resolves its hold.
      CREATE TABLE open_holds (
        hold_id    TEXT PRIMARY KEY REFERENCES holds (id),
        created_at BIGINT NOT NULL
      );
      CREATE INDEX open_holds_by_age ON open_holds (created_at);

      -- Running totals per (ledger account, chain), updated in the transaction of the entries
      -- they sum. The row is the lock: a hold's UPDATE of its account's row waits for any other
      -- transaction moving that balance, and the CHECK refuses an overdraft at commit time on
      -- whichever host asks.
      CREATE TABLE ledger_balances (
        account         TEXT NOT NULL,
        chain           TEXT NOT NULL,
        may_overdraw    BOOLEAN NOT NULL,
        debits_pending  BIGINT NOT NULL DEFAULT 0 CHECK (debits_pending >= 0),
        debits_posted   BIGINT NOT NULL DEFAULT 0 CHECK (debits_posted >= 0),
        credits_pending BIGINT NOT NULL DEFAULT 0 CHECK (credits_pending >= 0),
        credits_posted  BIGINT NOT NULL DEFAULT 0 CHECK (credits_posted >= 0),
        PRIMARY KEY (account, chain),
        CONSTRAINT available_never_negative
          CHECK (may_overdraw OR credits_posted - debits_posted - debits_pending >= 0)
      );

      CREATE FUNCTION refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          RAISE EXCEPTION '% is append-only', TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
        END $$;
      CREATE TRIGGER ledger_entries_append_only BEFORE UPDATE OR DELETE ON ledger_entries
        FOR EACH ROW EXECUTE FUNCTION refuse_change();
      CREATE TRIGGER ledger_entries_no_truncate BEFORE TRUNCATE ON ledger_entries
        FOR EACH STATEMENT EXECUTE FUNCTION refuse_change();
      CREATE TRIGGER holds_append_only BEFORE UPDATE OR DELETE ON holds
        FOR EACH ROW EXECUTE FUNCTION refuse_change();
      CREATE TRIGGER holds_no_truncate BEFORE TRUNCATE ON holds
        FOR EACH STATEMENT EXECUTE FUNCTION refuse_change();
      CREATE TRIGGER hold_resolutions_append_only BEFORE UPDATE OR DELETE ON hold_resolutions
        FOR EACH ROW EXECUTE FUNCTION refuse_change();
      CREATE TRIGGER hold_resolutions_no_truncate BEFORE TRUNCATE ON hold_resolutions
        FOR EACH STATEMENT EXECUTE FUNCTION refuse_change();
    `,
  },
];
