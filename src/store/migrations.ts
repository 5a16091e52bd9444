/**
 * Numbered schema migrations, applied in order at start-up; `PRAGMA user_version` records the
 * last one applied. Append only: a released migration is never edited, a change is a new one.
 */
export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly sql: string;
}

/** All migrations, in order. Times are unix milliseconds; money is INTEGER. */
export const migrations: readonly Migration[] = [
  {
    version: 1,
    name: "accounts and api keys",
    sql: `
      CREATE TABLE accounts (
        id               TEXT PRIMARY KEY,
        name             TEXT NOT NULL DEFAULT '',
        status           TEXT NOT NULL CHECK (status IN ('active', 'suspended')),
        suspended_reason TEXT NOT NULL DEFAULT '',
        created_at       INTEGER NOT NULL
      ) STRICT;

      CREATE TABLE api_keys (
        id           TEXT PRIMARY KEY,
        account_id   TEXT NOT NULL REFERENCES accounts (id),
        name         TEXT NOT NULL DEFAULT '',
        prefix       TEXT NOT NULL,
        digest       BLOB NOT NULL UNIQUE,
        created_at   INTEGER NOT NULL,
        last_used_at INTEGER,
        revoked_at   INTEGER
      ) STRICT;

      CREATE INDEX api_keys_by_account ON api_keys (account_id, created_at);
    `,
  },
];
