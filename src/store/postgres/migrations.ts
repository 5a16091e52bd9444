/**
 * The PostgreSQL schema, as numbered migrations applied in order (database.ts). The same
 * tables and rules as the SQLite store's (src/store/sqlite/migrations.ts), in PostgreSQL's types: times
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
  {
    version: 4,
    name: "onchain deposits, settlement outbox and withdrawals; system balances in shards",
    sql: `
      -- A system account (system:revenue, …) is the counterpart of every call on its chain: one
      -- running-total row for it would be a lock every hold on every host waits for until the
      -- previous one commits. Its totals are spread over 16 rows (shard 0..15, picked per
      -- transaction) and read as their sum; a user account keeps exactly one row (shard 0),
      -- which stays the lock its holds serialise on.
      ALTER TABLE ledger_balances ADD COLUMN shard SMALLINT NOT NULL DEFAULT 0
        CHECK (shard >= 0 AND shard < 16);
      ALTER TABLE ledger_balances DROP CONSTRAINT ledger_balances_pkey;
      ALTER TABLE ledger_balances ADD PRIMARY KEY (account, chain, shard);
      ALTER TABLE ledger_balances ADD CONSTRAINT one_row_per_user_account CHECK (may_overdraw OR shard = 0);

      -- Deposit addresses (never keys: those are re-derived from the master secret), so the
      -- watcher can map a recipient back to its account. seq lets it load only new rows.
      CREATE TABLE deposit_addresses (
        seq        BIGSERIAL PRIMARY KEY,
        family     TEXT NOT NULL CHECK (family IN ('evm', 'solana')),
        address    TEXT NOT NULL,
        account_id TEXT NOT NULL REFERENCES accounts (id),
        created_at BIGINT NOT NULL,
        UNIQUE (family, address),
        UNIQUE (account_id, family)
      );

      -- The deposit watcher's position per chain: every position below next_position has been
      -- scanned and its deposits credited, in the same transaction that moved the cursor.
      CREATE TABLE chain_cursors (
        chain         TEXT PRIMARY KEY,
        next_position BIGINT NOT NULL CHECK (next_position >= 0),
        updated_at    BIGINT NOT NULL
      );

      -- Deposits credited at finality, once per (chain, transaction, log or instruction index).
      -- onchain_amount is the asset's smallest unit as decimal text (it may exceed int64 for an
      -- 18-decimal asset); amount is what the ledger credited (0 for dust below its scale).
      CREATE TABLE deposits (
        chain          TEXT NOT NULL,
        tx_hash        TEXT NOT NULL,
        log_index      INTEGER NOT NULL,
        position       BIGINT NOT NULL,
        from_address   TEXT NOT NULL,
        to_address     TEXT NOT NULL,
        account_id     TEXT NOT NULL REFERENCES accounts (id),
        onchain_amount TEXT NOT NULL,
        amount         BIGINT NOT NULL CHECK (amount >= 0),
        entry_id       TEXT,
        credited_at    BIGINT NOT NULL,
        PRIMARY KEY (chain, tx_hash, log_index)
      );
      CREATE INDEX deposits_by_account ON deposits (account_id, credited_at);

      -- Deposits seen above the finality line, shown as pending; rewritten on every scan and
      -- never credited from (a reorg simply removes them).
      CREATE TABLE pending_deposits (
        chain          TEXT NOT NULL,
        tx_hash        TEXT NOT NULL,
        log_index      INTEGER NOT NULL,
        position       BIGINT NOT NULL,
        from_address   TEXT NOT NULL,
        to_address     TEXT NOT NULL,
        account_id     TEXT NOT NULL,
        onchain_amount TEXT NOT NULL,
        seen_at        BIGINT NOT NULL,
        PRIMARY KEY (chain, tx_hash, log_index)
      );
      CREATE INDEX pending_deposits_by_account ON pending_deposits (account_id);

      -- How much of an account's money on a chain is backed by tokens on its deposit address:
      -- deposited (credited deposits) and committed (assigned to settlements or withdrawals).
      -- Charges beyond the backing (operator credits) settle off-chain.
      CREATE TABLE onchain_backing (
        account_id TEXT NOT NULL,
        chain      TEXT NOT NULL,
        deposited  BIGINT NOT NULL DEFAULT 0 CHECK (deposited >= 0),
        committed  BIGINT NOT NULL DEFAULT 0 CHECK (committed >= 0),
        PRIMARY KEY (account_id, chain),
        CONSTRAINT committed_within_deposited CHECK (committed <= deposited)
      );

      -- Transfers out of deposit addresses: settlements (to the treasury, covering the intents
      -- that link to them) and withdrawals. The signed transaction is stored (status
      -- 'prepared') before it is broadcast, so whichever host runs the chain next asks the chain
      -- about it instead of paying again. amount is in ledger units.
      CREATE TABLE chain_transfers (
        seq             BIGSERIAL UNIQUE,
        id              TEXT PRIMARY KEY,
        kind            TEXT NOT NULL CHECK (kind IN ('settlement', 'withdrawal')),
        account_id      TEXT NOT NULL REFERENCES accounts (id),
        chain           TEXT NOT NULL,
        to_address      TEXT NOT NULL,
        amount          BIGINT NOT NULL CHECK (amount > 0),
        status          TEXT NOT NULL CHECK (status IN ('queued', 'prepared', 'sent', 'confirmed')),
        tx_hash         TEXT,
        raw             TEXT,
        attempts        INTEGER NOT NULL DEFAULT 0,
        next_attempt_at BIGINT NOT NULL,
        last_error      TEXT NOT NULL DEFAULT '',
        created_at      BIGINT NOT NULL,
        updated_at      BIGINT NOT NULL,
        confirmed_at    BIGINT
      );
      CREATE INDEX chain_transfers_open ON chain_transfers (chain, next_attempt_at) WHERE status <> 'confirmed';
      CREATE INDEX chain_transfers_by_account ON chain_transfers (account_id, kind, seq);

      -- The outbox: one row per charged call, written in the transaction that settles its hold.
      -- onchain_amount moves to the treasury in a chain transfer; offchain_amount was backed by
      -- operator credit only and has nothing onchain to move.
      CREATE TABLE settlement_intents (
        hold_id         TEXT PRIMARY KEY REFERENCES holds (id),
        account_id      TEXT NOT NULL,
        chain           TEXT NOT NULL,
        amount          BIGINT NOT NULL CHECK (amount > 0),
        onchain_amount  BIGINT NOT NULL CHECK (onchain_amount >= 0),
        offchain_amount BIGINT NOT NULL CHECK (offchain_amount >= 0),
        transfer_id     TEXT REFERENCES chain_transfers (id),
        created_at      BIGINT NOT NULL,
        CHECK (onchain_amount + offchain_amount = amount)
      );
      CREATE INDEX settlement_intents_unbatched ON settlement_intents (chain, account_id, created_at)
        WHERE transfer_id IS NULL AND onchain_amount > 0;
      CREATE INDEX settlement_intents_by_transfer ON settlement_intents (transfer_id) WHERE transfer_id IS NOT NULL;

      -- An intent is linked to one transfer once, and never moved to another.
      CREATE FUNCTION intent_linked_once() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF OLD.transfer_id IS NOT NULL OR NEW.hold_id <> OLD.hold_id OR NEW.amount <> OLD.amount
             OR NEW.onchain_amount <> OLD.onchain_amount OR NEW.offchain_amount <> OLD.offchain_amount
             OR NEW.account_id <> OLD.account_id OR NEW.chain <> OLD.chain THEN
            RAISE EXCEPTION 'settlement intent % is already linked or would change', OLD.hold_id
              USING ERRCODE = 'restrict_violation';
          END IF;
          RETURN NEW;
        END $$;
      CREATE TRIGGER settlement_intents_linked_once BEFORE UPDATE ON settlement_intents
        FOR EACH ROW EXECUTE FUNCTION intent_linked_once();
      CREATE TRIGGER settlement_intents_no_delete BEFORE DELETE ON settlement_intents
        FOR EACH ROW EXECUTE FUNCTION refuse_change();
    `,
  },
  {
    version: 5,
    name: "auth changes announced to every host",
    sql: `
      -- Every host's key cache learns of a change by notification at its commit (LISTEN
      -- tollgate_auth_version, the counter as payload) instead of reading the counter per call.
      CREATE OR REPLACE FUNCTION bump_auth_version() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
          v BIGINT;
        BEGIN
          UPDATE auth_version SET n = n + 1 WHERE id = 1 RETURNING n INTO v;
          PERFORM pg_notify('tollgate_auth_version', v::text);
          RETURN NULL;
        END $$;
    `,
  },
  {
    version: 6,
    name: "withdrawal network fees",
    sql: `
      -- A withdrawal's network fee, charged with it on top of amount (what the named address
      -- receives): ledger entry '<transfer id>/fee' (kind 'withdrawal', account →
      -- 'system:withdrawal-fees'), committed in onchain_backing with the amount. 0 for
      -- settlements and for withdrawals written before fees existed.
      ALTER TABLE chain_transfers ADD COLUMN fee BIGINT NOT NULL DEFAULT 0 CHECK (fee >= 0);
    `,
  },
  {
    version: 7,
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
        answer       BYTEA,
        claimed_at   BIGINT NOT NULL,
        expires_at   BIGINT NOT NULL,
        PRIMARY KEY (account_id, key)
      );
      CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);
    `,
  },
  {
    version: 8,
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
        amount     BIGINT NOT NULL CHECK (amount >= 0),
        updated_at BIGINT NOT NULL,
        PRIMARY KEY (account_id, key_id, chain, period)
      );
      CREATE INDEX holds_by_chain_time ON holds (account_id, chain, created_at);
    `,
  },
  {
    version: 9,
    name: "spend by day",
    sql: `
      -- What each key (key_id '' for a call without one) has spent on a chain per UTC day (day:
      -- the day's first millisecond): its holds placed that day, open ones at their held amount,
      -- resolved ones at their charge. Written in the statements that place and resolve holds
      -- (after the balance row, the lock order every writer keeps), so a spend cap sums at most
      -- one row per key and day of its period instead of the period's holds. The ledger audit
      -- recomputes it from the holds.
      CREATE TABLE spend_days (
        account_id TEXT NOT NULL,
        key_id     TEXT NOT NULL,
        chain      TEXT NOT NULL,
        day        BIGINT NOT NULL,
        spent      BIGINT NOT NULL CHECK (spent >= 0),
        PRIMARY KEY (account_id, chain, key_id, day)
      );
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
    version: 10,
    name: "x402 payments",
    sql: `
      -- ledger_entries gains the kind 'x402' (core/ports/x402.ts): a keyless payer's payment
      -- credited to its account from 'system:x402' (entry 'x402_<payment id>'), and what its call
      -- did not spend returned there (entry 'x402ret_<payment id>'). The CHECK written inline in
      -- migration 3 is named ledger_entries_kind_check; it is replaced under the same name.
      ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_kind_check;
      ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_kind_check
        CHECK (kind IN ('credit', 'hold', 'charge', 'deposit', 'withdrawal', 'x402'));

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
        authorised BIGINT NOT NULL CHECK (authorised > 0),
        payload    TEXT NOT NULL,
        status     TEXT NOT NULL CHECK (status IN ('authorised', 'settled', 'unused', 'failed')),
        settled    BIGINT NOT NULL DEFAULT 0 CHECK (settled >= 0),
        tx_hash    TEXT NOT NULL DEFAULT '',
        error      TEXT NOT NULL DEFAULT '',
        created_at BIGINT NOT NULL,
        closed_at  BIGINT
      );
    `,
  },
  {
    version: 11,
    name: "open x402 payments",
    sql: `
      -- The payments still 'authorised' by age, for the recovery pass that collects or closes
      -- those a crash left open (openX402Payments). Partial: closed payments, nearly all of
      -- them, are not in it, so the pass never reads past the open ones.
      CREATE INDEX x402_payments_open ON x402_payments (created_at) WHERE status = 'authorised';
    `,
  },
  {
    version: 12,
    name: "x402 collections recorded, failed payments cleared",
    sql: `
      -- x402_payments gains the status 'collected' (core/ports/x402.ts: the charge was collected
      -- onchain, recorded before its call's ledger settle; settled and tx_hash say what and how)
      -- with collected_at, and cleared_at (an operator cleared a 'failed' payment's payer). The
      -- CHECK written inline in migration 10 is named x402_payments_status_check; it is
      -- replaced under the same name.
      ALTER TABLE x402_payments DROP CONSTRAINT x402_payments_status_check;
      ALTER TABLE x402_payments ADD CONSTRAINT x402_payments_status_check
        CHECK (status IN ('authorised', 'collected', 'settled', 'unused', 'failed'));
      ALTER TABLE x402_payments ADD COLUMN collected_at BIGINT, ADD COLUMN cleared_at BIGINT;
      -- The payments the recovery pass reads (openX402Payments): a collected one is open too.
      -- Queries state the predicate exactly as written here, so even a generic plan uses it.
      DROP INDEX x402_payments_open;
      CREATE INDEX x402_payments_open ON x402_payments (created_at) WHERE status IN ('authorised', 'collected');
      -- A payer's failed payments no operator cleared (failedX402Payments), read on every x402
      -- call: nearly every payer has none, so the index is nearly empty.
      CREATE INDEX x402_payments_failed ON x402_payments (payer, created_at)
        WHERE status = 'failed' AND cleared_at IS NULL;
    `,
  },
  {
    version: 13,
    name: "x402 collections begun",
    sql: `
      -- When a collection of an x402 payment was begun (core/ports/x402.ts, markX402Collecting):
      -- written before the facilitator is asked, so a payment the chain may have taken while the
      -- gateway died, or could not record, is known. While such a payment is 'authorised' its
      -- hold is not swept, and the recovery pass asks the chain before ending it. A nullable
      -- column without a default: no row is rewritten.
      ALTER TABLE x402_payments ADD COLUMN collecting_at BIGINT;
    `,
  },
  {
    version: 14,
    name: "hold raises",
    sql: `
      -- A call that runs several passes holds its first pass and raises the hold at each pass
      -- boundary (LedgerStore.raiseHold in src/core/ports/ledger.ts); as SQLite's migration 15.
      -- One row per raise, append-only, id (hold, pass); each writes a pending entry
      -- '<hold id>/raise/<pass>' (kind 'hold') on the revenue shard of its hold, released with it.
      CREATE TABLE hold_raises (
        hold_id    TEXT NOT NULL REFERENCES holds (id),
        pass       INTEGER NOT NULL CHECK (pass >= 2),
        amount     BIGINT NOT NULL CHECK (amount > 0),
        created_at BIGINT NOT NULL,
        PRIMARY KEY (hold_id, pass)
      );
      CREATE TRIGGER hold_raises_append_only BEFORE UPDATE OR DELETE ON hold_raises
        FOR EACH ROW EXECUTE FUNCTION refuse_change();
      CREATE TRIGGER hold_raises_no_truncate BEFORE TRUNCATE ON hold_raises
        FOR EACH STATEMENT EXECUTE FUNCTION refuse_change();
      -- An open hold's raises so far. Its open-list row is the lock a raise and a resolution of
      -- the hold both take (a raise updates it, a resolution deletes it), so a resolution waiting
      -- on a raise releases what the raise added: it reads the total from the row it deletes.
      ALTER TABLE open_holds ADD COLUMN raised BIGINT NOT NULL DEFAULT 0 CHECK (raised >= 0);
    `,
  },
  {
    version: 15,
    name: "billing settings announced to every host; a hold and its resolution as stored functions",
    sql: `
      -- What every call reads and an operator rarely changes (an account's default chain, its
      -- spend caps) is cached by each serving host (billing-cache.ts) and announced at the
      -- commit of every change, whichever host makes it: the account's id on the channel
      -- tollgate_billing, heard on the connection that already LISTENs for auth changes.
      CREATE FUNCTION announce_billing_change() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF TG_OP = 'DELETE' THEN
            PERFORM pg_notify('tollgate_billing', OLD.account_id);
          ELSE
            PERFORM pg_notify('tollgate_billing', NEW.account_id);
            IF TG_OP = 'UPDATE' AND OLD.account_id IS DISTINCT FROM NEW.account_id THEN
              PERFORM pg_notify('tollgate_billing', OLD.account_id);
            END IF;
          END IF;
          RETURN NULL;
        END $$;
      CREATE TRIGGER billing_accounts_announced AFTER INSERT OR UPDATE OR DELETE ON billing_accounts
        FOR EACH ROW EXECUTE FUNCTION announce_billing_change();
      CREATE TRIGGER spend_caps_announced AFTER INSERT OR UPDATE OR DELETE ON spend_caps
        FOR EACH ROW EXECUTE FUNCTION announce_billing_change();

      -- The calls' path as functions (ledger.ts calls each in one statement, one round trip):
      -- the statements are those the store sent as text before, unchanged, so their locks, their
      -- lock order and their snapshots (one per statement, READ COMMITTED) are the same, but
      -- PL/pgSQL keeps their plans for the session instead of planning each call's statement
      -- again (docs/store.md, "Where a billed call's time goes").

      -- A hold in one statement: the funds check is the conditional UPDATE of the account's
      -- balance row (the lock every hold of the account waits on), and every other row is
      -- written only if it moved. No row updated: nothing is written (no seq returned). An id
      -- already taken fails the whole statement on the primary key.
      CREATE FUNCTION tollgate_place_hold(
        p_id TEXT, p_account TEXT, p_request TEXT, p_key TEXT, p_chain TEXT, p_amount BIGINT, p_kind TEXT,
        p_model TEXT, p_input BIGINT, p_max BIGINT, p_image_size TEXT, p_image_count INTEGER, p_at BIGINT
      ) RETURNS TABLE (seq BIGINT) LANGUAGE plpgsql AS $$
        #variable_conflict use_column
        BEGIN
          RETURN QUERY
          WITH funds AS (
            UPDATE ledger_balances SET debits_pending = debits_pending + $6::bigint
             WHERE $6::bigint > 0 AND account = $2::text AND chain = $5::text AND shard = 0
               AND credits_posted - debits_posted - debits_pending >= $6::bigint
            RETURNING 1
          ), hold AS (
            INSERT INTO holds (id, account_id, request_id, key_id, chain, amount, call_kind, model, input_tokens,
                               max_tokens, image_size, image_count, created_at)
            SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::bigint, $7::text, $8::text, $9::bigint,
                   $10::bigint, $11::text, $12::integer, $13::bigint
             WHERE $6::bigint = 0 OR EXISTS (SELECT 1 FROM funds)
            RETURNING holds.seq
          ), opened AS (
            INSERT INTO open_holds (hold_id, created_at) SELECT $1::text, $13::bigint FROM hold
          ), entry AS (
            INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id,
                                        memo, created_at)
            SELECT $1::text || '/hold', $5::text, $2::text, 'system:revenue', $6::bigint, true, 'hold', $1::text, '',
                   $13::bigint
              FROM funds
          ), revenue AS (
            INSERT INTO ledger_balances AS b (account, chain, shard, may_overdraw, credits_pending)
            SELECT 'system:revenue', $5::text, hold.seq % 16, true, $6::bigint FROM hold, funds
            ON CONFLICT (account, chain, shard) DO UPDATE SET credits_pending = b.credits_pending + EXCLUDED.credits_pending
          ), spent AS (
            INSERT INTO spend_days AS d (account_id, key_id, chain, day, spent)
            SELECT $2::text, $4::text, $5::text, $13::bigint - $13::bigint % 86400000, $6::bigint FROM hold, funds
            ON CONFLICT (account_id, chain, key_id, day) DO UPDATE SET spent = d.spent + EXCLUDED.spent
          )
          SELECT hold.seq FROM hold;
        END $$;

      -- A hold some spend caps bound, in one statement: the account's balance row locked (the
      -- lock every hold of the account there waits on, tollgate_place_hold's included), then a
      -- hold with this id looked for (taken: a retry, answered by the refusal path, not counted
      -- against itself), then each cap's period summed from spend_days (p_since: the period's
      -- first millisecond, p_keys: the cap's key or '' for the account's), each in a query of its
      -- own that sees every hold committed before the lock was granted; placed only if every cap
      -- has room (spent + amount <= cap). spent: the sums, in the caps' order, as text.
      CREATE FUNCTION tollgate_place_capped_hold(
        p_id TEXT, p_account TEXT, p_request TEXT, p_key TEXT, p_chain TEXT, p_amount BIGINT, p_kind TEXT,
        p_model TEXT, p_input BIGINT, p_max BIGINT, p_image_size TEXT, p_image_count INTEGER, p_at BIGINT,
        p_since BIGINT[], p_keys TEXT[], p_caps BIGINT[]
      ) RETURNS TABLE (seq BIGINT, taken BOOLEAN, refused BOOLEAN, spent TEXT[]) LANGUAGE plpgsql AS $$
        #variable_conflict use_column
        DECLARE
          v_spent TEXT[] := '{}';
          v_used NUMERIC;
          v_refused BOOLEAN := false;
          v_seq BIGINT;
        BEGIN
          PERFORM 1 FROM ledger_balances b
            WHERE b.account = p_account AND b.chain = p_chain AND b.shard = 0 FOR NO KEY UPDATE;
          IF EXISTS (SELECT 1 FROM holds h WHERE h.id = p_id) THEN
            RETURN QUERY SELECT NULL::bigint, true, false, NULL::text[];
            RETURN;
          END IF;
          FOR i IN 1 .. COALESCE(array_length(p_since, 1), 0) LOOP
            SELECT COALESCE(SUM(d.spent), 0) INTO v_used FROM spend_days d
             WHERE d.account_id = p_account AND d.chain = p_chain AND d.day >= p_since[i]
               AND (p_keys[i] = '' OR d.key_id = p_keys[i]);
            v_spent := v_spent || v_used::text;
            IF v_used + p_amount > p_caps[i] THEN
              v_refused := true;
            END IF;
          END LOOP;
          IF v_refused THEN
            RETURN QUERY SELECT NULL::bigint, false, true, v_spent;
            RETURN;
          END IF;
          SELECT p.seq INTO v_seq
            FROM tollgate_place_hold(p_id, p_account, p_request, p_key, p_chain, p_amount, p_kind, p_model, p_input,
                                     p_max, p_image_size, p_image_count, p_at) AS p;
          RETURN QUERY SELECT v_seq, false, false, v_spent;
        END $$;

      -- Settles or voids a hold in one statement (see RESOLVE in ledger.ts for its locks and
      -- why a CHECK may refuse it once, to be run again).
      CREATE FUNCTION tollgate_resolve(
        p_hold TEXT, p_status TEXT, p_amount BIGINT, p_input BIGINT, p_output BIGINT, p_cw5m BIGINT, p_cw1h BIGINT,
        p_read BIGINT, p_images INTEGER, p_charges TEXT, p_at BIGINT
      ) RETURNS TABLE (
        seq BIGINT, id TEXT, account_id TEXT, request_id TEXT, key_id TEXT, chain TEXT, amount BIGINT, call_kind TEXT,
        model TEXT, input_tokens BIGINT, max_tokens BIGINT, image_size TEXT, image_count INTEGER, created_at BIGINT,
        raised NUMERIC, status TEXT, settled_amount BIGINT, u_input BIGINT, u_output BIGINT, u_cw5m BIGINT,
        u_cw1h BIGINT, u_read BIGINT, u_images INTEGER, u_charges TEXT, resolved_at BIGINT, resolved_now BOOLEAN,
        raised_now BIGINT
      ) LANGUAGE plpgsql AS $$
        #variable_conflict use_column
        BEGIN
          RETURN QUERY
          WITH hold AS (
            SELECT h.seq, h.id, h.account_id, h.request_id, h.key_id, h.chain, h.amount, h.call_kind, h.model,
                   h.input_tokens, h.max_tokens, h.image_size, h.image_count, h.created_at,
                   COALESCE((SELECT SUM(x.amount) FROM hold_raises x WHERE x.hold_id = h.id), 0) AS raised,
                   r.status, r.amount AS settled_amount, r.input_tokens AS u_input, r.output_tokens AS u_output,
                   r.cache_write_5m_tokens AS u_cw5m, r.cache_write_1h_tokens AS u_cw1h, r.cache_read_tokens AS u_read,
                   r.images AS u_images, r.charges AS u_charges, r.resolved_at
              FROM holds h LEFT JOIN hold_resolutions r ON r.hold_id = h.id WHERE h.id = $1::text
          ), closed AS (
            DELETE FROM open_holds o USING hold
             WHERE o.hold_id = hold.id AND hold.status IS NULL AND $3::bigint BETWEEN 0 AND hold.amount + o.raised
            RETURNING o.hold_id, o.raised, hold.amount + o.raised AS held
          ), resolved AS (
            INSERT INTO hold_resolutions (hold_id, status, amount, input_tokens, output_tokens, cache_write_5m_tokens,
                                          cache_write_1h_tokens, cache_read_tokens, images, charges, resolved_at)
            SELECT closed.hold_id, $2::text, $3::bigint, $4::bigint, $5::bigint, $6::bigint, $7::bigint, $8::bigint,
                   $9::integer, $10::text, $11::bigint
              FROM closed
            RETURNING hold_resolutions.hold_id
          ), released AS (
            UPDATE ledger_balances b
               SET debits_pending = b.debits_pending - closed.held, debits_posted = b.debits_posted + $3::bigint
              FROM hold, closed, resolved
             WHERE closed.held > 0 AND b.account = hold.account_id AND b.chain = hold.chain AND b.shard = 0
            RETURNING 1
          ), revenue AS (
            UPDATE ledger_balances b
               SET credits_pending = b.credits_pending - closed.held, credits_posted = b.credits_posted + $3::bigint
              FROM hold, closed, released
             WHERE b.account = 'system:revenue' AND b.chain = hold.chain AND b.shard = hold.seq % 16
            RETURNING 1
          ), charge AS (
            INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id, memo,
                                        created_at)
            SELECT hold.id || '/charge', hold.chain, hold.account_id, 'system:revenue', $3::bigint, false, 'charge',
                   hold.id, '', $11::bigint
              FROM hold, revenue
             WHERE $3::bigint > 0
          ), backing AS (
            SELECT b.account_id, b.chain, LEAST($3::bigint, b.deposited - b.committed) AS onchain
              FROM onchain_backing b, hold, revenue
             WHERE $2::text = 'settled' AND $3::bigint > 0 AND b.account_id = hold.account_id AND b.chain = hold.chain
               FOR UPDATE OF b
          ), committed AS (
            UPDATE onchain_backing b SET committed = b.committed + k.onchain
              FROM backing k
             WHERE k.onchain > 0 AND b.account_id = k.account_id AND b.chain = k.chain
          ), intent AS (
            INSERT INTO settlement_intents (hold_id, account_id, chain, amount, onchain_amount, offchain_amount,
                                            created_at)
            SELECT hold.id, hold.account_id, hold.chain, $3::bigint, COALESCE(k.onchain, 0),
                   $3::bigint - COALESCE(k.onchain, 0), $11::bigint
              FROM hold JOIN resolved ON true LEFT JOIN backing k ON true
             WHERE $2::text = 'settled' AND $3::bigint > 0
          ), spent AS (
            UPDATE spend_days d SET spent = d.spent + $3::bigint - closed.held
              FROM hold, closed, released
             WHERE $3::bigint <> closed.held AND d.account_id = hold.account_id AND d.chain = hold.chain
               AND d.key_id = hold.key_id AND d.day = hold.created_at - hold.created_at % 86400000
          )
          SELECT hold.*, EXISTS (SELECT 1 FROM resolved) AS resolved_now, (SELECT closed.raised FROM closed) AS raised_now
            FROM hold;
        END $$;
    `,
  },
  {
    version: 16,
    name: "url images",
    sql: `
      -- Images answered as "url" (src/store/postgres/images.ts, docs/images.md), so that any
      -- host serves what another stored. Keyed by the SHA-256 of the core's token, as the local
      -- files are named: a dump of the table does not reveal live URLs. The bytes are PNG/JPEG/
      -- WebP, already compressed: EXTERNAL storage keeps them out of line without trying pglz.
      CREATE TABLE stored_images (
        token_digest BYTEA PRIMARY KEY CHECK (octet_length(token_digest) = 32),
        mime_type    TEXT NOT NULL,
        expires_at   BIGINT NOT NULL,
        data         BYTEA NOT NULL
      );
      ALTER TABLE stored_images ALTER COLUMN data SET STORAGE EXTERNAL;
      -- The sweep finds expired rows by this index alone, never reading their bytes.
      CREATE INDEX stored_images_expiry ON stored_images (expires_at);
    `,
  },
  {
    version: 17,
    name: "the provider endpoint of a settled call",
    sql: `
      -- The configured name of the provider endpoint that served a settled call (docs/providers.md);
      -- as SQLite's migration 16. A constant default: no row is rewritten.
      ALTER TABLE hold_resolutions ADD COLUMN endpoint TEXT NOT NULL DEFAULT '';

      -- The resolution writes it: tollgate_resolve (migration 15) again, with the endpoint as its
      -- twelfth argument and u_endpoint among the hold's columns it answers with.
      DROP FUNCTION tollgate_resolve(TEXT, TEXT, BIGINT, BIGINT, BIGINT, BIGINT, BIGINT, BIGINT, INTEGER, TEXT, BIGINT);
      CREATE FUNCTION tollgate_resolve(
        p_hold TEXT, p_status TEXT, p_amount BIGINT, p_input BIGINT, p_output BIGINT, p_cw5m BIGINT, p_cw1h BIGINT,
        p_read BIGINT, p_images INTEGER, p_charges TEXT, p_at BIGINT, p_endpoint TEXT
      ) RETURNS TABLE (
        seq BIGINT, id TEXT, account_id TEXT, request_id TEXT, key_id TEXT, chain TEXT, amount BIGINT, call_kind TEXT,
        model TEXT, input_tokens BIGINT, max_tokens BIGINT, image_size TEXT, image_count INTEGER, created_at BIGINT,
        raised NUMERIC, status TEXT, settled_amount BIGINT, u_input BIGINT, u_output BIGINT, u_cw5m BIGINT,
        u_cw1h BIGINT, u_read BIGINT, u_images INTEGER, u_charges TEXT, u_endpoint TEXT, resolved_at BIGINT, resolved_now BOOLEAN,
        raised_now BIGINT
      ) LANGUAGE plpgsql AS $$
        #variable_conflict use_column
        BEGIN
          RETURN QUERY
          WITH hold AS (
            SELECT h.seq, h.id, h.account_id, h.request_id, h.key_id, h.chain, h.amount, h.call_kind, h.model,
                   h.input_tokens, h.max_tokens, h.image_size, h.image_count, h.created_at,
                   COALESCE((SELECT SUM(x.amount) FROM hold_raises x WHERE x.hold_id = h.id), 0) AS raised,
                   r.status, r.amount AS settled_amount, r.input_tokens AS u_input, r.output_tokens AS u_output,
                   r.cache_write_5m_tokens AS u_cw5m, r.cache_write_1h_tokens AS u_cw1h, r.cache_read_tokens AS u_read,
                   r.images AS u_images, r.charges AS u_charges, r.endpoint AS u_endpoint, r.resolved_at
              FROM holds h LEFT JOIN hold_resolutions r ON r.hold_id = h.id WHERE h.id = $1::text
          ), closed AS (
            DELETE FROM open_holds o USING hold
             WHERE o.hold_id = hold.id AND hold.status IS NULL AND $3::bigint BETWEEN 0 AND hold.amount + o.raised
            RETURNING o.hold_id, o.raised, hold.amount + o.raised AS held
          ), resolved AS (
            INSERT INTO hold_resolutions (hold_id, status, amount, input_tokens, output_tokens, cache_write_5m_tokens,
                                          cache_write_1h_tokens, cache_read_tokens, images, charges, resolved_at, endpoint)
            SELECT closed.hold_id, $2::text, $3::bigint, $4::bigint, $5::bigint, $6::bigint, $7::bigint, $8::bigint,
                   $9::integer, $10::text, $11::bigint, $12::text
              FROM closed
            RETURNING hold_resolutions.hold_id
          ), released AS (
            UPDATE ledger_balances b
               SET debits_pending = b.debits_pending - closed.held, debits_posted = b.debits_posted + $3::bigint
              FROM hold, closed, resolved
             WHERE closed.held > 0 AND b.account = hold.account_id AND b.chain = hold.chain AND b.shard = 0
            RETURNING 1
          ), revenue AS (
            UPDATE ledger_balances b
               SET credits_pending = b.credits_pending - closed.held, credits_posted = b.credits_posted + $3::bigint
              FROM hold, closed, released
             WHERE b.account = 'system:revenue' AND b.chain = hold.chain AND b.shard = hold.seq % 16
            RETURNING 1
          ), charge AS (
            INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id, memo,
                                        created_at)
            SELECT hold.id || '/charge', hold.chain, hold.account_id, 'system:revenue', $3::bigint, false, 'charge',
                   hold.id, '', $11::bigint
              FROM hold, revenue
             WHERE $3::bigint > 0
          ), backing AS (
            SELECT b.account_id, b.chain, LEAST($3::bigint, b.deposited - b.committed) AS onchain
              FROM onchain_backing b, hold, revenue
             WHERE $2::text = 'settled' AND $3::bigint > 0 AND b.account_id = hold.account_id AND b.chain = hold.chain
               FOR UPDATE OF b
          ), committed AS (
            UPDATE onchain_backing b SET committed = b.committed + k.onchain
              FROM backing k
             WHERE k.onchain > 0 AND b.account_id = k.account_id AND b.chain = k.chain
          ), intent AS (
            INSERT INTO settlement_intents (hold_id, account_id, chain, amount, onchain_amount, offchain_amount,
                                            created_at)
            SELECT hold.id, hold.account_id, hold.chain, $3::bigint, COALESCE(k.onchain, 0),
                   $3::bigint - COALESCE(k.onchain, 0), $11::bigint
              FROM hold JOIN resolved ON true LEFT JOIN backing k ON true
             WHERE $2::text = 'settled' AND $3::bigint > 0
          ), spent AS (
            UPDATE spend_days d SET spent = d.spent + $3::bigint - closed.held
              FROM hold, closed, released
             WHERE $3::bigint <> closed.held AND d.account_id = hold.account_id AND d.chain = hold.chain
               AND d.key_id = hold.key_id AND d.day = hold.created_at - hold.created_at % 86400000
          )
          SELECT hold.*, EXISTS (SELECT 1 FROM resolved) AS resolved_now, (SELECT closed.raised FROM closed) AS raised_now
            FROM hold;
        END $$;
    `,
  },
  {
    version: 18,
    name: "revenue on the paying account's own balance row",
    sql: `
      -- What an account's holds hold for system:revenue (revenue_pending) and what its charges
      -- credited it (revenue_posted) sit on the account's own balance row, the row its holds and
      -- settlements already lock, instead of on the 16 shared system:revenue rows (migration 4),
      -- which made a call wait for another account's call in flight on the same shard, until its
      -- commit (docs/store.md, "Where a billed call's time goes"). system:revenue's totals on a
      -- chain are its own rows (credits or debits of it that are not a call's) plus these columns
      -- of every account on the chain: the view ledger_totals below reads them so.
      ALTER TABLE ledger_balances
        ADD COLUMN revenue_pending BIGINT NOT NULL DEFAULT 0 CHECK (revenue_pending >= 0),
        ADD COLUMN revenue_posted  BIGINT NOT NULL DEFAULT 0 CHECK (revenue_posted >= 0),
        ADD CONSTRAINT revenue_on_user_rows CHECK (NOT may_overdraw OR (revenue_pending = 0 AND revenue_posted = 0));

      -- Every account's totals on every chain, as the ledger port and the audit read them: a
      -- system account's shard rows summed, and system:revenue credited with every account's
      -- revenue columns. A filter on account (and chain) reaches the table's primary key.
      CREATE VIEW ledger_totals AS
        SELECT account, chain, bool_and(may_overdraw) AS may_overdraw,
               SUM(debits_pending) AS debits_pending, SUM(debits_posted) AS debits_posted,
               SUM(credits_pending) AS credits_pending, SUM(credits_posted) AS credits_posted
          FROM (SELECT account, chain, may_overdraw, debits_pending, debits_posted, credits_pending, credits_posted
                  FROM ledger_balances
                UNION ALL
                SELECT 'system:revenue', chain, true, 0, 0, revenue_pending, revenue_posted
                  FROM ledger_balances WHERE revenue_pending <> 0 OR revenue_posted <> 0) AS rows
         GROUP BY account, chain;

      -- Puts system:revenue's calls' part on the paying accounts' rows, from the entries: each
      -- account's revenue_pending becomes what its open holds hold (their raises' too),
      -- revenue_posted what its charges charged; system:revenue's own rows on each chain become
      -- one (shard 0) keeping the rest, so that its totals (ledger_totals) are unchanged. Run by
      -- this migration and by migrate-store after its copy; run again, it changes nothing. An
      -- account whose entries move revenue but that has no balance row, or revenue rows short of
      -- what moves off them, mean an unsound ledger: it refuses. Answers the rows given revenue.
      CREATE FUNCTION tollgate_revenue_onto_accounts() RETURNS INTEGER LANGUAGE plpgsql AS $$
        DECLARE
          v_moved INTEGER;
          v_missing INTEGER;
        BEGIN
          -- No call writes a balance row meanwhile: the totals read below stay the totals.
          LOCK TABLE ledger_balances IN EXCLUSIVE MODE;
          CREATE TEMP TABLE revenue_before ON COMMIT DROP AS
            SELECT chain, SUM(debits_pending) AS dp, SUM(debits_posted) AS dpo,
                   SUM(credits_pending) AS cp, SUM(credits_posted) AS cpo
              FROM ledger_totals WHERE account = 'system:revenue' GROUP BY chain;
          CREATE TEMP TABLE revenue_of ON COMMIT DROP AS
            SELECT e.debit_account AS account, e.chain,
                   COALESCE(SUM(e.amount) FILTER (WHERE e.pending AND r.hold_id IS NULL), 0) AS pending,
                   COALESCE(SUM(e.amount) FILTER (WHERE NOT e.pending), 0) AS posted
              FROM ledger_entries e LEFT JOIN hold_resolutions r ON r.hold_id = e.hold_id
             WHERE e.credit_account = 'system:revenue' AND e.kind IN ('hold', 'charge')
             GROUP BY e.debit_account, e.chain;
          UPDATE ledger_balances b SET revenue_pending = 0, revenue_posted = 0
           WHERE b.revenue_pending <> 0 OR b.revenue_posted <> 0;
          UPDATE ledger_balances b SET revenue_pending = o.pending, revenue_posted = o.posted
            FROM revenue_of o
           WHERE b.account = o.account AND b.chain = o.chain AND b.shard = 0 AND NOT b.may_overdraw;
          GET DIAGNOSTICS v_moved = ROW_COUNT;
          SELECT COUNT(*) INTO v_missing FROM revenue_of;
          IF v_missing <> v_moved THEN
            RAISE EXCEPTION 'entries move revenue from % account(s) with no balance row of their own', v_missing - v_moved
              USING ERRCODE = 'check_violation';
          END IF;
          DELETE FROM ledger_balances WHERE account = 'system:revenue';
          INSERT INTO ledger_balances (account, chain, shard, may_overdraw, debits_pending, debits_posted,
                                       credits_pending, credits_posted)
          SELECT 'system:revenue', t.chain, 0, true, t.dp, t.dpo,
                 t.cp - COALESCE((SELECT SUM(o.pending) FROM revenue_of o WHERE o.chain = t.chain), 0),
                 t.cpo - COALESCE((SELECT SUM(o.posted) FROM revenue_of o WHERE o.chain = t.chain), 0)
            FROM revenue_before t;
          RETURN v_moved;
        END $$;
      SELECT tollgate_revenue_onto_accounts();

      -- The calls' path writes the new shape: tollgate_place_hold and tollgate_resolve (migrations
      -- 15 and 17) with the revenue side on the account's row, in the UPDATE that already locks
      -- it; tollgate_place_capped_hold calls tollgate_place_hold by name, unchanged. The one row
      -- another host's call can make a call wait on is now its own account's.
      CREATE OR REPLACE FUNCTION tollgate_place_hold(
        p_id TEXT, p_account TEXT, p_request TEXT, p_key TEXT, p_chain TEXT, p_amount BIGINT, p_kind TEXT,
        p_model TEXT, p_input BIGINT, p_max BIGINT, p_image_size TEXT, p_image_count INTEGER, p_at BIGINT
      ) RETURNS TABLE (seq BIGINT) LANGUAGE plpgsql AS $$
        #variable_conflict use_column
        BEGIN
          RETURN QUERY
          WITH funds AS (
            UPDATE ledger_balances
               SET debits_pending = debits_pending + $6::bigint, revenue_pending = revenue_pending + $6::bigint
             WHERE $6::bigint > 0 AND account = $2::text AND chain = $5::text AND shard = 0
               AND credits_posted - debits_posted - debits_pending >= $6::bigint
            RETURNING 1
          ), hold AS (
            INSERT INTO holds (id, account_id, request_id, key_id, chain, amount, call_kind, model, input_tokens,
                               max_tokens, image_size, image_count, created_at)
            SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::bigint, $7::text, $8::text, $9::bigint,
                   $10::bigint, $11::text, $12::integer, $13::bigint
             WHERE $6::bigint = 0 OR EXISTS (SELECT 1 FROM funds)
            RETURNING holds.seq
          ), opened AS (
            INSERT INTO open_holds (hold_id, created_at) SELECT $1::text, $13::bigint FROM hold
          ), entry AS (
            INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id,
                                        memo, created_at)
            SELECT $1::text || '/hold', $5::text, $2::text, 'system:revenue', $6::bigint, true, 'hold', $1::text, '',
                   $13::bigint
              FROM funds
          ), spent AS (
            INSERT INTO spend_days AS d (account_id, key_id, chain, day, spent)
            SELECT $2::text, $4::text, $5::text, $13::bigint - $13::bigint % 86400000, $6::bigint FROM hold, funds
            ON CONFLICT (account_id, chain, key_id, day) DO UPDATE SET spent = d.spent + EXCLUDED.spent
          )
          SELECT hold.seq FROM hold;
        END $$;

      CREATE OR REPLACE FUNCTION tollgate_resolve(
        p_hold TEXT, p_status TEXT, p_amount BIGINT, p_input BIGINT, p_output BIGINT, p_cw5m BIGINT, p_cw1h BIGINT,
        p_read BIGINT, p_images INTEGER, p_charges TEXT, p_at BIGINT, p_endpoint TEXT
      ) RETURNS TABLE (
        seq BIGINT, id TEXT, account_id TEXT, request_id TEXT, key_id TEXT, chain TEXT, amount BIGINT, call_kind TEXT,
        model TEXT, input_tokens BIGINT, max_tokens BIGINT, image_size TEXT, image_count INTEGER, created_at BIGINT,
        raised NUMERIC, status TEXT, settled_amount BIGINT, u_input BIGINT, u_output BIGINT, u_cw5m BIGINT,
        u_cw1h BIGINT, u_read BIGINT, u_images INTEGER, u_charges TEXT, u_endpoint TEXT, resolved_at BIGINT, resolved_now BOOLEAN,
        raised_now BIGINT
      ) LANGUAGE plpgsql AS $$
        #variable_conflict use_column
        BEGIN
          RETURN QUERY
          WITH hold AS (
            SELECT h.seq, h.id, h.account_id, h.request_id, h.key_id, h.chain, h.amount, h.call_kind, h.model,
                   h.input_tokens, h.max_tokens, h.image_size, h.image_count, h.created_at,
                   COALESCE((SELECT SUM(x.amount) FROM hold_raises x WHERE x.hold_id = h.id), 0) AS raised,
                   r.status, r.amount AS settled_amount, r.input_tokens AS u_input, r.output_tokens AS u_output,
                   r.cache_write_5m_tokens AS u_cw5m, r.cache_write_1h_tokens AS u_cw1h, r.cache_read_tokens AS u_read,
                   r.images AS u_images, r.charges AS u_charges, r.endpoint AS u_endpoint, r.resolved_at
              FROM holds h LEFT JOIN hold_resolutions r ON r.hold_id = h.id WHERE h.id = $1::text
          ), closed AS (
            DELETE FROM open_holds o USING hold
             WHERE o.hold_id = hold.id AND hold.status IS NULL AND $3::bigint BETWEEN 0 AND hold.amount + o.raised
            RETURNING o.hold_id, o.raised, hold.amount + o.raised AS held
          ), resolved AS (
            INSERT INTO hold_resolutions (hold_id, status, amount, input_tokens, output_tokens, cache_write_5m_tokens,
                                          cache_write_1h_tokens, cache_read_tokens, images, charges, resolved_at, endpoint)
            SELECT closed.hold_id, $2::text, $3::bigint, $4::bigint, $5::bigint, $6::bigint, $7::bigint, $8::bigint,
                   $9::integer, $10::text, $11::bigint, $12::text
              FROM closed
            RETURNING hold_resolutions.hold_id
          ), released AS (
            UPDATE ledger_balances b
               SET debits_pending = b.debits_pending - closed.held, debits_posted = b.debits_posted + $3::bigint,
                   revenue_pending = b.revenue_pending - closed.held, revenue_posted = b.revenue_posted + $3::bigint
              FROM hold, closed, resolved
             WHERE closed.held > 0 AND b.account = hold.account_id AND b.chain = hold.chain AND b.shard = 0
            RETURNING 1
          ), charge AS (
            INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id, memo,
                                        created_at)
            SELECT hold.id || '/charge', hold.chain, hold.account_id, 'system:revenue', $3::bigint, false, 'charge',
                   hold.id, '', $11::bigint
              FROM hold, released
             WHERE $3::bigint > 0
          ), backing AS (
            SELECT b.account_id, b.chain, LEAST($3::bigint, b.deposited - b.committed) AS onchain
              FROM onchain_backing b, hold, released
             WHERE $2::text = 'settled' AND $3::bigint > 0 AND b.account_id = hold.account_id AND b.chain = hold.chain
               FOR UPDATE OF b
          ), committed AS (
            UPDATE onchain_backing b SET committed = b.committed + k.onchain
              FROM backing k
             WHERE k.onchain > 0 AND b.account_id = k.account_id AND b.chain = k.chain
          ), intent AS (
            INSERT INTO settlement_intents (hold_id, account_id, chain, amount, onchain_amount, offchain_amount,
                                            created_at)
            SELECT hold.id, hold.account_id, hold.chain, $3::bigint, COALESCE(k.onchain, 0),
                   $3::bigint - COALESCE(k.onchain, 0), $11::bigint
              FROM hold JOIN resolved ON true LEFT JOIN backing k ON true
             WHERE $2::text = 'settled' AND $3::bigint > 0
          ), spent AS (
            UPDATE spend_days d SET spent = d.spent + $3::bigint - closed.held
              FROM hold, closed, released
             WHERE $3::bigint <> closed.held AND d.account_id = hold.account_id AND d.chain = hold.chain
               AND d.key_id = hold.key_id AND d.day = hold.created_at - hold.created_at % 86400000
          )
          SELECT hold.*, EXISTS (SELECT 1 FROM resolved) AS resolved_now, (SELECT closed.raised FROM closed) AS raised_now
            FROM hold;
        END $$;
    `,
  },
  {
    version: 19,
    name: "x402 payments on the paying account's own balance row",
    sql: `
      -- system:x402's side of each x402 payment sits on the paying account's own balance row, the
      -- row the payment's credit and return already write, instead of on the 16 shared system:x402
      -- rows (migration 4), which made an x402 call wait for another account's x402 call in
      -- flight on the same shard, until its commit (docs/store.md, "PostgreSQL"); migration 18
      -- did the same for system:revenue. x402_in: what system:x402 credited
      -- the account (its debits_posted); x402_out: what the account returned to it (its
      -- credits_posted). system:x402's totals on a chain are its own rows (anything of it that is
      -- not a payment's) plus these columns of every account on the chain: ledger_totals reads
      -- them so. system:deposits and system:withdrawals keep their shards: no call writes them.
      ALTER TABLE ledger_balances
        ADD COLUMN x402_in  BIGINT NOT NULL DEFAULT 0 CHECK (x402_in >= 0),
        ADD COLUMN x402_out BIGINT NOT NULL DEFAULT 0 CHECK (x402_out >= 0),
        ADD CONSTRAINT x402_on_user_rows CHECK (NOT may_overdraw OR (x402_in = 0 AND x402_out = 0));

      -- The view of migration 18 with system:x402's part added the way system:revenue's is: the
      -- same columns, so every reader of it is unchanged.
      CREATE OR REPLACE VIEW ledger_totals AS
        SELECT account, chain, bool_and(may_overdraw) AS may_overdraw,
               SUM(debits_pending) AS debits_pending, SUM(debits_posted) AS debits_posted,
               SUM(credits_pending) AS credits_pending, SUM(credits_posted) AS credits_posted
          FROM (SELECT account, chain, may_overdraw, debits_pending, debits_posted, credits_pending, credits_posted
                  FROM ledger_balances
                UNION ALL
                SELECT 'system:revenue', chain, true, 0, 0, revenue_pending, revenue_posted
                  FROM ledger_balances WHERE revenue_pending <> 0 OR revenue_posted <> 0
                UNION ALL
                SELECT 'system:x402', chain, true, 0, x402_in, 0, x402_out
                  FROM ledger_balances WHERE x402_in <> 0 OR x402_out <> 0) AS rows
         GROUP BY account, chain;

      -- Puts system:x402's payments' part on the paying accounts' rows, from the entries of kind
      -- 'x402': each account's x402_in becomes its payments' credits (x402_<payment>, debiting
      -- system:x402), x402_out its returns (x402ret_<payment>, crediting it); system:x402's own
      -- rows on each chain become one (shard 0) keeping the rest, so that its totals
      -- (ledger_totals) are unchanged. Run by this migration and by migrate-store after its copy;
      -- run again, it changes nothing. An account whose entries move x402 funds but that has no
      -- balance row of its own, or system:x402 rows short of what moves off them, mean an unsound
      -- ledger: it refuses. Answers the rows given x402 columns.
      CREATE FUNCTION tollgate_x402_onto_accounts() RETURNS INTEGER LANGUAGE plpgsql AS $$
        DECLARE
          v_moved INTEGER;
          v_missing INTEGER;
        BEGIN
          -- No call writes a balance row meanwhile: the totals read below stay the totals.
          LOCK TABLE ledger_balances IN EXCLUSIVE MODE;
          CREATE TEMP TABLE x402_before ON COMMIT DROP AS
            SELECT chain, SUM(debits_pending) AS dp, SUM(debits_posted) AS dpo,
                   SUM(credits_pending) AS cp, SUM(credits_posted) AS cpo
              FROM ledger_totals WHERE account = 'system:x402' GROUP BY chain;
          CREATE TEMP TABLE x402_of ON COMMIT DROP AS
            SELECT account, chain, SUM(x402_in) AS x402_in, SUM(x402_out) AS x402_out
              FROM (SELECT e.credit_account AS account, e.chain, e.amount AS x402_in, 0 AS x402_out
                      FROM ledger_entries e
                     WHERE e.kind = 'x402' AND e.debit_account = 'system:x402' AND NOT e.pending
                    UNION ALL
                    SELECT e.debit_account, e.chain, 0, e.amount
                      FROM ledger_entries e
                     WHERE e.kind = 'x402' AND e.credit_account = 'system:x402' AND NOT e.pending) AS moves
             GROUP BY account, chain;
          UPDATE ledger_balances b SET x402_in = 0, x402_out = 0 WHERE b.x402_in <> 0 OR b.x402_out <> 0;
          UPDATE ledger_balances b SET x402_in = o.x402_in, x402_out = o.x402_out
            FROM x402_of o
           WHERE b.account = o.account AND b.chain = o.chain AND b.shard = 0 AND NOT b.may_overdraw;
          GET DIAGNOSTICS v_moved = ROW_COUNT;
          SELECT COUNT(*) INTO v_missing FROM x402_of;
          IF v_missing <> v_moved THEN
            RAISE EXCEPTION 'entries move x402 funds of % account(s) with no balance row of their own', v_missing - v_moved
              USING ERRCODE = 'check_violation';
          END IF;
          DELETE FROM ledger_balances WHERE account = 'system:x402';
          INSERT INTO ledger_balances (account, chain, shard, may_overdraw, debits_pending, debits_posted,
                                       credits_pending, credits_posted)
          SELECT 'system:x402', t.chain, 0, true, t.dp,
                 t.dpo - COALESCE((SELECT SUM(o.x402_in) FROM x402_of o WHERE o.chain = t.chain), 0),
                 t.cp,
                 t.cpo - COALESCE((SELECT SUM(o.x402_out) FROM x402_of o WHERE o.chain = t.chain), 0)
            FROM x402_before t;
          RETURN v_moved;
        END $$;
      SELECT tollgate_x402_onto_accounts();
    `,
  },
  {
    version: 20,
    name: "the account's balance row locked last in a hold and a resolution",
    sql: `
      -- A hold and a resolution lock their account's balance row until their commit is flushed:
      -- one account's calls take turns on it (docs/store.md, "Where a billed call's time goes").
      -- Migrations 15-18 took that lock first and wrote every other row while holding it; these
      -- write the rows no other call touches first (the hold, its open-list row, its entries, its
      -- resolution) and take the balance row last, then the rows every writer takes after it
      -- (the onchain backing, the key's day in spend_days), so the lock is held for those few
      -- statements and the commit only. Same rows, same outcomes, same lock order among shared
      -- rows (balance, backing, spend_days), so no new deadlock.
      --
      -- A hold reads the funds first without a lock and writes nothing when they fall short; when
      -- another hold took them between that read and the conditional UPDATE, it raises TG402 and
      -- nothing of it remains (ledger.ts reads why, as for a hold not placed).
      CREATE OR REPLACE FUNCTION tollgate_place_hold(
        p_id TEXT, p_account TEXT, p_request TEXT, p_key TEXT, p_chain TEXT, p_amount BIGINT, p_kind TEXT,
        p_model TEXT, p_input BIGINT, p_max BIGINT, p_image_size TEXT, p_image_count INTEGER, p_at BIGINT
      ) RETURNS TABLE (seq BIGINT) LANGUAGE plpgsql AS $$
        #variable_conflict use_column
        DECLARE
          v_seq BIGINT;
        BEGIN
          -- The funds as last committed, read without a lock: too few, and nothing is written (the
          -- caller reads why). Enough, and the funds are taken below, under the row's lock.
          IF p_amount > 0 AND NOT EXISTS (
            SELECT 1 FROM ledger_balances b
             WHERE b.account = p_account AND b.chain = p_chain AND b.shard = 0
               AND b.credits_posted - b.debits_posted - b.debits_pending >= p_amount
          ) THEN
            RETURN;
          END IF;
          INSERT INTO holds (id, account_id, request_id, key_id, chain, amount, call_kind, model, input_tokens,
                             max_tokens, image_size, image_count, created_at)
          VALUES (p_id, p_account, p_request, p_key, p_chain, p_amount, p_kind, p_model, p_input, p_max, p_image_size, p_image_count, p_at)
          RETURNING holds.seq INTO v_seq;
          INSERT INTO open_holds (hold_id, created_at) VALUES (p_id, p_at);
          IF p_amount > 0 THEN
            INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id, memo, created_at)
            VALUES (p_id || '/hold', p_chain, p_account, 'system:revenue', p_amount, true, 'hold', p_id, '', p_at);
            UPDATE ledger_balances
               SET debits_pending = debits_pending + p_amount, revenue_pending = revenue_pending + p_amount
             WHERE account = p_account AND chain = p_chain AND shard = 0
               AND credits_posted - debits_posted - debits_pending >= p_amount;
            IF NOT FOUND THEN
              -- Another hold took the funds since the read above: undo the whole statement.
              RAISE EXCEPTION 'hold %: the funds moved since they were read', p_id USING ERRCODE = 'TG402';
            END IF;
            INSERT INTO spend_days AS d (account_id, key_id, chain, day, spent)
            VALUES (p_account, p_key, p_chain, p_at - p_at % 86400000, p_amount)
            ON CONFLICT (account_id, chain, key_id, day) DO UPDATE SET spent = d.spent + EXCLUDED.spent;
          END IF;
          RETURN QUERY SELECT v_seq;
        END $$;

      -- A resolution: the hold read, its open-list row deleted (its lock: a sweeper or another
      -- resolution holding it makes this wait, then find nothing; a raise holding it makes this
      -- wait, then release the total the row has), its resolution and its charge written, then
      -- the account's balance row, the backing (settled with a charge) and the key's day. Each statement
      -- reads the newest committed rows (READ COMMITTED, one snapshot per statement), so a raise
      -- committed while this waited is released in full without the CHECK refusal of the single
      -- statement (migrations 15-18), which ledger.ts still retries should it come.
      CREATE OR REPLACE FUNCTION tollgate_resolve(
        p_hold TEXT, p_status TEXT, p_amount BIGINT, p_input BIGINT, p_output BIGINT, p_cw5m BIGINT, p_cw1h BIGINT,
        p_read BIGINT, p_images INTEGER, p_charges TEXT, p_at BIGINT, p_endpoint TEXT
      ) RETURNS TABLE (
        seq BIGINT, id TEXT, account_id TEXT, request_id TEXT, key_id TEXT, chain TEXT, amount BIGINT, call_kind TEXT,
        model TEXT, input_tokens BIGINT, max_tokens BIGINT, image_size TEXT, image_count INTEGER, created_at BIGINT,
        raised NUMERIC, status TEXT, settled_amount BIGINT, u_input BIGINT, u_output BIGINT, u_cw5m BIGINT,
        u_cw1h BIGINT, u_read BIGINT, u_images INTEGER, u_charges TEXT, u_endpoint TEXT, resolved_at BIGINT, resolved_now BOOLEAN,
        raised_now BIGINT
      ) LANGUAGE plpgsql AS $$
        #variable_conflict use_column
        DECLARE
          h RECORD;
          v_raised BIGINT;
          v_held BIGINT;
          v_released BOOLEAN := false;
          v_onchain BIGINT;
        BEGIN
          SELECT hh.seq, hh.id, hh.account_id, hh.request_id, hh.key_id, hh.chain, hh.amount, hh.call_kind, hh.model,
                 hh.input_tokens, hh.max_tokens, hh.image_size, hh.image_count, hh.created_at,
                 COALESCE((SELECT SUM(x.amount) FROM hold_raises x WHERE x.hold_id = hh.id), 0) AS raised,
                 r.status, r.amount AS settled_amount, r.input_tokens AS u_input, r.output_tokens AS u_output,
                 r.cache_write_5m_tokens AS u_cw5m, r.cache_write_1h_tokens AS u_cw1h, r.cache_read_tokens AS u_read,
                 r.images AS u_images, r.charges AS u_charges, r.endpoint AS u_endpoint, r.resolved_at
            INTO h
            FROM holds hh LEFT JOIN hold_resolutions r ON r.hold_id = hh.id WHERE hh.id = p_hold;
          IF NOT FOUND THEN
            RETURN;
          END IF;
          IF h.status IS NULL THEN
            DELETE FROM open_holds o WHERE o.hold_id = p_hold AND p_amount BETWEEN 0 AND h.amount + o.raised
            RETURNING o.raised, h.amount + o.raised INTO v_raised, v_held;
            IF FOUND THEN
              INSERT INTO hold_resolutions (hold_id, status, amount, input_tokens, output_tokens, cache_write_5m_tokens,
                                            cache_write_1h_tokens, cache_read_tokens, images, charges, resolved_at, endpoint)
              VALUES (p_hold, p_status, p_amount, p_input, p_output, p_cw5m, p_cw1h, p_read, p_images, p_charges, p_at, p_endpoint);
              IF v_held > 0 THEN
                IF p_amount > 0 THEN
                  INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id, memo, created_at)
                  VALUES (p_hold || '/charge', h.chain, h.account_id, 'system:revenue', p_amount, false, 'charge', p_hold, '', p_at);
                END IF;
                UPDATE ledger_balances b
                   SET debits_pending = b.debits_pending - v_held, debits_posted = b.debits_posted + p_amount,
                       revenue_pending = b.revenue_pending - v_held, revenue_posted = b.revenue_posted + p_amount
                 WHERE b.account = h.account_id AND b.chain = h.chain AND b.shard = 0;
                v_released := FOUND;
                IF NOT v_released THEN
                  -- A hold that held funds always has its account's row: an unsound ledger, refused.
                  RAISE EXCEPTION 'hold %: no balance row of account % on % to release it from', p_hold, h.account_id,
                    h.chain USING ERRCODE = 'integrity_constraint_violation';
                END IF;
              END IF;
              IF p_status = 'settled' AND p_amount > 0 THEN
                IF v_released THEN
                  SELECT LEAST(p_amount, b.deposited - b.committed) INTO v_onchain
                    FROM onchain_backing b WHERE b.account_id = h.account_id AND b.chain = h.chain FOR UPDATE OF b;
                  IF v_onchain > 0 THEN
                    UPDATE onchain_backing b SET committed = b.committed + v_onchain
                     WHERE b.account_id = h.account_id AND b.chain = h.chain;
                  END IF;
                END IF;
                INSERT INTO settlement_intents (hold_id, account_id, chain, amount, onchain_amount, offchain_amount, created_at)
                VALUES (p_hold, h.account_id, h.chain, p_amount, COALESCE(v_onchain, 0), p_amount - COALESCE(v_onchain, 0), p_at);
              END IF;
              IF v_released AND p_amount <> v_held THEN
                UPDATE spend_days d SET spent = d.spent + p_amount - v_held
                 WHERE d.account_id = h.account_id AND d.chain = h.chain AND d.key_id = h.key_id
                   AND d.day = h.created_at - h.created_at % 86400000;
              END IF;
            END IF;
          END IF;
          RETURN QUERY SELECT h.seq, h.id, h.account_id, h.request_id, h.key_id, h.chain, h.amount, h.call_kind, h.model,
                 h.input_tokens, h.max_tokens, h.image_size, h.image_count, h.created_at, h.raised, h.status, h.settled_amount,
                 h.u_input, h.u_output, h.u_cw5m, h.u_cw1h, h.u_read, h.u_images, h.u_charges, h.u_endpoint, h.resolved_at,
                 v_held IS NOT NULL, v_raised;
        END $$;
    `,
  },
  {
    version: 21,
    name: "holds and resolutions in batches, one transaction for several calls",
    sql: `
      -- A host sends the holds (and the resolutions) its calls ask for while its earlier ones are
      -- still in flight as one statement (src/store/postgres/batches.ts): one round trip, one
      -- transaction, one commit for the lot instead of one each (docs/store.md, "Batches").
      -- Each item is tollgate_place_hold's (tollgate_resolve's) own work, unchanged, in a
      -- subtransaction of its own: an item that fails (an id already taken, funds taken since
      -- they were read, a deadlock) leaves nothing of itself and is named with its SQLSTATE, and
      -- the host sends it again alone, which answers it as before; the others stand. Items are
      -- taken in the order every writer locks balance rows, by account and chain, so two batches
      -- never wait on each other in a cycle. A batch waits at most 20 ms for any one lock
      -- (lock_timeout, for its transaction only): an item whose account's row another host keeps
      -- locked fails with 55P03 and goes again alone, so the items after it do not wait with it.
      CREATE FUNCTION tollgate_place_holds(
        p_id TEXT[], p_account TEXT[], p_request TEXT[], p_key TEXT[], p_chain TEXT[], p_amount BIGINT[],
        p_kind TEXT[], p_model TEXT[], p_input BIGINT[], p_max BIGINT[], p_image_size TEXT[],
        p_image_count INTEGER[], p_at BIGINT[]
      ) RETURNS TABLE (item INTEGER, seq BIGINT, failed TEXT) LANGUAGE plpgsql AS $$
        #variable_conflict use_column
        DECLARE
          i INTEGER;
        BEGIN
          PERFORM set_config('lock_timeout', '20ms', true);
          FOR i IN
            SELECT u.o FROM unnest(p_account, p_chain) WITH ORDINALITY AS u (a, c, o)
             ORDER BY u.a, u.c, u.o
          LOOP
            item := i;
            failed := NULL;
            BEGIN
              -- No row: not placed (the funds fell short), nothing written.
              SELECT h.seq INTO seq
                FROM tollgate_place_hold(p_id[i], p_account[i], p_request[i], p_key[i], p_chain[i], p_amount[i],
                                         p_kind[i], p_model[i], p_input[i], p_max[i], p_image_size[i],
                                         p_image_count[i], p_at[i]) h;
            EXCEPTION WHEN OTHERS THEN
              seq := NULL;
              failed := SQLSTATE;
            END;
            RETURN NEXT;
          END LOOP;
        END $$;

      -- No row for an item: no such hold. A failed item has its SQLSTATE in failed and nothing else.
      CREATE FUNCTION tollgate_resolve_holds(
        p_hold TEXT[], p_status TEXT[], p_amount BIGINT[], p_input BIGINT[], p_output BIGINT[], p_cw5m BIGINT[],
        p_cw1h BIGINT[], p_read BIGINT[], p_images INTEGER[], p_charges TEXT[], p_at BIGINT[], p_endpoint TEXT[]
      ) RETURNS TABLE (
        item INTEGER, failed TEXT, seq BIGINT, id TEXT, account_id TEXT, request_id TEXT, key_id TEXT, chain TEXT,
        amount BIGINT, call_kind TEXT, model TEXT, input_tokens BIGINT, max_tokens BIGINT, image_size TEXT,
        image_count INTEGER, created_at BIGINT, raised NUMERIC, status TEXT, settled_amount BIGINT, u_input BIGINT,
        u_output BIGINT, u_cw5m BIGINT, u_cw1h BIGINT, u_read BIGINT, u_images INTEGER, u_charges TEXT,
        u_endpoint TEXT, resolved_at BIGINT, resolved_now BOOLEAN, raised_now BIGINT
      ) LANGUAGE plpgsql AS $$
        #variable_conflict use_column
        DECLARE
          i INTEGER;
        BEGIN
          PERFORM set_config('lock_timeout', '20ms', true);
          FOR i IN
            SELECT u.o FROM unnest(p_hold) WITH ORDINALITY AS u (h, o) LEFT JOIN holds hh ON hh.id = u.h
             ORDER BY hh.account_id, hh.chain, u.o
          LOOP
            BEGIN
              RETURN QUERY
                SELECT i, NULL::text, r.*
                  FROM tollgate_resolve(p_hold[i], p_status[i], p_amount[i], p_input[i], p_output[i], p_cw5m[i],
                                        p_cw1h[i], p_read[i], p_images[i], p_charges[i], p_at[i], p_endpoint[i]) r;
            EXCEPTION WHEN OTHERS THEN
              item := i;
              failed := SQLSTATE;
              RETURN NEXT;
            END;
          END LOOP;
        END $$;
    `,
  },
  {
    version: 22,
    name: "settlements beside the account's balance row, folded in when a hold needs them",
    sql: `
      -- One account's holds and settlements took turns on its balance row: each held the row's
      -- lock until its commit was flushed (docs/store.md, "Settlements beside the balance row").
      -- A settlement only ever gives funds back (it charges at most what its hold held), so
      -- from migration 23 on it writes what it releases and charges beside the row, on a row of
      -- its own that no hold locks, and a hold reads that row without a lock:
      --   balance_releases: per account and chain, the pending its settled holds released
      --     (released) and what they charged (charged), not yet taken onto the balance row. The
      --     account's totals are its row with these applied (debits_pending - released,
      --     debits_posted + charged, and alike for the revenue it holds): ledger_totals reads so.
      -- The balance row alone still never goes below zero (its CHECKs are unchanged): it only
      -- ever shows less than the account has. When it falls short of a hold, a raise, a return
      -- or a withdrawal that the account's totals cover, tollgate_fold_releases takes the
      -- releases onto the row under its lock, and the write is tried again.
      CREATE TABLE balance_releases (
        account  TEXT NOT NULL,
        chain    TEXT NOT NULL,
        shard    SMALLINT NOT NULL DEFAULT 0 CHECK (shard = 0),
        released BIGINT NOT NULL DEFAULT 0 CHECK (released >= 0),
        charged  BIGINT NOT NULL DEFAULT 0 CHECK (charged >= 0),
        PRIMARY KEY (account, chain),
        FOREIGN KEY (account, chain, shard) REFERENCES ledger_balances (account, chain, shard),
        CONSTRAINT charged_within_released CHECK (charged <= released)
      );
      -- Migration 19's view with the releases applied: to the account's debits, and to the
      -- revenue its row holds for system:revenue. Same columns, so every reader is unchanged.
      CREATE OR REPLACE VIEW ledger_totals AS
        SELECT account, chain, bool_and(may_overdraw) AS may_overdraw,
               SUM(debits_pending) AS debits_pending, SUM(debits_posted) AS debits_posted,
               SUM(credits_pending) AS credits_pending, SUM(credits_posted) AS credits_posted
          FROM (SELECT account, chain, may_overdraw, debits_pending, debits_posted, credits_pending, credits_posted
                  FROM ledger_balances
                UNION ALL
                SELECT account, chain, false, -released, charged, 0, 0
                  FROM balance_releases WHERE released <> 0
                UNION ALL
                SELECT 'system:revenue', chain, true, 0, 0, revenue_pending, revenue_posted
                  FROM ledger_balances WHERE revenue_pending <> 0 OR revenue_posted <> 0
                UNION ALL
                SELECT 'system:revenue', chain, true, 0, 0, -released, charged
                  FROM balance_releases WHERE released <> 0
                UNION ALL
                SELECT 'system:x402', chain, true, 0, x402_in, 0, x402_out
                  FROM ledger_balances WHERE x402_in <> 0 OR x402_out <> 0) AS rows
         GROUP BY account, chain;

      -- Takes an account's releases on a chain onto its balance row: the row locked first (the
      -- order every writer takes them in; a hold that holds it already waits on nothing), then
      -- the releases (waiting only for a settlement of the account in flight). Answers the
      -- pending released onto the row, 0 when there was none.
      CREATE FUNCTION tollgate_fold_releases(p_account TEXT, p_chain TEXT) RETURNS BIGINT LANGUAGE plpgsql AS $$
        DECLARE
          v_released BIGINT;
          v_charged BIGINT;
        BEGIN
          PERFORM 1 FROM ledger_balances b
            WHERE b.account = p_account AND b.chain = p_chain AND b.shard = 0 FOR NO KEY UPDATE;
          SELECT r.released, r.charged INTO v_released, v_charged FROM balance_releases r
           WHERE r.account = p_account AND r.chain = p_chain FOR NO KEY UPDATE;
          IF NOT FOUND OR v_released = 0 THEN
            RETURN 0;
          END IF;
          UPDATE balance_releases r SET released = 0, charged = 0 WHERE r.account = p_account AND r.chain = p_chain;
          UPDATE ledger_balances b
             SET debits_pending = b.debits_pending - v_released, debits_posted = b.debits_posted + v_charged,
                 revenue_pending = b.revenue_pending - v_released, revenue_posted = b.revenue_posted + v_charged
           WHERE b.account = p_account AND b.chain = p_chain AND b.shard = 0;
          RETURN v_released;
        END $$;

      -- Migration 20's hold, reading the releases when the row alone falls short, and folding
      -- them in when they are what covers it.
      CREATE OR REPLACE FUNCTION tollgate_place_hold(
        p_id TEXT, p_account TEXT, p_request TEXT, p_key TEXT, p_chain TEXT, p_amount BIGINT, p_kind TEXT,
        p_model TEXT, p_input BIGINT, p_max BIGINT, p_image_size TEXT, p_image_count INTEGER, p_at BIGINT
      ) RETURNS TABLE (seq BIGINT) LANGUAGE plpgsql AS $$
        #variable_conflict use_column
        DECLARE
          v_seq BIGINT;
          v_taken BOOLEAN;
        BEGIN
          -- The funds as last committed, read without a lock: the balance row's, and only when
          -- those fall short, with what settlements released beside it (balance_releases). Too
          -- few, and nothing is written (the caller reads why). Enough, and the funds are taken
          -- below, under the row's lock.
          IF p_amount > 0 AND NOT EXISTS (
            SELECT 1 FROM ledger_balances b
             WHERE b.account = p_account AND b.chain = p_chain AND b.shard = 0
               AND (b.credits_posted - b.debits_posted - b.debits_pending >= p_amount
                    OR b.credits_posted - b.debits_posted - b.debits_pending
                       + COALESCE((SELECT r.released - r.charged FROM balance_releases r
                                    WHERE r.account = p_account AND r.chain = p_chain), 0) >= p_amount)
          ) THEN
            RETURN;
          END IF;
          INSERT INTO holds (id, account_id, request_id, key_id, chain, amount, call_kind, model, input_tokens,
                             max_tokens, image_size, image_count, created_at)
          VALUES (p_id, p_account, p_request, p_key, p_chain, p_amount, p_kind, p_model, p_input, p_max, p_image_size, p_image_count, p_at)
          RETURNING holds.seq INTO v_seq;
          INSERT INTO open_holds (hold_id, created_at) VALUES (p_id, p_at);
          IF p_amount > 0 THEN
            INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id, memo, created_at)
            VALUES (p_id || '/hold', p_chain, p_account, 'system:revenue', p_amount, true, 'hold', p_id, '', p_at);
            UPDATE ledger_balances
               SET debits_pending = debits_pending + p_amount, revenue_pending = revenue_pending + p_amount
             WHERE account = p_account AND chain = p_chain AND shard = 0
               AND credits_posted - debits_posted - debits_pending >= p_amount;
            v_taken := FOUND;
            -- The row alone falls short: what settlements released beside it is folded into it,
            -- under its lock, and the funds are taken again.
            IF NOT v_taken AND tollgate_fold_releases(p_account, p_chain) > 0 THEN
              UPDATE ledger_balances
                 SET debits_pending = debits_pending + p_amount, revenue_pending = revenue_pending + p_amount
               WHERE account = p_account AND chain = p_chain AND shard = 0
                 AND credits_posted - debits_posted - debits_pending >= p_amount;
              v_taken := FOUND;
            END IF;
            IF NOT v_taken THEN
              -- Another hold took the funds since the read above: undo the whole statement.
              RAISE EXCEPTION 'hold %: the funds moved since they were read', p_id USING ERRCODE = 'TG402';
            END IF;
            INSERT INTO spend_days AS d (account_id, key_id, chain, day, spent)
            VALUES (p_account, p_key, p_chain, p_at - p_at % 86400000, p_amount)
            ON CONFLICT (account_id, chain, key_id, day) DO UPDATE SET spent = d.spent + EXCLUDED.spent;
          END IF;
          RETURN QUERY SELECT v_seq;
        END $$;
    `,
  },
  {
    version: 23,
    name: "settlements beside the balance row and the key's day",
    sql: `
      -- A settlement's writes to the rows its account's holds lock move beside them: what it
      -- releases and charges to balance_releases (migration 22), and what it gives back of its
      -- key's day to spend_returns, since the hold keeps the key's day in spend_days locked too.
      --   spend_returns: per key and day, what settlements gave back of what the day's holds
      --     counted (held - charged). The day's spend is spent - returned: spend_totals, which
      --     spend caps and the audit read. Nothing folds it: a day's rows are few.
      CREATE TABLE spend_returns (
        account_id TEXT NOT NULL,
        chain      TEXT NOT NULL,
        key_id     TEXT NOT NULL,
        day        BIGINT NOT NULL,
        returned   BIGINT NOT NULL CHECK (returned >= 0),
        PRIMARY KEY (account_id, chain, key_id, day),
        FOREIGN KEY (account_id, chain, key_id, day) REFERENCES spend_days (account_id, chain, key_id, day)
      );

      -- Each key's spend per day as spend caps and the audit read it.
      CREATE VIEW spend_totals AS
        SELECT d.account_id, d.chain, d.key_id, d.day, d.spent - COALESCE(s.returned, 0) AS spent
          FROM spend_days d
          LEFT JOIN spend_returns s
            ON s.account_id = d.account_id AND s.chain = d.chain AND s.key_id = d.key_id AND s.day = d.day;

      -- Migration 15's capped hold, each cap's period summed from spend_totals.
      CREATE OR REPLACE FUNCTION tollgate_place_capped_hold(
        p_id TEXT, p_account TEXT, p_request TEXT, p_key TEXT, p_chain TEXT, p_amount BIGINT, p_kind TEXT,
        p_model TEXT, p_input BIGINT, p_max BIGINT, p_image_size TEXT, p_image_count INTEGER, p_at BIGINT,
        p_since BIGINT[], p_keys TEXT[], p_caps BIGINT[]
      ) RETURNS TABLE (seq BIGINT, taken BOOLEAN, refused BOOLEAN, spent TEXT[]) LANGUAGE plpgsql AS $$
        #variable_conflict use_column
        DECLARE
          v_spent TEXT[] := '{}';
          v_used NUMERIC;
          v_refused BOOLEAN := false;
          v_seq BIGINT;
        BEGIN
          PERFORM 1 FROM ledger_balances b
            WHERE b.account = p_account AND b.chain = p_chain AND b.shard = 0 FOR NO KEY UPDATE;
          IF EXISTS (SELECT 1 FROM holds h WHERE h.id = p_id) THEN
            RETURN QUERY SELECT NULL::bigint, true, false, NULL::text[];
            RETURN;
          END IF;
          FOR i IN 1 .. COALESCE(array_length(p_since, 1), 0) LOOP
            SELECT COALESCE(SUM(d.spent), 0) INTO v_used FROM spend_totals d
             WHERE d.account_id = p_account AND d.chain = p_chain AND d.day >= p_since[i]
               AND (p_keys[i] = '' OR d.key_id = p_keys[i]);
            v_spent := v_spent || v_used::text;
            IF v_used + p_amount > p_caps[i] THEN
              v_refused := true;
            END IF;
          END LOOP;
          IF v_refused THEN
            RETURN QUERY SELECT NULL::bigint, false, true, v_spent;
            RETURN;
          END IF;
          SELECT p.seq INTO v_seq
            FROM tollgate_place_hold(p_id, p_account, p_request, p_key, p_chain, p_amount, p_kind, p_model, p_input,
                                     p_max, p_image_size, p_image_count, p_at) AS p;
          RETURN QUERY SELECT v_seq, false, false, v_spent;
        END $$;

      -- Migration 20's resolution, writing the release, the charge and the key's day's return
      -- beside the rows the account's holds lock.
      CREATE OR REPLACE FUNCTION tollgate_resolve(
        p_hold TEXT, p_status TEXT, p_amount BIGINT, p_input BIGINT, p_output BIGINT, p_cw5m BIGINT, p_cw1h BIGINT,
        p_read BIGINT, p_images INTEGER, p_charges TEXT, p_at BIGINT, p_endpoint TEXT
      ) RETURNS TABLE (
        seq BIGINT, id TEXT, account_id TEXT, request_id TEXT, key_id TEXT, chain TEXT, amount BIGINT, call_kind TEXT,
        model TEXT, input_tokens BIGINT, max_tokens BIGINT, image_size TEXT, image_count INTEGER, created_at BIGINT,
        raised NUMERIC, status TEXT, settled_amount BIGINT, u_input BIGINT, u_output BIGINT, u_cw5m BIGINT,
        u_cw1h BIGINT, u_read BIGINT, u_images INTEGER, u_charges TEXT, u_endpoint TEXT, resolved_at BIGINT, resolved_now BOOLEAN,
        raised_now BIGINT
      ) LANGUAGE plpgsql AS $$
        #variable_conflict use_column
        DECLARE
          h RECORD;
          v_raised BIGINT;
          v_held BIGINT;
          v_released BOOLEAN := false;
          v_onchain BIGINT;
        BEGIN
          SELECT hh.seq, hh.id, hh.account_id, hh.request_id, hh.key_id, hh.chain, hh.amount, hh.call_kind, hh.model,
                 hh.input_tokens, hh.max_tokens, hh.image_size, hh.image_count, hh.created_at,
                 COALESCE((SELECT SUM(x.amount) FROM hold_raises x WHERE x.hold_id = hh.id), 0) AS raised,
                 r.status, r.amount AS settled_amount, r.input_tokens AS u_input, r.output_tokens AS u_output,
                 r.cache_write_5m_tokens AS u_cw5m, r.cache_write_1h_tokens AS u_cw1h, r.cache_read_tokens AS u_read,
                 r.images AS u_images, r.charges AS u_charges, r.endpoint AS u_endpoint, r.resolved_at
            INTO h
            FROM holds hh LEFT JOIN hold_resolutions r ON r.hold_id = hh.id WHERE hh.id = p_hold;
          IF NOT FOUND THEN
            RETURN;
          END IF;
          IF h.status IS NULL THEN
            DELETE FROM open_holds o WHERE o.hold_id = p_hold AND p_amount BETWEEN 0 AND h.amount + o.raised
            RETURNING o.raised, h.amount + o.raised INTO v_raised, v_held;
            IF FOUND THEN
              INSERT INTO hold_resolutions (hold_id, status, amount, input_tokens, output_tokens, cache_write_5m_tokens,
                                            cache_write_1h_tokens, cache_read_tokens, images, charges, resolved_at, endpoint)
              VALUES (p_hold, p_status, p_amount, p_input, p_output, p_cw5m, p_cw1h, p_read, p_images, p_charges, p_at, p_endpoint);
              IF v_held > 0 THEN
                IF p_amount > 0 THEN
                  INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id, memo, created_at)
                  VALUES (p_hold || '/charge', h.chain, h.account_id, 'system:revenue', p_amount, false, 'charge', p_hold, '', p_at);
                END IF;
                -- Beside the account's balance row, not on it: its holds keep that row locked
                -- until they commit. The foreign key refuses an account with no balance row.
                INSERT INTO balance_releases AS r (account, chain, released, charged)
                VALUES (h.account_id, h.chain, v_held, p_amount)
                ON CONFLICT (account, chain)
                  DO UPDATE SET released = r.released + EXCLUDED.released, charged = r.charged + EXCLUDED.charged;
                v_released := true;
              END IF;
              IF p_status = 'settled' AND p_amount > 0 THEN
                IF v_released THEN
                  SELECT LEAST(p_amount, b.deposited - b.committed) INTO v_onchain
                    FROM onchain_backing b WHERE b.account_id = h.account_id AND b.chain = h.chain FOR UPDATE OF b;
                  IF v_onchain > 0 THEN
                    UPDATE onchain_backing b SET committed = b.committed + v_onchain
                     WHERE b.account_id = h.account_id AND b.chain = h.chain;
                  END IF;
                END IF;
                INSERT INTO settlement_intents (hold_id, account_id, chain, amount, onchain_amount, offchain_amount, created_at)
                VALUES (p_hold, h.account_id, h.chain, p_amount, COALESCE(v_onchain, 0), p_amount - COALESCE(v_onchain, 0), p_at);
              END IF;
              IF v_released AND p_amount <> v_held THEN
                -- Beside the key's day in spend_days, which its holds keep locked: spend_totals reads both.
                INSERT INTO spend_returns AS s (account_id, chain, key_id, day, returned)
                VALUES (h.account_id, h.chain, h.key_id, h.created_at - h.created_at % 86400000, v_held - p_amount)
                ON CONFLICT (account_id, chain, key_id, day) DO UPDATE SET returned = s.returned + EXCLUDED.returned;
              END IF;
            END IF;
          END IF;
          RETURN QUERY SELECT h.seq, h.id, h.account_id, h.request_id, h.key_id, h.chain, h.amount, h.call_kind, h.model,
                 h.input_tokens, h.max_tokens, h.image_size, h.image_count, h.created_at, h.raised, h.status, h.settled_amount,
                 h.u_input, h.u_output, h.u_cw5m, h.u_cw1h, h.u_read, h.u_images, h.u_charges, h.u_endpoint, h.resolved_at,
                 v_held IS NOT NULL, v_raised;
        END $$;
    `,
  },
];
