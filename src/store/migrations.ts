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
  {
    version: 2,
    name: "billing ledger",
    sql: `
      -- The chain an account bills when a call says auto; no row means the registry's default.
      CREATE TABLE billing_accounts (
        account_id    TEXT PRIMARY KEY REFERENCES accounts (id),
        default_chain TEXT NOT NULL,
        updated_at    INTEGER NOT NULL
      ) STRICT;

      -- Double-entry and append-only: every row moves amount from debit_account to
      -- credit_account on one chain, in ledger units (10^-L of the asset, L = min(decimals, 9)). A pending row (a hold)
      -- counts until its hold is resolved in hold_resolutions; corrections are new rows.
      -- Ledger accounts are accounts.id or system accounts ('system:revenue', ...).
      CREATE TABLE ledger_entries (
        seq            INTEGER PRIMARY KEY,
        id             TEXT NOT NULL UNIQUE,
        chain          TEXT NOT NULL,
        debit_account  TEXT NOT NULL,
        credit_account TEXT NOT NULL CHECK (credit_account <> debit_account),
        amount         INTEGER NOT NULL CHECK (amount > 0),
        pending        INTEGER NOT NULL CHECK (pending IN (0, 1)),
        kind           TEXT NOT NULL CHECK (kind IN ('credit', 'hold', 'charge')),
        hold_id        TEXT,
        memo           TEXT NOT NULL DEFAULT '',
        created_at     INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX ledger_entries_by_hold ON ledger_entries (hold_id) WHERE hold_id IS NOT NULL;

      -- One row per call: what was reserved and for which call (so a retried request id can be
      -- recognised, and a reused one refused). Immutable; its outcome is in hold_resolutions.
      CREATE TABLE holds (
        seq          INTEGER PRIMARY KEY,
        id           TEXT NOT NULL UNIQUE,
        account_id   TEXT NOT NULL REFERENCES accounts (id),
        request_id   TEXT NOT NULL,
        key_id       TEXT NOT NULL DEFAULT '',
        chain        TEXT NOT NULL,
        amount       INTEGER NOT NULL CHECK (amount >= 0),
        call_kind    TEXT NOT NULL CHECK (call_kind IN ('text', 'image')),
        model        TEXT NOT NULL,
        input_tokens INTEGER NOT NULL,
        max_tokens   INTEGER NOT NULL,
        image_size   TEXT NOT NULL DEFAULT '',
        image_count  INTEGER NOT NULL DEFAULT 0,
        created_at   INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX holds_by_account ON holds (account_id, seq);

      -- How each hold ended. The primary key makes a hold resolve exactly once.
      CREATE TABLE hold_resolutions (
        hold_id               TEXT PRIMARY KEY REFERENCES holds (id),
        status                TEXT NOT NULL CHECK (status IN ('settled', 'released', 'expired')),
        amount                INTEGER NOT NULL CHECK (amount >= 0),
        input_tokens          INTEGER NOT NULL DEFAULT 0,
        output_tokens         INTEGER NOT NULL DEFAULT 0,
        cache_write_5m_tokens INTEGER NOT NULL DEFAULT 0,
        cache_write_1h_tokens INTEGER NOT NULL DEFAULT 0,
        cache_read_tokens     INTEGER NOT NULL DEFAULT 0,
        images                INTEGER NOT NULL DEFAULT 0,
        resolved_at           INTEGER NOT NULL
      ) STRICT;

      -- The unresolved holds, so the sweeper reads only those. A work list, not a record:
      -- a row is deleted in the transaction that resolves its hold.
      CREATE TABLE open_holds (
        hold_id    TEXT PRIMARY KEY REFERENCES holds (id),
        created_at INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX open_holds_by_age ON open_holds (created_at);

      -- Running totals per (ledger account, chain), updated in the same transaction as the
      -- entries they sum; the audit replays the entries to check them.
      CREATE TABLE ledger_balances (
        account         TEXT NOT NULL,
        chain           TEXT NOT NULL,
        may_overdraw    INTEGER NOT NULL CHECK (may_overdraw IN (0, 1)),
        debits_pending  INTEGER NOT NULL DEFAULT 0 CHECK (debits_pending >= 0),
        debits_posted   INTEGER NOT NULL DEFAULT 0 CHECK (debits_posted >= 0),
        credits_pending INTEGER NOT NULL DEFAULT 0 CHECK (credits_pending >= 0),
        credits_posted  INTEGER NOT NULL DEFAULT 0 CHECK (credits_posted >= 0),
        PRIMARY KEY (account, chain),
        CHECK (may_overdraw = 1 OR credits_posted - debits_posted - debits_pending >= 0)
      ) STRICT;

      CREATE TRIGGER ledger_entries_no_update BEFORE UPDATE ON ledger_entries
        BEGIN SELECT RAISE(ABORT, 'ledger_entries is append-only'); END;
      CREATE TRIGGER ledger_entries_no_delete BEFORE DELETE ON ledger_entries
        BEGIN SELECT RAISE(ABORT, 'ledger_entries is append-only'); END;
      CREATE TRIGGER holds_no_update BEFORE UPDATE ON holds
        BEGIN SELECT RAISE(ABORT, 'holds is append-only'); END;
      CREATE TRIGGER holds_no_delete BEFORE DELETE ON holds
        BEGIN SELECT RAISE(ABORT, 'holds is append-only'); END;
      CREATE TRIGGER hold_resolutions_no_update BEFORE UPDATE ON hold_resolutions
        BEGIN SELECT RAISE(ABORT, 'hold_resolutions is append-only'); END;
      CREATE TRIGGER hold_resolutions_no_delete BEFORE DELETE ON hold_resolutions
        BEGIN SELECT RAISE(ABORT, 'hold_resolutions is append-only'); END;
    `,
  },
  {
    version: 3,
    name: "dashboard sign-in: nonces, wallet identities, sessions",
    sql: `
      -- Single-use sign-in nonces; a used or expired one never signs anyone in.
      CREATE TABLE sign_in_nonces (
        nonce      TEXT PRIMARY KEY,
        expires_at INTEGER NOT NULL,
        used_at    INTEGER
      ) STRICT;
      CREATE INDEX sign_in_nonces_expiry ON sign_in_nonces (expires_at);

      -- Wallet addresses that sign in to an account; one account may hold an EVM and a Solana one.
      CREATE TABLE wallet_identities (
        family     TEXT NOT NULL CHECK (family IN ('evm', 'solana')),
        address    TEXT NOT NULL,
        account_id TEXT NOT NULL REFERENCES accounts (id),
        linked_at  INTEGER NOT NULL,
        PRIMARY KEY (family, address)
      ) STRICT;
      CREATE INDEX wallet_identities_account ON wallet_identities (account_id);

      -- Dashboard sessions: only the SHA-256 digest of the token is kept, as for API keys.
      CREATE TABLE sessions (
        id         TEXT PRIMARY KEY,
        digest     BLOB NOT NULL UNIQUE,
        account_id TEXT NOT NULL REFERENCES accounts (id),
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        ended_at   INTEGER
      ) STRICT;
    `,
  },
];
