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
    name: "onchain deposits, settlement outbox and withdrawals",
    sql: `
      -- ledger_entries gains two kinds: 'deposit' (an onchain deposit credited by the watcher,
      -- from 'system:deposits') and 'withdrawal' (an account's funds sent onchain, to
      -- 'system:withdrawals'). SQLite cannot alter a CHECK, so the table is rebuilt as it was.
      CREATE TABLE ledger_entries_v3 (
        seq            INTEGER PRIMARY KEY,
        id             TEXT NOT NULL UNIQUE,
        chain          TEXT NOT NULL,
        debit_account  TEXT NOT NULL,
        credit_account TEXT NOT NULL CHECK (credit_account <> debit_account),
        amount         INTEGER NOT NULL CHECK (amount > 0),
        pending        INTEGER NOT NULL CHECK (pending IN (0, 1)),
        kind           TEXT NOT NULL CHECK (kind IN ('credit', 'hold', 'charge', 'deposit', 'withdrawal')),
        hold_id        TEXT,
        memo           TEXT NOT NULL DEFAULT '',
        created_at     INTEGER NOT NULL
      ) STRICT;
      INSERT INTO ledger_entries_v3 SELECT * FROM ledger_entries;
      DROP TABLE ledger_entries;
      ALTER TABLE ledger_entries_v3 RENAME TO ledger_entries;
      CREATE INDEX ledger_entries_by_hold ON ledger_entries (hold_id) WHERE hold_id IS NOT NULL;
      CREATE TRIGGER ledger_entries_no_update BEFORE UPDATE ON ledger_entries
        BEGIN SELECT RAISE(ABORT, 'ledger_entries is append-only'); END;
      CREATE TRIGGER ledger_entries_no_delete BEFORE DELETE ON ledger_entries
        BEGIN SELECT RAISE(ABORT, 'ledger_entries is append-only'); END;

      -- Deposit addresses (never keys: those are re-derived from the master secret), so the
      -- watcher can map a recipient back to its account. seq lets it load only new rows.
      CREATE TABLE deposit_addresses (
        seq        INTEGER PRIMARY KEY,
        family     TEXT NOT NULL CHECK (family IN ('evm', 'solana')),
        address    TEXT NOT NULL,
        account_id TEXT NOT NULL REFERENCES accounts (id),
        created_at INTEGER NOT NULL,
        UNIQUE (family, address),
        UNIQUE (account_id, family)
      ) STRICT;

      -- The deposit watcher's position per chain: every position below next_position has been
      -- scanned and its deposits credited, in the same transaction that moved the cursor.
      CREATE TABLE chain_cursors (
        chain         TEXT PRIMARY KEY,
        next_position INTEGER NOT NULL CHECK (next_position >= 0),
        updated_at    INTEGER NOT NULL
      ) STRICT;

      -- Deposits credited at finality, once per (chain, transaction, log or instruction index).
      -- onchain_amount is the asset's smallest unit as decimal text (it may exceed int64 for an
      -- 18-decimal asset); amount is what the ledger credited (0 for dust below its scale).
      CREATE TABLE deposits (
        chain          TEXT NOT NULL,
        tx_hash        TEXT NOT NULL,
        log_index      INTEGER NOT NULL,
        position       INTEGER NOT NULL,
        from_address   TEXT NOT NULL,
        to_address     TEXT NOT NULL,
        account_id     TEXT NOT NULL REFERENCES accounts (id),
        onchain_amount TEXT NOT NULL,
        amount         INTEGER NOT NULL CHECK (amount >= 0),
        entry_id       TEXT,
        credited_at    INTEGER NOT NULL,
        PRIMARY KEY (chain, tx_hash, log_index)
      ) STRICT;
      CREATE INDEX deposits_by_account ON deposits (account_id, credited_at);

      -- Deposits seen above the finality line, shown as pending; rewritten on every scan and
      -- never credited from (a reorg simply removes them).
      CREATE TABLE pending_deposits (
        chain          TEXT NOT NULL,
        tx_hash        TEXT NOT NULL,
        log_index      INTEGER NOT NULL,
        position       INTEGER NOT NULL,
        from_address   TEXT NOT NULL,
        to_address     TEXT NOT NULL,
        account_id     TEXT NOT NULL,
        onchain_amount TEXT NOT NULL,
        seen_at        INTEGER NOT NULL,
        PRIMARY KEY (chain, tx_hash, log_index)
      ) STRICT;
      CREATE INDEX pending_deposits_by_account ON pending_deposits (account_id);

      -- How much of an account's money on a chain is backed by tokens on its deposit address:
      -- deposited (credited deposits) and committed (already assigned to settlements or
      -- withdrawals). Charges beyond the backing (operator credits) settle off-chain.
      CREATE TABLE onchain_backing (
        account_id TEXT NOT NULL,
        chain      TEXT NOT NULL,
        deposited  INTEGER NOT NULL DEFAULT 0 CHECK (deposited >= 0),
        committed  INTEGER NOT NULL DEFAULT 0 CHECK (committed >= 0),
        PRIMARY KEY (account_id, chain),
        CHECK (committed <= deposited)
      ) STRICT;

      -- The outbox: one row per charged call, written in the transaction that settles its hold.
      -- onchain_amount moves to the treasury in a chain transfer; offchain_amount was backed by
      -- operator credit only and has nothing onchain to move.
      CREATE TABLE settlement_intents (
        hold_id         TEXT PRIMARY KEY REFERENCES holds (id),
        account_id      TEXT NOT NULL,
        chain           TEXT NOT NULL,
        amount          INTEGER NOT NULL CHECK (amount > 0),
        onchain_amount  INTEGER NOT NULL CHECK (onchain_amount >= 0),
        offchain_amount INTEGER NOT NULL CHECK (offchain_amount >= 0),
        transfer_id     TEXT REFERENCES chain_transfers (id),
        created_at      INTEGER NOT NULL,
        CHECK (onchain_amount + offchain_amount = amount)
      ) STRICT;
      CREATE INDEX settlement_intents_unbatched ON settlement_intents (chain, account_id, created_at)
        WHERE transfer_id IS NULL AND onchain_amount > 0;
      CREATE INDEX settlement_intents_by_transfer ON settlement_intents (transfer_id) WHERE transfer_id IS NOT NULL;

      -- Transfers out of deposit addresses: settlements (to the treasury, covering the intents
      -- that link to them) and withdrawals. The signed transaction is stored (status
      -- 'prepared') before it is broadcast, so a restart asks the chain about it instead of
      -- paying again. amount is in ledger units.
      CREATE TABLE chain_transfers (
        seq             INTEGER PRIMARY KEY,
        id              TEXT NOT NULL UNIQUE,
        kind            TEXT NOT NULL CHECK (kind IN ('settlement', 'withdrawal')),
        account_id      TEXT NOT NULL REFERENCES accounts (id),
        chain           TEXT NOT NULL,
        to_address      TEXT NOT NULL,
        amount          INTEGER NOT NULL CHECK (amount > 0),
        status          TEXT NOT NULL CHECK (status IN ('queued', 'prepared', 'sent', 'confirmed')),
        tx_hash         TEXT,
        raw             TEXT,
        attempts        INTEGER NOT NULL DEFAULT 0,
        next_attempt_at INTEGER NOT NULL,
        last_error      TEXT NOT NULL DEFAULT '',
        created_at      INTEGER NOT NULL,
        updated_at      INTEGER NOT NULL,
        confirmed_at    INTEGER
      ) STRICT;
      CREATE INDEX chain_transfers_open ON chain_transfers (chain, next_attempt_at) WHERE status <> 'confirmed';
      CREATE INDEX chain_transfers_by_account ON chain_transfers (account_id, kind, seq);
    `,
  },
  {
    version: 4,
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
  {
    version: 5,
    name: "priced usage: each settled call's charge lines",
    sql: `
      -- The priced breakdown of a settled call (JSON written by core/billing/charge-record.ts:
      -- one line per sampling pass and server-tool fee, and the usage fields that could not be
      -- priced). '' for calls settled before it existed and for voided holds.
      ALTER TABLE hold_resolutions ADD COLUMN charges TEXT NOT NULL DEFAULT '';
    `,
  },
  {
    version: 6,
    name: "auth change counter for the key cache",
    sql: `
      -- One row counting the changes that can alter an authentication: a key revoked, deleted or
      -- moved, an account suspended, reactivated or deleted. The gateway's key cache holds while
      -- it stands still. Inserts are not counted (an unknown key is never cached, and a new row
      -- changes no cached one), nor last-use times, nor any other table: commits to the ledger by
      -- other connections leave the cache alone, as PRAGMA data_version could not.
      CREATE TABLE auth_version (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        n  INTEGER NOT NULL
      ) STRICT;
      INSERT INTO auth_version (id, n) VALUES (1, 0);

      CREATE TRIGGER api_keys_auth_version AFTER UPDATE OF id, account_id, digest, revoked_at ON api_keys
        WHEN OLD.id IS NOT NEW.id OR OLD.account_id IS NOT NEW.account_id
          OR OLD.digest IS NOT NEW.digest OR OLD.revoked_at IS NOT NEW.revoked_at
        BEGIN UPDATE auth_version SET n = n + 1 WHERE id = 1; END;
      CREATE TRIGGER api_keys_deleted_auth_version AFTER DELETE ON api_keys
        BEGIN UPDATE auth_version SET n = n + 1 WHERE id = 1; END;
      CREATE TRIGGER accounts_auth_version AFTER UPDATE OF id, status ON accounts
        WHEN OLD.id IS NOT NEW.id OR OLD.status IS NOT NEW.status
        BEGIN UPDATE auth_version SET n = n + 1 WHERE id = 1; END;
      CREATE TRIGGER accounts_deleted_auth_version AFTER DELETE ON accounts
        BEGIN UPDATE auth_version SET n = n + 1 WHERE id = 1; END;
    `,
  },
  {
    version: 7,
    name: "withdrawal network fees",
    sql: `
      -- A withdrawal's network fee, charged with it on top of amount (what the named address
      -- receives): ledger entry '<transfer id>/fee' (kind 'withdrawal', account →
      -- 'system:withdrawal-fees'), committed in onchain_backing with the amount. 0 for
      -- settlements and for withdrawals written before fees existed.
      ALTER TABLE chain_transfers ADD COLUMN fee INTEGER NOT NULL DEFAULT 0 CHECK (fee >= 0);
    `,
  },
  {
    version: 8,
    name: "idempotency keys of billed calls",
    sql: `
      -- Idempotency-Keys of billed calls (core/inference/idempotency.ts), per account. A claim
      -- inserts the row ('running'); the call's end keeps its answer ('done', or 'dropped' when
      -- too large to keep) or deletes the row (the call charged nothing). A row past expires_at,
      -- or still 'running' past the longest call, is taken over by the next claim; expired rows
      -- are swept.
      CREATE TABLE idempotency_keys (
        account_id   TEXT NOT NULL,
        key          TEXT NOT NULL,
        claim_id     TEXT NOT NULL,
        request_hash TEXT NOT NULL,
        state        TEXT NOT NULL CHECK (state IN ('running', 'done', 'dropped')),
        answer       BLOB,
        claimed_at   INTEGER NOT NULL,
        expires_at   INTEGER NOT NULL,
        PRIMARY KEY (account_id, key)
      ) STRICT;
      CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);
    `,
  },
  {
    version: 9,
    name: "spend caps",
    sql: `
      -- Spend caps (core/billing/spend-caps.ts): the most an account (key_id '') or one of its
      -- keys may spend on a chain per UTC day, UTC month or ever, in the chain's ledger units.
      -- Checked in the hold's transaction against the period's holds (holds_by_chain_time).
      CREATE TABLE spend_caps (
        account_id TEXT NOT NULL REFERENCES accounts (id),
        key_id     TEXT NOT NULL,
        chain      TEXT NOT NULL,
        period     TEXT NOT NULL CHECK (period IN ('day', 'month', 'lifetime')),
        amount     INTEGER NOT NULL CHECK (amount >= 0),
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (account_id, key_id, chain, period)
      ) STRICT;
      CREATE INDEX holds_by_chain_time ON holds (account_id, chain, created_at);
    `,
  },
  {
    version: 10,
    name: "spend by day",
    sql: `
      -- What each key (key_id '' for a call without one) has spent on a chain per UTC day (day:
      -- the day's first millisecond): its holds placed that day, open ones at their held amount,
      -- resolved ones at their charge. Written with every hold and resolution, so a spend cap
      -- sums at most one row per key and day of its period instead of the period's holds. The
      -- ledger audit recomputes it from the holds.
      CREATE TABLE spend_days (
        account_id TEXT NOT NULL,
        key_id     TEXT NOT NULL,
        chain      TEXT NOT NULL,
        day        INTEGER NOT NULL,
        spent      INTEGER NOT NULL CHECK (spent >= 0),
        PRIMARY KEY (account_id, chain, key_id, day)
      ) STRICT;
      INSERT INTO spend_days (account_id, key_id, chain, day, spent)
        SELECT h.account_id, h.key_id, h.chain, h.created_at - h.created_at % 86400000,
               SUM(CASE WHEN r.status IS NULL THEN h.amount ELSE r.amount END)
          FROM holds h LEFT JOIN hold_resolutions r ON r.hold_id = h.id
         GROUP BY h.account_id, h.key_id, h.chain, h.created_at - h.created_at % 86400000;
      -- Caps no longer scan a period's holds.
      DROP INDEX holds_by_chain_time;
    `,
  },
  {
    version: 11,
    name: "x402 payments",
    sql: `
      -- ledger_entries gains the kind 'x402' (core/ports/x402.ts): a keyless payer's payment
      -- credited to its account from 'system:x402' (entry 'x402_<payment id>'), and what its call
      -- did not spend returned there (entry 'x402ret_<payment id>'). SQLite cannot alter a CHECK,
      -- so the table is rebuilt as migration 3 did, with its index and triggers (the only ones
      -- any migration put on it).
      CREATE TABLE ledger_entries_v11 (
        seq            INTEGER PRIMARY KEY,
        id             TEXT NOT NULL UNIQUE,
        chain          TEXT NOT NULL,
        debit_account  TEXT NOT NULL,
        credit_account TEXT NOT NULL CHECK (credit_account <> debit_account),
        amount         INTEGER NOT NULL CHECK (amount > 0),
        pending        INTEGER NOT NULL CHECK (pending IN (0, 1)),
        kind           TEXT NOT NULL CHECK (kind IN ('credit', 'hold', 'charge', 'deposit', 'withdrawal', 'x402')),
        hold_id        TEXT,
        memo           TEXT NOT NULL DEFAULT '',
        created_at     INTEGER NOT NULL
      ) STRICT;
      INSERT INTO ledger_entries_v11
             (seq, id, chain, debit_account, credit_account, amount, pending, kind, hold_id, memo, created_at)
        SELECT seq, id, chain, debit_account, credit_account, amount, pending, kind, hold_id, memo, created_at
          FROM ledger_entries;
      DROP TABLE ledger_entries;
      ALTER TABLE ledger_entries_v11 RENAME TO ledger_entries;
      CREATE INDEX ledger_entries_by_hold ON ledger_entries (hold_id) WHERE hold_id IS NOT NULL;
      CREATE TRIGGER ledger_entries_no_update BEFORE UPDATE ON ledger_entries
        BEGIN SELECT RAISE(ABORT, 'ledger_entries is append-only'); END;
      CREATE TRIGGER ledger_entries_no_delete BEFORE DELETE ON ledger_entries
        BEGIN SELECT RAISE(ABORT, 'ledger_entries is append-only'); END;

      -- One row per x402 payment, written with its credit and closed (status, settled, tx_hash,
      -- error, closed_at) with its return. id is derived from the signed payment, so the same
      -- payment presented twice is refused as a replay; one payment pays for one call's hold.
      -- hold_id references no hold: the payment is credited before its hold is placed. Amounts
      -- are ledger units; payload is the payment as presented, kept for a collection retried.
      CREATE TABLE x402_payments (
        id         TEXT PRIMARY KEY,
        hold_id    TEXT NOT NULL UNIQUE,
        account_id TEXT NOT NULL REFERENCES accounts (id),
        chain      TEXT NOT NULL,
        scheme     TEXT NOT NULL CHECK (scheme IN ('exact', 'upto')),
        payer      TEXT NOT NULL,
        authorised INTEGER NOT NULL CHECK (authorised > 0),
        payload    TEXT NOT NULL,
        status     TEXT NOT NULL CHECK (status IN ('authorised', 'settled', 'unused', 'failed')),
        settled    INTEGER NOT NULL DEFAULT 0 CHECK (settled >= 0),
        tx_hash    TEXT NOT NULL DEFAULT '',
        error      TEXT NOT NULL DEFAULT '',
        created_at INTEGER NOT NULL,
        closed_at  INTEGER
      ) STRICT;
    `,
  },
  {
    version: 12,
    name: "open x402 payments",
    sql: `
      -- The payments still 'authorised' by age, for the recovery pass that collects or closes
      -- those a crash left open (openX402Payments). Partial: closed payments, nearly all of
      -- them, are not in it, so the pass never reads past the open ones.
      CREATE INDEX x402_payments_open ON x402_payments (created_at) WHERE status = 'authorised';
    `,
  },
  {
    version: 13,
    name: "x402 collections recorded, failed payments cleared",
    sql: `
      -- x402_payments gains the status 'collected' (core/ports/x402.ts: the charge was collected
      -- onchain, recorded before its call's ledger settle; settled and tx_hash say what and how)
      -- with collected_at, and cleared_at (an operator cleared a 'failed' payment's payer). SQLite
      -- cannot alter a CHECK, so the table is rebuilt as migration 11 rebuilt ledger_entries; no
      -- trigger was ever put on it, and nothing references it.
      CREATE TABLE x402_payments_v13 (
        id           TEXT PRIMARY KEY,
        hold_id      TEXT NOT NULL UNIQUE,
        account_id   TEXT NOT NULL REFERENCES accounts (id),
        chain        TEXT NOT NULL,
        scheme       TEXT NOT NULL CHECK (scheme IN ('exact', 'upto')),
        payer        TEXT NOT NULL,
        authorised   INTEGER NOT NULL CHECK (authorised > 0),
        payload      TEXT NOT NULL,
        status       TEXT NOT NULL CHECK (status IN ('authorised', 'collected', 'settled', 'unused', 'failed')),
        settled      INTEGER NOT NULL DEFAULT 0 CHECK (settled >= 0),
        tx_hash      TEXT NOT NULL DEFAULT '',
        error        TEXT NOT NULL DEFAULT '',
        created_at   INTEGER NOT NULL,
        closed_at    INTEGER,
        collected_at INTEGER,
        cleared_at   INTEGER
      ) STRICT;
      INSERT INTO x402_payments_v13
             (id, hold_id, account_id, chain, scheme, payer, authorised, payload, status, settled, tx_hash, error,
              created_at, closed_at)
        SELECT id, hold_id, account_id, chain, scheme, payer, authorised, payload, status, settled, tx_hash, error,
               created_at, closed_at
          FROM x402_payments;
      DROP TABLE x402_payments;
      ALTER TABLE x402_payments_v13 RENAME TO x402_payments;
      -- The payments the recovery pass reads (openX402Payments): a collected one is open too.
      -- Queries state the predicate exactly as written here, so the planner sees the index fits.
      CREATE INDEX x402_payments_open ON x402_payments (created_at) WHERE status IN ('authorised', 'collected');
      -- A payer's failed payments no operator cleared (failedX402Payments), read on every x402
      -- call: nearly every payer has none, so the index is nearly empty.
      CREATE INDEX x402_payments_failed ON x402_payments (payer, created_at)
        WHERE status = 'failed' AND cleared_at IS NULL;
    `,
  },
  {
    version: 14,
    name: "x402 collections begun",
    sql: `
      -- When a collection of an x402 payment was begun (core/ports/x402.ts, markX402Collecting):
      -- written before the facilitator is asked, so a payment the chain may have taken while the
      -- gateway died, or could not record, is known. While such a payment is 'authorised' its
      -- hold is not swept, and the recovery pass asks the chain before ending it. A column alone:
      -- no row moves, nothing is rebuilt.
      ALTER TABLE x402_payments ADD COLUMN collecting_at INTEGER;
    `,
  },
  {
    version: 15,
    name: "hold raises",
    sql: `
      -- A call that runs several passes (server tools, compaction, fallbacks) holds its first
      -- pass and raises the hold at each pass boundary (LedgerStore.raiseHold in
      -- src/core/ports/ledger.ts). One row per raise, append-only: the id is (hold, pass), so a
      -- retried raise finds the first. Each raise writes a pending entry '<hold id>/raise/<pass>'
      -- (kind 'hold', from the account to system:revenue) that counts, like the hold's own, until
      -- the hold resolves; what a hold holds is its amount plus its raises, and its resolution
      -- releases all of it.
      CREATE TABLE hold_raises (
        hold_id    TEXT NOT NULL REFERENCES holds (id),
        pass       INTEGER NOT NULL CHECK (pass >= 2),
        amount     INTEGER NOT NULL CHECK (amount > 0),
        created_at INTEGER NOT NULL,
        PRIMARY KEY (hold_id, pass)
      ) STRICT;
      CREATE TRIGGER hold_raises_no_update BEFORE UPDATE ON hold_raises
        BEGIN SELECT RAISE(ABORT, 'hold_raises is append-only'); END;
      CREATE TRIGGER hold_raises_no_delete BEFORE DELETE ON hold_raises
        BEGIN SELECT RAISE(ABORT, 'hold_raises is append-only'); END;
      -- An open hold's raises so far, kept with it on the work list: what its resolution (or the
      -- sweeper) releases on top of its amount without summing hold_raises, and, on PostgreSQL,
      -- the row a raise and a resolution of the same hold lock. The audit checks it against
      -- hold_raises.
      ALTER TABLE open_holds ADD COLUMN raised INTEGER NOT NULL DEFAULT 0 CHECK (raised >= 0);
    `,
  },
  {
    version: 16,
    name: "the provider endpoint of a settled call",
    sql: `
      -- The configured name of the provider endpoint that served a settled call, when the router
      -- chose among several (docs/providers.md): only the attempt that delivered is charged, and
      -- its row names it. '' for calls without a router, voided holds and rows before it existed.
      ALTER TABLE hold_resolutions ADD COLUMN endpoint TEXT NOT NULL DEFAULT '';
    `,
  },
];
