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
];
