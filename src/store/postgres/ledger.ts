import pg from "pg";
import {
  type CapRefusal,
  capRefusal,
  DAY_MS,
  periodStart,
  type SpendCap,
  spendDay,
} from "../../core/billing/spend-caps.js";
import {
  type BacklogRow,
  type BalanceRow,
  type CreditResult,
  type DepositRow,
  emptyBacklog,
  type HoldState,
  type LedgerStore,
  type NewCredit,
  type NewHold,
  type NewWithdrawal,
  type OnchainStore,
  type PlaceHoldResult,
  type ResolutionStatus,
  type ResolveResult,
  type SettlementView,
  SYSTEM_REVENUE,
  SYSTEM_WITHDRAWAL_FEES,
  SYSTEM_WITHDRAWALS,
  type TransferRow,
  type UsageCounts,
  type WithdrawResult,
} from "../../core/ports/ledger.js";
import {
  type NewX402Payment,
  SYSTEM_X402,
  type X402Closing,
  type X402Collection,
  type X402PaymentRow,
  type X402Status,
  type X402Store,
} from "../../core/ports/x402.js";
import { KeptResolutions } from "../shared/kept-resolutions.js";
import {
  sameCall,
  toBalance,
  toHoldState,
  toSettlementView,
  toSpendCap,
  toTransfer,
  toX402Payment,
} from "../shared/ledger-rows.js";
import { isSystem } from "../sqlite/ledger.js";
import {
  x402ClosingRefusal,
  x402CollectionRefusal,
  x402CreditEntryId,
  x402ReturnEntryId,
  x402ReturnRefusal,
} from "../sqlite/x402.js";
import { inTransaction } from "./database.js";

/** A row as it comes back from a query that reads money: every int8 and numeric a bigint. */
export type Raw = Record<string, unknown>;

const INT8_OID = 20;
const NUMERIC_OID = 1700;

/** The pool parses int8 as a JS number (times, counts); money needs every integer exact. */
const EXACT_INTEGERS = {
  getTypeParser: (oid: number, format?: "text" | "binary") =>
    oid === INT8_OID || oid === NUMERIC_OID
      ? (value: string) => BigInt(value)
      : (pg.types.getTypeParser(oid, format) as (value: string) => unknown),
};

/** Where a query runs: the pool (one statement, its own transaction) or a transaction's client. */
export type Queryable = pg.Pool | pg.PoolClient;

/** Runs a query whose integers (int8, numeric: money, and SUMs of it) come back as bigints. */
export async function exactRows(db: Queryable, text: string, values: readonly unknown[]): Promise<Raw[]> {
  return (await db.query<Raw>({ text, values: [...values], types: EXACT_INTEGERS })).rows;
}

/** The SQLSTATE of a PostgreSQL error, if `error` is one. */
export function sqlState(error: unknown): string | undefined {
  return error instanceof Error && "code" in error && typeof error.code === "string" ? error.code : undefined;
}

/**
 * Runs `work` again when PostgreSQL chose it as a deadlock victim or refused it as a
 * serialization failure; `work` must be a whole transaction (or one statement), so nothing of
 * the failed attempt remains. Rare by design: every writer locks the account's balance row
 * before any shard or backing row, and the sweeper locks users' rows before system shards.
 */
export async function retrying<T>(work: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await work();
    } catch (error) {
      const state = sqlState(error);
      if (attempt >= 5 || (state !== "40001" && state !== "40P01")) throw error;
    }
  }
}

/** How many rows a system account's totals are spread over (migration 4). */
export const SYSTEM_SHARDS = 16;

/**
 * The balance row a transaction adds to for `account`: a user's single row, or a random shard
 * of a system account (only ever added to, never taken from, so any shard will do). A hold's
 * pending amount goes to shard `seq % 16` instead, so that its release takes it from the row
 * that holds it (each row's pending total is checked ≥ 0).
 */
export function shardFor(account: string): { shard: number; mayOverdraw: boolean } {
  return isSystem(account)
    ? { shard: Math.floor(Math.random() * SYSTEM_SHARDS), mayOverdraw: true }
    : { shard: 0, mayOverdraw: false };
}

const INT64_MAX_SQL = "9223372036854775807";

const HOLD_COLUMNS = `h.seq, h.id, h.account_id, h.request_id, h.key_id, h.chain, h.amount, h.call_kind, h.model,
  h.input_tokens, h.max_tokens, h.image_size, h.image_count, h.created_at,
  r.status, r.amount AS settled_amount, r.input_tokens AS u_input, r.output_tokens AS u_output,
  r.cache_write_5m_tokens AS u_cw5m, r.cache_write_1h_tokens AS u_cw1h, r.cache_read_tokens AS u_read,
  r.images AS u_images, r.charges AS u_charges, r.resolved_at`;

/**
 * A hold in one statement (no transaction, one round trip): the funds check is the conditional
 * UPDATE of the account's balance row (the lock every hold of the account waits on), and every
 * other row is written only if it moved. No row updated: nothing is written. An id already
 * taken fails the whole statement on the primary key.
 */
const PLACE_HOLD = `
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
    RETURNING seq
  ), opened AS (
    INSERT INTO open_holds (hold_id, created_at) SELECT $1::text, $13::bigint FROM hold
  ), entry AS (
    INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id, memo,
                                created_at)
    SELECT $1::text || '/hold', $5::text, $2::text, '${SYSTEM_REVENUE}', $6::bigint, true, 'hold', $1::text, '',
           $13::bigint
      FROM funds
  ), revenue AS (
    INSERT INTO ledger_balances AS b (account, chain, shard, may_overdraw, credits_pending)
    SELECT '${SYSTEM_REVENUE}', $5::text, hold.seq % ${SYSTEM_SHARDS}, true, $6::bigint FROM hold, funds
    ON CONFLICT (account, chain, shard) DO UPDATE SET credits_pending = b.credits_pending + EXCLUDED.credits_pending
  ), spent AS (
    INSERT INTO spend_days AS d (account_id, key_id, chain, day, spent)
    SELECT $2::text, $4::text, $5::text, $13::bigint - $13::bigint % ${DAY_MS}, $6::bigint FROM hold, funds
    ON CONFLICT (account_id, chain, key_id, day) DO UPDATE SET spent = d.spent + EXCLUDED.spent
  )
  SELECT seq FROM hold`;

/** What a cap's period has spent: its days' rows, of every key for an account's cap. */
const SPENT_SINCE = `
  SELECT COALESCE(SUM(spent), 0) AS spent FROM spend_days
   WHERE account_id = $1::text AND chain = $2::text AND day >= $3::bigint AND ($4::text = '' OR key_id = $4::text)`;

/** What the cap's holds placed at or after `since` have spent (SPENT_SINCE). */
async function capSpentOn(db: Queryable, cap: SpendCap, since: number): Promise<bigint> {
  const [row] = await exactRows(db, SPENT_SINCE, [cap.accountId, cap.chain, since, cap.keyId]);
  return row!.spent as bigint;
}

/** Takes expired holds off their keys' days (UNSPEND), one row per key and day, in key order. */
async function unspend(client: Queryable, expired: readonly Raw[]): Promise<void> {
  const days = new Map<
    string,
    { account: string; chain: string; key: string; day: number; amount: bigint }
  >();
  for (const h of expired) {
    const amount = h.amount as bigint;
    if (amount === 0n) continue;
    const day = spendDay(Number(h.created_at));
    const id = `${h.account_id}\u0000${h.chain}\u0000${h.key_id}\u0000${day}`;
    const entry = days.get(id) ?? {
      account: h.account_id as string,
      chain: h.chain as string,
      key: h.key_id as string,
      day,
      amount: 0n,
    };
    entry.amount += amount;
    days.set(id, entry);
  }
  const rows = [...days.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, row]) => row);
  const updated = await client.query(UNSPEND, [
    rows.map((r) => r.account),
    rows.map((r) => r.chain),
    rows.map((r) => r.key),
    rows.map((r) => `${r.day}`),
    rows.map((r) => r.amount.toString()),
  ]);
  if (updated.rowCount !== rows.length) throw new Error("expired holds without their spend_days rows");
}

/** A hold's placement: its seq when placed, the cap that refused it, or neither (not placed). */
interface Placement {
  readonly seq?: bigint | undefined;
  readonly refusal?: CapRefusal;
}

/** Why a hold was not placed: the hold already there, and what the account has available now. */
const PLACE_HOLD_REFUSED = `
  SELECT ${HOLD_COLUMNS},
         (SELECT credits_posted - debits_posted - debits_pending FROM ledger_balances
           WHERE account = $2::text AND chain = $3::text AND shard = 0) AS available
    FROM (SELECT 1) AS one
    LEFT JOIN holds h ON h.id = $1::text
    LEFT JOIN hold_resolutions r ON r.hold_id = h.id`;

/**
 * Settles or voids a hold in one statement. The hold's open-list row is its lock: whoever
 * deletes it resolves the hold (a sweeper holding it makes this wait, then find nothing), and
 * the resolution's primary key still refuses a second outcome. Rows are then locked in the
 * order every writer uses: the account's balance row, the revenue shard holding the hold's
 * pending amount, and (settled with a charge) the account's onchain backing, read FOR UPDATE
 * so that the intent's onchain part is computed from its newest version, as
 * SettlementOutbox.record does.
 */
const RESOLVE = `
  WITH hold AS (
    SELECT ${HOLD_COLUMNS} FROM holds h LEFT JOIN hold_resolutions r ON r.hold_id = h.id WHERE h.id = $1::text
  ), closed AS (
    DELETE FROM open_holds o USING hold
     WHERE o.hold_id = hold.id AND hold.status IS NULL AND $3::bigint BETWEEN 0 AND hold.amount
    RETURNING o.hold_id
  ), resolved AS (
    INSERT INTO hold_resolutions (hold_id, status, amount, input_tokens, output_tokens, cache_write_5m_tokens,
                                  cache_write_1h_tokens, cache_read_tokens, images, charges, resolved_at)
    SELECT hold_id, $2::text, $3::bigint, $4::bigint, $5::bigint, $6::bigint, $7::bigint, $8::bigint, $9::integer,
           $10::text, $11::bigint
      FROM closed
    RETURNING hold_id
  ), released AS (
    UPDATE ledger_balances b
       SET debits_pending = b.debits_pending - hold.amount, debits_posted = b.debits_posted + $3::bigint
      FROM hold, resolved
     WHERE hold.amount > 0 AND b.account = hold.account_id AND b.chain = hold.chain AND b.shard = 0
    RETURNING 1
  ), revenue AS (
    UPDATE ledger_balances b
       SET credits_pending = b.credits_pending - hold.amount, credits_posted = b.credits_posted + $3::bigint
      FROM hold, released
     WHERE b.account = '${SYSTEM_REVENUE}' AND b.chain = hold.chain AND b.shard = hold.seq % ${SYSTEM_SHARDS}
    RETURNING 1
  ), charge AS (
    INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id, memo,
                                created_at)
    SELECT hold.id || '/charge', hold.chain, hold.account_id, '${SYSTEM_REVENUE}', $3::bigint, false, 'charge',
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
    INSERT INTO settlement_intents (hold_id, account_id, chain, amount, onchain_amount, offchain_amount, created_at)
    SELECT hold.id, hold.account_id, hold.chain, $3::bigint, COALESCE(k.onchain, 0),
           $3::bigint - COALESCE(k.onchain, 0), $11::bigint
      FROM hold JOIN resolved ON true LEFT JOIN backing k ON true
     WHERE $2::text = 'settled' AND $3::bigint > 0
  ), spent AS (
    UPDATE spend_days d SET spent = d.spent + $3::bigint - hold.amount
      FROM hold, released
     WHERE $3::bigint <> hold.amount AND d.account_id = hold.account_id AND d.chain = hold.chain
       AND d.key_id = hold.key_id AND d.day = hold.created_at - hold.created_at % ${DAY_MS}
  )
  SELECT hold.*, EXISTS (SELECT 1 FROM resolved) AS resolved_now FROM hold`;

/** A hold's x402 payment is collected: its hold is never expired (see LedgerStore.expireHolds). */
const COLLECTED = `EXISTS (SELECT 1 FROM x402_payments p WHERE p.hold_id = o.hold_id AND p.status = 'collected')`;

/**
 * The sweeper's first step: the oldest open holds before the cutoff whose x402 payment (if any)
 * is not collected and that no other transaction has locked (SKIP LOCKED: two hosts' sweepers
 * take disjoint sets, and never wait on a settle or on a collection being recorded, which
 * locks its hold's row: RECORD_X402_COLLECTION), locked.
 */
const LOCK_DUE = `
  SELECT o.hold_id FROM open_holds o
   WHERE o.created_at < $1::bigint AND NOT ${COLLECTED}
   ORDER BY o.created_at LIMIT $2::integer
     FOR UPDATE OF o SKIP LOCKED`;

/**
 * The sweeper's claim of the holds LOCK_DUE locked, in a statement of its own so that it sees
 * every collection committed before it: one recorded after LOCK_DUE's snapshot was taken, but
 * before these rows were locked, is skipped here. Taken off the open list and resolved as
 * expired.
 */
const CLAIM_EXPIRED = `
  WITH due AS (
    SELECT o.hold_id FROM open_holds o WHERE o.hold_id = ANY($1::text[]) AND NOT ${COLLECTED}
  ), closed AS (
    DELETE FROM open_holds o USING due WHERE o.hold_id = due.hold_id RETURNING o.hold_id
  ), expired AS (
    INSERT INTO hold_resolutions (hold_id, status, amount, resolved_at)
    SELECT hold_id, 'expired', 0, $2::bigint FROM closed
    RETURNING hold_id
  )
  SELECT h.seq, h.account_id, h.key_id, h.chain, h.amount, h.created_at
    FROM holds h JOIN expired ON expired.hold_id = h.id`;

/** Takes expired holds' amounts off their keys' days (after their balance rows were locked). */
const UNSPEND = `
  UPDATE spend_days d SET spent = d.spent - u.amount
    FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[]) AS u (account_id, chain, key_id, day, amount)
   WHERE d.account_id = u.account_id AND d.chain = u.chain AND d.key_id = u.key_id AND d.day = u.day`;

/** Users' rows before system rows, each in key order: the order every writer locks them in. */
const LOCK_BALANCES = `
  SELECT 1 FROM ledger_balances b
    JOIN unnest($1::text[], $2::text[], $3::smallint[]) AS k (account, chain, shard)
      ON b.account = k.account AND b.chain = k.chain AND b.shard = k.shard
   ORDER BY b.account LIKE 'system:%', b.account, b.chain, b.shard
     FOR UPDATE OF b`;

const RELEASE_PENDING = `
  UPDATE ledger_balances b
     SET debits_pending = b.debits_pending - d.debits, credits_pending = b.credits_pending - d.credits
    FROM unnest($1::text[], $2::text[], $3::smallint[], $4::bigint[], $5::bigint[])
         AS d (account, chain, shard, debits, credits)
   WHERE b.account = d.account AND b.chain = d.chain AND b.shard = d.shard`;

/**
 * A credit in one statement: the entry (its id is the idempotency key: a second credit with it
 * inserts nothing), then the credited row, then the source's shard. Refused whole when either
 * total would leave the int64 range.
 */
const CREDIT = `
  WITH entry AS (
    INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id, memo,
                                created_at)
    SELECT $1::text, $2::text, $3::text, $4::text, $5::bigint, false, 'credit', NULL, $6::text, $7::bigint
     WHERE COALESCE((SELECT SUM(credits_posted) FROM ledger_balances WHERE account = $4::text AND chain = $2::text), 0)
             + $5::bigint <= ${INT64_MAX_SQL}
       AND COALESCE((SELECT SUM(debits_posted) FROM ledger_balances WHERE account = $3::text AND chain = $2::text), 0)
             + $5::bigint <= ${INT64_MAX_SQL}
    ON CONFLICT (id) DO NOTHING
    RETURNING 1
  ), credited AS (
    INSERT INTO ledger_balances AS b (account, chain, shard, may_overdraw, credits_posted)
    SELECT $4::text, $2::text, $8::smallint, $9::boolean, $5::bigint FROM entry
    ON CONFLICT (account, chain, shard) DO UPDATE SET credits_posted = b.credits_posted + EXCLUDED.credits_posted
    RETURNING b.account, b.chain, b.debits_pending, b.debits_posted, b.credits_pending, b.credits_posted
  ), debited AS (
    INSERT INTO ledger_balances AS b (account, chain, shard, may_overdraw, debits_posted)
    SELECT $3::text, $2::text, $10::smallint, $11::boolean, $5::bigint FROM credited
    ON CONFLICT (account, chain, shard) DO UPDATE SET debits_posted = b.debits_posted + EXCLUDED.debits_posted
  )
  SELECT * FROM credited`;

const BALANCE = `
  SELECT COALESCE(SUM(debits_pending), 0) AS debits_pending, COALESCE(SUM(debits_posted), 0) AS debits_posted,
         COALESCE(SUM(credits_pending), 0) AS credits_pending, COALESCE(SUM(credits_posted), 0) AS credits_posted
    FROM ledger_balances WHERE account = $1::text AND chain = $2::text`;

/**
 * A withdrawal's writes, run in a transaction that rolls back unless all of them happened: the
 * account's debit of amount + fee (its available funds checked on its locked balance row), the
 * backing it commits (checked on the locked backing row), the queued transfer, the entries, and
 * the withdrawals and fees shards.
 */
const WITHDRAW = `
  WITH debited AS (
    UPDATE ledger_balances SET debits_posted = debits_posted + $5::bigint + $8::bigint
     WHERE account = $2::text AND chain = $3::text AND shard = 0
       AND credits_posted - debits_posted - debits_pending >= $5::bigint + $8::bigint
    RETURNING 1
  ), backed AS (
    UPDATE onchain_backing b SET committed = b.committed + $5::bigint + $8::bigint
      FROM debited
     WHERE b.account_id = $2::text AND b.chain = $3::text AND b.deposited - b.committed >= $5::bigint + $8::bigint
    RETURNING 1
  ), transfer AS (
    INSERT INTO chain_transfers (id, kind, account_id, chain, to_address, amount, fee, status, next_attempt_at,
                                 created_at, updated_at)
    SELECT $1::text, 'withdrawal', $2::text, $3::text, $4::text, $5::bigint, $8::bigint, 'queued', $6::bigint,
           $6::bigint, $6::bigint
      FROM backed
    RETURNING *
  ), entry AS (
    INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id, memo,
                                created_at)
    SELECT $1::text || '/withdrawal', $3::text, $2::text, '${SYSTEM_WITHDRAWALS}', $5::bigint, false, 'withdrawal',
           NULL, $4::text, $6::bigint
      FROM backed
  ), fee_entry AS (
    INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id, memo,
                                created_at)
    SELECT $1::text || '/fee', $3::text, $2::text, '${SYSTEM_WITHDRAWAL_FEES}', $8::bigint, false, 'withdrawal',
           NULL, 'network fee', $6::bigint
      FROM backed WHERE $8::bigint > 0
  ), paid AS (
    INSERT INTO ledger_balances AS b (account, chain, shard, may_overdraw, credits_posted)
    SELECT '${SYSTEM_WITHDRAWALS}', $3::text, $7::smallint, true, $5::bigint FROM backed
    ON CONFLICT (account, chain, shard) DO UPDATE SET credits_posted = b.credits_posted + EXCLUDED.credits_posted
  ), fees AS (
    INSERT INTO ledger_balances AS b (account, chain, shard, may_overdraw, credits_posted)
    SELECT '${SYSTEM_WITHDRAWAL_FEES}', $3::text, $9::smallint, true, $8::bigint FROM backed WHERE $8::bigint > 0
    ON CONFLICT (account, chain, shard) DO UPDATE SET credits_posted = b.credits_posted + EXCLUDED.credits_posted
  )
  SELECT t.*, 0::bigint AS calls FROM transfer t`;

/**
 * An x402 payment's authorisation in one statement: the payment row (its id the replay guard: a
 * payment seen before inserts nothing, and nothing else is written), its credit entry, then the
 * account's row and a random shard of system:x402, in the order every writer locks them. A
 * hold id already paid for fails the whole statement on its unique key.
 */
const AUTHORISE_X402 = `
  WITH payment AS (
    INSERT INTO x402_payments (id, hold_id, account_id, chain, scheme, payer, authorised, payload, status,
                               created_at)
    VALUES ($1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::bigint, $8::text, 'authorised',
            $9::bigint)
    ON CONFLICT (id) DO NOTHING
    RETURNING id
  ), entry AS (
    INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id, memo,
                                created_at)
    SELECT $10::text, $4::text, '${SYSTEM_X402}', $3::text, $7::bigint, false, 'x402', NULL, '', $9::bigint
      FROM payment
  ), credited AS (
    INSERT INTO ledger_balances AS b (account, chain, shard, may_overdraw, credits_posted)
    SELECT $3::text, $4::text, $11::smallint, $12::boolean, $7::bigint FROM payment
    ON CONFLICT (account, chain, shard) DO UPDATE SET credits_posted = b.credits_posted + EXCLUDED.credits_posted
    RETURNING 1
  ), debited AS (
    INSERT INTO ledger_balances AS b (account, chain, shard, may_overdraw, debits_posted)
    SELECT '${SYSTEM_X402}', $4::text, $13::smallint, true, $7::bigint FROM credited
    ON CONFLICT (account, chain, shard) DO UPDATE SET debits_posted = b.debits_posted + EXCLUDED.debits_posted
  )
  SELECT id FROM payment`;

/**
 * An x402 payment's collection in one statement: the payment row locked (its current version:
 * a closing that committed meanwhile is seen), taken from 'authorised' to 'collected' only when
 * the collection is one it can have (x402CollectionRefusal), then its hold's open-list row, if
 * the hold is open, locked until the commit (KEY SHARE), so the sweeper (LOCK_DUE) either skips
 * that hold or has expired it before the collection commits. Answers the payment's status and
 * amount, and whether the collection was recorded (`held` is read so that the lock is taken: a
 * CTE nothing reads is not run); no row when there is no such payment.
 */
const RECORD_X402_COLLECTION = `
  WITH payment AS (
    SELECT id, hold_id, status, authorised FROM x402_payments WHERE id = $1::text FOR UPDATE
  ), collected AS (
    UPDATE x402_payments p SET status = 'collected', settled = $2::bigint, tx_hash = $3::text,
                               collected_at = $4::bigint
      FROM payment
     WHERE p.id = payment.id AND p.status = 'authorised' AND $2::bigint > 0
       AND $2::bigint <= payment.authorised AND $3::text <> ''
    RETURNING p.hold_id
  ), hold AS (
    SELECT o.hold_id FROM open_holds o JOIN collected c ON c.hold_id = o.hold_id FOR KEY SHARE OF o
  )
  SELECT payment.status, payment.authorised, EXISTS (SELECT 1 FROM collected) AS recorded,
         (SELECT COUNT(*) FROM hold) AS held
    FROM payment`;

/**
 * An x402 payment's closing, run in a transaction that rolls back unless every part of it was
 * written: the payment row taken from 'authorised' or 'collected' (its lock: a second closing
 * waits, then finds it closed; a collected one only as it was collected, see
 * x402ClosingRefusal), then with a return the account's debit (its available funds checked on
 * its locked row), the return entry and a random shard of system:x402. Answers, when the
 * payment was open, its account, chain, amount and collection, whether it closed and whether
 * the return was debited.
 */
const CLOSE_X402 = `
  WITH payment AS (
    SELECT id, account_id, chain, authorised, status, settled, tx_hash FROM x402_payments
     WHERE id = $1::text AND status IN ('authorised', 'collected') FOR UPDATE
  ), closed AS (
    UPDATE x402_payments p SET status = $2::text, settled = $3::bigint, tx_hash = $4::text, error = $5::text,
                               closed_at = $6::bigint
      FROM payment
     WHERE p.id = payment.id AND p.status IN ('authorised', 'collected') AND $2::text <> 'collected'
       AND (payment.status = 'authorised'
            OR ($2::text = 'settled' AND payment.settled = $3::bigint AND payment.tx_hash = $4::text))
    RETURNING p.id
  ), debited AS (
    UPDATE ledger_balances b SET debits_posted = b.debits_posted + $7::bigint
      FROM payment, closed
     WHERE $7::bigint > 0 AND $7::bigint <= payment.authorised AND b.account = payment.account_id
       AND b.chain = payment.chain AND b.shard = 0 AND b.credits_posted - b.debits_posted - b.debits_pending >= $7::bigint
    RETURNING 1
  ), entry AS (
    INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id, memo,
                                created_at)
    SELECT $8::text, payment.chain, payment.account_id, '${SYSTEM_X402}', $7::bigint, false, 'x402', NULL, '',
           $6::bigint
      FROM payment, debited
  ), returned AS (
    INSERT INTO ledger_balances AS b (account, chain, shard, may_overdraw, credits_posted)
    SELECT '${SYSTEM_X402}', payment.chain, $9::smallint, true, $7::bigint FROM payment, debited
    ON CONFLICT (account, chain, shard) DO UPDATE SET credits_posted = b.credits_posted + EXCLUDED.credits_posted
  )
  SELECT payment.account_id, payment.chain, payment.authorised, payment.status, payment.settled, payment.tx_hash,
         EXISTS (SELECT 1 FROM closed) AS closed, EXISTS (SELECT 1 FROM debited) AS debited
    FROM payment`;

/** Why a withdrawal was not written: the transfer already there, and what may be withdrawn now. */
const WITHDRAW_REFUSED = `
  SELECT t.*, (SELECT COUNT(*) FROM settlement_intents i WHERE i.transfer_id = t.id) AS calls,
         LEAST(COALESCE((SELECT credits_posted - debits_posted - debits_pending FROM ledger_balances
                          WHERE account = $2::text AND chain = $3::text AND shard = 0), 0),
               COALESCE((SELECT deposited - committed FROM onchain_backing
                          WHERE account_id = $2::text AND chain = $3::text), 0)) AS withdrawable
    FROM (SELECT 1) AS one LEFT JOIN chain_transfers t ON t.id = $1::text`;

/** A transfer as listed, with the number of calls a settlement covers. */
export const TRANSFER_WITH_CALLS = `
  SELECT t.*, (SELECT COUNT(*) FROM settlement_intents i WHERE i.transfer_id = t.id) AS calls
    FROM chain_transfers t`;

const ZERO_USAGE: UsageCounts = {
  inputTokens: 0n,
  outputTokens: 0n,
  cacheWrite5mTokens: 0n,
  cacheWrite1hTokens: 0n,
  cacheReadTokens: 0n,
  images: 0,
};

/** How often a refused hold or withdrawal is tried again when the funds it lacked appeared meanwhile. */
const REFUSAL_RETRIES = 3;

/**
 * The ledger and onchain ports over PostgreSQL, for several gateway hosts on one database. Every
 * write is one statement or one READ COMMITTED transaction whose correctness rests on row locks
 * and constraints, not on isolation: a hold's funds check is a conditional UPDATE of the
 * account's balance row (the lock its holds serialise on, with the `available_never_negative`
 * CHECK behind it), a hold resolves once (its open-list row, then the resolution's primary
 * key), and a credit or withdrawal is idempotent by its entry or transfer id, an x402 payment by
 * its payment id. The calls' path (placeHold, settle, void, authoriseX402) is one statement
 * each: one round trip. The pool belongs to whoever opened it; {@link close} leaves it open.
 */
export class PgLedger implements LedgerStore, OnchainStore, X402Store {
  /**
   * Settles and voids the server's full disk refused, written when it takes them again. They
   * live in this process: another host's sweeper may void such a hold once it expires.
   */
  readonly #kept = new KeptResolutions();

  constructor(private readonly pool: pg.Pool) {}

  async accountExists(accountId: string): Promise<boolean> {
    return (await this.pool.query("SELECT 1 FROM accounts WHERE id = $1", [accountId])).rowCount === 1;
  }

  async billingAccount(accountId: string): Promise<{ defaultChain: string | undefined } | undefined> {
    const { rows } = await this.pool.query<{ default_chain: string | null }>(
      `SELECT b.default_chain FROM accounts a LEFT JOIN billing_accounts b ON b.account_id = a.id WHERE a.id = $1`,
      [accountId],
    );
    const row = rows[0];
    return row === undefined ? undefined : { defaultChain: row.default_chain ?? undefined };
  }

  async defaultChain(accountId: string): Promise<string | undefined> {
    const { rows } = await this.pool.query<{ default_chain: string }>(
      "SELECT default_chain FROM billing_accounts WHERE account_id = $1",
      [accountId],
    );
    return rows[0]?.default_chain;
  }

  async setDefaultChain(accountId: string, chain: string, now: number): Promise<void> {
    await this.pool.query(
      `INSERT INTO billing_accounts (account_id, default_chain, updated_at) VALUES ($1, $2, $3)
       ON CONFLICT (account_id) DO UPDATE SET default_chain = EXCLUDED.default_chain, updated_at = EXCLUDED.updated_at`,
      [accountId, chain, now],
    );
  }

  /** A system account's totals are the sum of its shard rows; a user's, its one row. */
  async balance(account: string, chain: string): Promise<BalanceRow> {
    const [row] = await exactRows(this.pool, BALANCE, [account, chain]);
    return toBalance({ ...row, account, chain });
  }

  async balances(account: string): Promise<BalanceRow[]> {
    const rows = await exactRows(
      this.pool,
      // SQLite orders chains bytewise; so does the "C" collation.
      `SELECT account, chain, SUM(debits_pending) AS debits_pending, SUM(debits_posted) AS debits_posted,
              SUM(credits_pending) AS credits_pending, SUM(credits_posted) AS credits_posted
         FROM ledger_balances WHERE account = $1::text GROUP BY account, chain ORDER BY chain COLLATE "C"`,
      [account],
    );
    return rows.map(toBalance);
  }

  async getHold(holdId: string): Promise<HoldState | undefined> {
    const [row] = await exactRows(
      this.pool,
      `SELECT ${HOLD_COLUMNS} FROM holds h LEFT JOIN hold_resolutions r ON r.hold_id = h.id WHERE h.id = $1::text`,
      [holdId],
    );
    return row === undefined ? undefined : toHoldState(row);
  }

  async listHolds(accountId: string, beforeSeq: bigint, limit: number): Promise<HoldState[]> {
    const rows = await exactRows(
      this.pool,
      `SELECT ${HOLD_COLUMNS} FROM holds h LEFT JOIN hold_resolutions r ON r.hold_id = h.id
        WHERE h.account_id = $1::text AND h.seq < $2::bigint ORDER BY h.seq DESC LIMIT $3::integer`,
      [accountId, beforeSeq, limit],
    );
    return rows.map(toHoldState);
  }

  /**
   * One statement when it places the hold (see PLACE_HOLD); a second read when it does not, to
   * answer `existing`/`conflict` or `insufficient` from what is committed now. Funds that
   * appeared between the two (a credit, a release) make it try again rather than answer
   * `insufficient` with an available amount that would cover the hold.
   */
  async placeHold(hold: NewHold): Promise<PlaceHoldResult> {
    const values = [
      hold.id,
      hold.accountId,
      hold.requestId,
      hold.keyId,
      hold.chain,
      hold.amount,
      hold.callKind,
      hold.model,
      hold.inputTokens,
      hold.maxTokens,
      hold.imageSize,
      hold.imageCount,
      hold.createdAt,
    ];
    const caps = hold.amount > 0n ? await this.capsFor(hold) : [];
    for (let attempt = 1; ; attempt++) {
      let taken: unknown;
      try {
        const placed = await retrying(() =>
          caps.length === 0 ? this.placeUncapped(values) : this.placeWithinCaps(hold, caps, values),
        );
        if (placed.refusal !== undefined) return { kind: "capped", refusal: placed.refusal };
        // What was just written, without reading it back.
        if (placed.seq !== undefined) {
          return {
            kind: "placed",
            state: { hold: { ...hold, seq: Number(placed.seq) }, resolution: undefined },
          };
        }
      } catch (error) {
        if (sqlState(error) !== "23505") throw error;
        taken = error;
      }
      const [row] = await exactRows(this.pool, PLACE_HOLD_REFUSED, [hold.id, hold.accountId, hold.chain]);
      if (row!.id !== null) {
        const existing = toHoldState(row!);
        return sameCall(existing.hold, hold) ? { kind: "existing", state: existing } : { kind: "conflict" };
      }
      if (taken !== undefined) throw taken;
      const available = (row!.available as bigint | null) ?? 0n;
      if (hold.amount > available || attempt >= REFUSAL_RETRIES) return { kind: "insufficient", available };
    }
  }

  /** PLACE_HOLD alone: one statement, one round trip (no caps bound the hold). */
  private async placeUncapped(values: readonly unknown[]): Promise<Placement> {
    const [placed] = await exactRows(this.pool, PLACE_HOLD, values);
    return { seq: placed?.seq as bigint | undefined };
  }

  /**
   * A hold some caps bound, in one READ COMMITTED transaction: lock the account's balance row on
   * the chain (the lock every hold of the account there waits on, PLACE_HOLD's included), then
   * sum the caps' periods. Each statement reads what was committed when it began, so the sums
   * see every hold placed before the lock was granted: parallel holds cannot run past a cap.
   * No balance row: no funds, and PLACE_HOLD refuses the hold.
   */
  private placeWithinCaps(hold: NewHold, caps: readonly SpendCap[], values: readonly unknown[]) {
    return inTransaction(this.pool, async (client): Promise<Placement> => {
      await client.query(
        "SELECT 1 FROM ledger_balances WHERE account = $1 AND chain = $2 AND shard = 0 FOR NO KEY UPDATE",
        [hold.accountId, hold.chain],
      );
      // A retry of a hold already placed is answered by the refusal path, not counted against itself.
      const taken = await client.query("SELECT 1 FROM holds WHERE id = $1", [hold.id]);
      if (taken.rowCount !== 0) return {};
      const spent = new Map<SpendCap, bigint>();
      for (const cap of caps)
        spent.set(cap, await capSpentOn(client, cap, periodStart(cap.period, hold.createdAt)));
      const refusal = capRefusal(caps, hold.amount, hold.createdAt, (cap) => spent.get(cap)!);
      if (refusal !== undefined) return { refusal };
      const [placed] = await exactRows(client, PLACE_HOLD, values);
      return { seq: placed?.seq as bigint | undefined };
    });
  }

  /** The caps that bound a hold: the account's own and its key's, on the hold's chain. */
  private async capsFor(hold: NewHold): Promise<SpendCap[]> {
    const rows = await exactRows(
      this.pool,
      "SELECT * FROM spend_caps WHERE account_id = $1 AND chain = $2 AND key_id IN ('', $3)",
      [hold.accountId, hold.chain, hold.keyId],
    );
    return rows.map(toSpendCap);
  }

  async setSpendCap(cap: SpendCap, now: number): Promise<void> {
    await this.pool.query(
      `INSERT INTO spend_caps (account_id, key_id, chain, period, amount, updated_at) VALUES ($1, $2, $3, $4, $5, $6)
       ON CONFLICT (account_id, key_id, chain, period)
       DO UPDATE SET amount = EXCLUDED.amount, updated_at = EXCLUDED.updated_at`,
      [cap.accountId, cap.keyId, cap.chain, cap.period, cap.amount, now],
    );
  }

  async clearSpendCap(cap: Omit<SpendCap, "amount">): Promise<boolean> {
    const { rowCount } = await this.pool.query(
      "DELETE FROM spend_caps WHERE account_id = $1 AND key_id = $2 AND chain = $3 AND period = $4",
      [cap.accountId, cap.keyId, cap.chain, cap.period],
    );
    return rowCount === 1;
  }

  capSpent(cap: SpendCap, since: number): Promise<bigint> {
    return capSpentOn(this.pool, cap, since);
  }

  async spendCaps(accountId: string): Promise<SpendCap[]> {
    const rows = await exactRows(
      this.pool,
      `SELECT * FROM spend_caps WHERE account_id = $1 ORDER BY key_id COLLATE "C", chain COLLATE "C", period`,
      [accountId],
    );
    return rows.map(toSpendCap);
  }

  /**
   * Settles, or keeps the settle for a retry when the server's disk refuses it (53100
   * disk_full: see KeptResolutions); so does {@link void}.
   */
  settle(
    holdId: string,
    charge: bigint,
    usage: UsageCounts,
    now: number,
    charges: string,
  ): Promise<ResolveResult> {
    return this.#kept.run(holdId, () => this.resolve(holdId, "settled", charge, usage, now, charges));
  }

  void(holdId: string, status: "released" | "expired", now: number): Promise<ResolveResult> {
    return this.#kept.run(holdId, () => this.resolve(holdId, status, 0n, ZERO_USAGE, now, ""));
  }

  /**
   * One transaction, off the calls' path: lock the due holds (LOCK_DUE), claim those whose x402
   * payment is still not collected (CLAIM_EXPIRED), then lock the balance rows they moved in
   * the common order (users, then shards) and release their pending amounts. Two hosts'
   * sweepers claim disjoint holds and never wait on each other in a cycle.
   */
  async expireHolds(cutoff: number, now: number, limit: number): Promise<number> {
    // This host's kept resolutions first: a hold whose settlement waits for space is not voided.
    await this.#kept.flush();
    return retrying(() =>
      inTransaction(this.pool, async (client) => {
        const due = await client.query<{ hold_id: string }>(LOCK_DUE, [cutoff, limit]);
        if (due.rows.length === 0) return 0;
        const expired = await exactRows(client, CLAIM_EXPIRED, [due.rows.map((r) => r.hold_id), now]);
        const deltas = new Map<string, { key: [string, string, number]; debits: bigint; credits: bigint }>();
        const add = (account: string, chain: string, shard: number, debits: bigint, credits: bigint) => {
          const id = `${account}\u0000${chain}\u0000${shard}`;
          const delta = deltas.get(id) ?? { key: [account, chain, shard], debits: 0n, credits: 0n };
          delta.debits += debits;
          delta.credits += credits;
          deltas.set(id, delta);
        };
        for (const h of expired) {
          const amount = h.amount as bigint;
          if (amount === 0n) continue;
          add(h.account_id as string, h.chain as string, 0, amount, 0n);
          add(
            SYSTEM_REVENUE,
            h.chain as string,
            Number((h.seq as bigint) % BigInt(SYSTEM_SHARDS)),
            0n,
            amount,
          );
        }
        if (deltas.size > 0) {
          const rows = [...deltas.values()];
          const keys = [rows.map((d) => d.key[0]), rows.map((d) => d.key[1]), rows.map((d) => d.key[2])];
          await client.query(LOCK_BALANCES, keys);
          const released = await client.query(RELEASE_PENDING, [
            ...keys,
            rows.map((d) => d.debits.toString()),
            rows.map((d) => d.credits.toString()),
          ]);
          // Every pending amount sits on a row its hold created: one missing is a broken ledger.
          if (released.rowCount !== rows.length) throw new Error("expired holds without their balance rows");
          await unspend(client, expired);
        }
        return expired.length;
      }),
    );
  }

  /** One statement when it credits; a second read to answer `existing`, `conflict` or `overflow`. */
  async credit(credit: NewCredit): Promise<CreditResult> {
    const to = shardFor(credit.accountId);
    const from = shardFor(credit.from);
    let rows: Raw[];
    try {
      rows = await retrying(() =>
        exactRows(this.pool, CREDIT, [
          credit.entryId,
          credit.chain,
          credit.from,
          credit.accountId,
          credit.amount,
          credit.memo,
          credit.createdAt,
          to.shard,
          to.mayOverdraw,
          from.shard,
          from.mayOverdraw,
        ]),
      );
    } catch (error) {
      // A total that moved past the check meanwhile: BIGINT refuses it on the row itself.
      if (sqlState(error) === "22003") return { kind: "overflow" };
      throw error;
    }
    const [credited] = rows;
    if (credited !== undefined) {
      return {
        kind: "credited",
        balance: to.mayOverdraw ? await this.balance(credit.accountId, credit.chain) : toBalance(credited),
      };
    }
    const [existing] = await exactRows(
      this.pool,
      "SELECT kind, credit_account, chain, amount FROM ledger_entries WHERE id = $1::text",
      [credit.entryId],
    );
    if (existing === undefined) return { kind: "overflow" };
    const same =
      existing.kind === "credit" &&
      existing.credit_account === credit.accountId &&
      existing.chain === credit.chain &&
      existing.amount === credit.amount;
    return same
      ? { kind: "existing", balance: await this.balance(credit.accountId, credit.chain) }
      : { kind: "conflict" };
  }

  async settlements(holdIds: readonly string[]): Promise<Map<string, SettlementView>> {
    const rows = await exactRows(
      this.pool,
      `SELECT i.hold_id, i.onchain_amount, i.offchain_amount, i.transfer_id, t.status, t.tx_hash
         FROM settlement_intents i LEFT JOIN chain_transfers t ON t.id = i.transfer_id
        WHERE i.hold_id = ANY($1::text[])`,
      [holdIds],
    );
    const found = new Map(rows.map((r) => [r.hold_id as string, r]));
    const out = new Map<string, SettlementView>();
    for (const id of holdIds) {
      const row = found.get(id);
      if (row !== undefined) out.set(id, toSettlementView(row));
    }
    return out;
  }

  async listDeposits(accountId: string, limit: number): Promise<DepositRow[]> {
    // SQLite lists pending rows as the watcher wrote them (in scan order); here by position.
    const rows = await exactRows(
      this.pool,
      `SELECT * FROM (
         SELECT chain, tx_hash, log_index, position, from_address, to_address, account_id, onchain_amount,
                0::bigint AS amount, false AS credited, seen_at AS at, 0 AS part,
                row_number() OVER (ORDER BY position, log_index) AS n
           FROM pending_deposits WHERE account_id = $1::text
         UNION ALL
         (SELECT chain, tx_hash, log_index, position, from_address, to_address, account_id, onchain_amount,
                 amount, true AS credited, credited_at AS at, 1 AS part,
                 row_number() OVER (ORDER BY credited_at DESC, position DESC, log_index DESC) AS n
            FROM deposits WHERE account_id = $1::text
           ORDER BY credited_at DESC, position DESC, log_index DESC LIMIT $2::integer)
       ) AS listed ORDER BY part, n`,
      [accountId, limit],
    );
    return rows.map((r) => ({
      chain: r.chain as string,
      txHash: r.tx_hash as string,
      index: Number(r.log_index),
      position: r.position as bigint,
      from: r.from_address as string,
      to: r.to_address as string,
      accountId: r.account_id as string,
      onchainAmount: BigInt(r.onchain_amount as string),
      amount: r.amount as bigint,
      credited: r.credited === true,
      at: Number(r.at),
    }));
  }

  /**
   * One transaction of one statement (WITHDRAW), committed only when every part of it was
   * written; then a read to answer `existing`, `conflict` or `insufficient`. Three round trips:
   * withdrawals are rare, and a rolled-back partial debit is simpler to trust than a statement
   * that must fail on purpose.
   */
  async withdraw(w: NewWithdrawal): Promise<WithdrawResult> {
    for (let attempt = 1; ; attempt++) {
      let taken: unknown;
      try {
        const written = await retrying(() =>
          inTransaction(this.pool, async (client) => {
            const [row] = await exactRows(client, WITHDRAW, [
              w.id,
              w.accountId,
              w.chain,
              w.to,
              w.amount,
              w.now,
              shardFor(SYSTEM_WITHDRAWALS).shard,
              w.fee,
              shardFor(SYSTEM_WITHDRAWAL_FEES).shard,
            ]);
            if (row === undefined) throw new NotWritten();
            return toTransfer(row);
          }),
        );
        return { kind: "written", transfer: written };
      } catch (error) {
        if (sqlState(error) === "23505") taken = error;
        else if (!(error instanceof NotWritten)) throw error;
      }
      const [row] = await exactRows(this.pool, WITHDRAW_REFUSED, [w.id, w.accountId, w.chain]);
      if (row!.id !== null) {
        const existing = toTransfer(row!);
        const same =
          existing.kind === "withdrawal" &&
          existing.accountId === w.accountId &&
          existing.chain === w.chain &&
          existing.to === w.to &&
          existing.amount === w.amount;
        return same ? { kind: "existing", transfer: existing } : { kind: "conflict" };
      }
      if (taken !== undefined) throw taken;
      const available = row!.withdrawable as bigint;
      if (w.amount + w.fee > available || attempt >= REFUSAL_RETRIES)
        return { kind: "insufficient", available };
    }
  }

  async listTransfers(
    accountId: string,
    kind: "settlement" | "withdrawal",
    beforeSeq: bigint,
    limit: number,
  ): Promise<TransferRow[]> {
    const rows = await exactRows(
      this.pool,
      `${TRANSFER_WITH_CALLS} WHERE t.account_id = $1::text AND t.kind = $2::text AND t.seq < $3::bigint
        ORDER BY t.seq DESC LIMIT $4::integer`,
      [accountId, kind, beforeSeq, limit],
    );
    return rows.map(toTransfer);
  }

  async transfer(id: string): Promise<TransferRow | undefined> {
    const [row] = await exactRows(this.pool, `${TRANSFER_WITH_CALLS} WHERE t.id = $1::text`, [id]);
    return row === undefined ? undefined : toTransfer(row);
  }

  backlog(): Promise<BacklogRow[]> {
    return readBacklog(this.pool);
  }

  /**
   * One statement (AUTHORISE_X402). A unique key refusing it means the same payment raced in from
   * another connection (answered `replayed` once its row is there) or a hold already paid for by
   * another payment (a bug: thrown).
   */
  async authoriseX402(payment: NewX402Payment): Promise<"authorised" | "replayed"> {
    const to = shardFor(payment.accountId);
    try {
      const [row] = await retrying(() =>
        exactRows(this.pool, AUTHORISE_X402, [
          payment.id,
          payment.holdId,
          payment.accountId,
          payment.chain,
          payment.scheme,
          payment.payer,
          payment.authorised,
          payment.payload,
          payment.createdAt,
          x402CreditEntryId(payment.id),
          to.shard,
          to.mayOverdraw,
          shardFor(SYSTEM_X402).shard,
        ]),
      );
      return row === undefined ? "replayed" : "authorised";
    } catch (error) {
      if (sqlState(error) !== "23505") throw error;
      const seen = await this.pool.query("SELECT 1 FROM x402_payments WHERE id = $1", [payment.id]);
      if (seen.rowCount === 1) return "replayed";
      throw error;
    }
  }

  /**
   * One transaction of one statement (CLOSE_X402), rolled back with an error when the return it
   * owes could not be debited; then, when it closed nothing, a read to tell `already-closed`
   * from `not-found`.
   */
  async closeX402(closing: X402Closing): Promise<"closed" | "already-closed" | "not-found"> {
    const closed = await retrying(() =>
      inTransaction(this.pool, async (client) => {
        const [row] = await exactRows(client, CLOSE_X402, [
          closing.id,
          closing.status,
          closing.settled,
          closing.txHash,
          closing.error,
          closing.now,
          closing.returned,
          x402ReturnEntryId(closing.id),
          shardFor(SYSTEM_X402).shard,
        ]);
        if (row === undefined) return false;
        if (row.closed !== true) {
          throw (
            x402ClosingRefusal(
              closing,
              row.status as X402Status,
              row.settled as bigint,
              row.tx_hash as string,
            ) ?? new Error(`x402 payment ${closing.id}: not closed`)
          );
        }
        if (closing.returned !== 0n && row.debited !== true) {
          const [balance] = await exactRows(client, BALANCE, [row.account_id, row.chain]);
          const available =
            (balance!.credits_posted as bigint) -
            (balance!.debits_posted as bigint) -
            (balance!.debits_pending as bigint);
          throw (
            x402ReturnRefusal(closing.id, closing.returned, row.authorised as bigint, available) ??
            new Error(`x402 payment ${closing.id}: its return was not debited`)
          );
        }
        return true;
      }),
    );
    if (closed) return "closed";
    const seen = await this.pool.query("SELECT 1 FROM x402_payments WHERE id = $1", [closing.id]);
    return seen.rowCount === 1 ? "already-closed" : "not-found";
  }

  /** One statement (RECORD_X402_COLLECTION); nothing is written unless it answers `recorded`. */
  async recordX402Collection(
    collection: X402Collection,
  ): Promise<"recorded" | "not-authorised" | "not-found"> {
    const [row] = await retrying(() =>
      exactRows(this.pool, RECORD_X402_COLLECTION, [
        collection.id,
        collection.collected,
        collection.txHash,
        collection.now,
      ]),
    );
    if (row === undefined) return "not-found";
    if (row.recorded === true) return "recorded";
    if (row.status !== "authorised") return "not-authorised";
    throw (
      x402CollectionRefusal(collection, row.authorised as bigint) ??
      new Error(`x402 payment ${collection.id}: its collection was not recorded`)
    );
  }

  async failedX402Payments(payer: string, limit: number): Promise<X402PaymentRow[]> {
    // Written out as the partial index x402_payments_failed states it (see openX402Payments).
    const rows = await exactRows(
      this.pool,
      `SELECT * FROM x402_payments WHERE payer = $1::text AND status = 'failed' AND cleared_at IS NULL
        ORDER BY created_at, id LIMIT $2::integer`,
      [payer, limit],
    );
    return rows.map(toX402Payment);
  }

  async clearFailedX402(payer: string, now: number): Promise<number> {
    const cleared = await this.pool.query(
      `UPDATE x402_payments SET cleared_at = $2::bigint
        WHERE payer = $1::text AND status = 'failed' AND cleared_at IS NULL`,
      [payer, now],
    );
    return cleared.rowCount ?? 0;
  }

  async x402Payment(id: string): Promise<X402PaymentRow | undefined> {
    const [row] = await exactRows(this.pool, "SELECT * FROM x402_payments WHERE id = $1::text", [id]);
    return row === undefined ? undefined : toX402Payment(row);
  }

  async x402Payments(holdIds: readonly string[]): Promise<Map<string, X402PaymentRow>> {
    const rows = await exactRows(this.pool, "SELECT * FROM x402_payments WHERE hold_id = ANY($1::text[])", [
      holdIds,
    ]);
    return new Map(rows.map((r) => [r.hold_id as string, toX402Payment(r)]));
  }

  async openX402Payments(createdBefore: number, limit: number): Promise<X402PaymentRow[]> {
    // status written out as the partial index x402_payments_open states it: a plan made for
    // any parameter (a generic plan) could not use the index. id orders payments created in the
    // same millisecond.
    const rows = await exactRows(
      this.pool,
      `SELECT * FROM x402_payments WHERE status IN ('authorised', 'collected') AND created_at < $1::bigint
        ORDER BY created_at, id LIMIT $2::integer`,
      [createdBefore, limit],
    );
    return rows.map(toX402Payment);
  }

  /**
   * Tries the kept resolutions one last time; nothing else to finish: every other write answered
   * after its commit, and the pool is its opener's.
   */
  async close(): Promise<void> {
    this.#kept.stop();
    await this.#kept.flush().catch(() => undefined);
  }

  private async resolve(
    holdId: string,
    status: ResolutionStatus,
    charge: bigint,
    usage: UsageCounts,
    now: number,
    charges: string,
  ): Promise<ResolveResult> {
    const [row] = await retrying(() =>
      exactRows(this.pool, RESOLVE, [
        holdId,
        status,
        charge,
        usage.inputTokens,
        usage.outputTokens,
        usage.cacheWrite5mTokens,
        usage.cacheWrite1hTokens,
        usage.cacheReadTokens,
        usage.images,
        charges,
        now,
      ]),
    );
    if (row === undefined) return { kind: "not-found" };
    const state = toHoldState(row);
    if (state.resolution !== undefined) return { kind: "already-resolved", state };
    const { hold } = state;
    if (charge < 0n || charge > hold.amount) return { kind: "exceeds", state };
    if (row.resolved_now !== true) {
      // Another host resolved it after this statement's snapshot was taken.
      const current = await this.getHold(holdId);
      if (current?.resolution === undefined) throw new Error(`hold ${holdId} is neither open nor resolved`);
      return { kind: "already-resolved", state: current };
    }
    // What was just written, without reading it back.
    return {
      kind: "resolved",
      state: {
        hold,
        resolution: {
          holdId,
          status,
          amount: charge,
          usage: {
            inputTokens: usage.inputTokens,
            outputTokens: usage.outputTokens,
            cacheWrite5mTokens: usage.cacheWrite5mTokens,
            cacheWrite1hTokens: usage.cacheWrite1hTokens,
            cacheReadTokens: usage.cacheReadTokens,
            images: usage.images,
          },
          charges,
          resolvedAt: now,
        },
      },
    };
  }
}

/** The settlement backlog and settled totals of every chain that has any (as OnchainRepository). */
export async function readBacklog(db: Queryable): Promise<BacklogRow[]> {
  const rows = new Map<string, { -readonly [K in keyof BacklogRow]: BacklogRow[K] }>();
  const at = (chain: string) => {
    let row = rows.get(chain);
    if (row === undefined) {
      row = emptyBacklog(chain);
      rows.set(chain, row);
    }
    return row;
  };
  const older = (a: number, b: number) => (a === 0 ? b : Math.min(a, b));
  const intents = await exactRows(
    db,
    `SELECT chain, COUNT(*) AS calls, COALESCE(SUM(onchain_amount), 0) AS amount, MIN(created_at) AS oldest
       FROM settlement_intents WHERE transfer_id IS NULL AND onchain_amount > 0 GROUP BY chain`,
    [],
  );
  for (const r of intents) {
    const row = at(r.chain as string);
    row.unbatchedCalls = Number(r.calls);
    row.unbatchedAmount = r.amount as bigint;
    row.oldestAt = older(row.oldestAt, Number(r.oldest));
  }
  const transfers = await exactRows(
    db,
    `SELECT chain, kind, COUNT(*) AS n, COALESCE(SUM(amount), 0) AS amount, MIN(created_at) AS oldest,
            (SELECT last_error FROM chain_transfers e WHERE e.chain = t.chain AND e.status <> 'confirmed'
               AND e.last_error <> '' ORDER BY e.updated_at DESC LIMIT 1) AS last_error
       FROM chain_transfers t WHERE status <> 'confirmed' GROUP BY chain, kind`,
    [],
  );
  for (const r of transfers) {
    const row = at(r.chain as string);
    if (r.kind === "settlement") {
      row.openSettlements = Number(r.n);
      row.openSettlementAmount = r.amount as bigint;
    } else {
      row.openWithdrawals = Number(r.n);
      row.openWithdrawalAmount = r.amount as bigint;
    }
    row.oldestAt = older(row.oldestAt, Number(r.oldest));
    if (typeof r.last_error === "string" && r.last_error !== "") row.lastError = r.last_error;
  }
  const confirmed = await exactRows(
    db,
    `SELECT chain, COALESCE(SUM(amount), 0) AS amount FROM chain_transfers
      WHERE kind = 'settlement' AND status = 'confirmed' GROUP BY chain`,
    [],
  );
  for (const r of confirmed) at(r.chain as string).confirmedSettlementAmount = r.amount as bigint;
  const offchain = await exactRows(
    db,
    "SELECT chain, COALESCE(SUM(offchain_amount), 0) AS amount FROM settlement_intents GROUP BY chain",
    [],
  );
  for (const r of offchain) at(r.chain as string).offchainAmount = r.amount as bigint;
  return [...rows.values()].sort((a, b) => a.chain.localeCompare(b.chain));
}

/** The statement's answer when nothing was written (the transaction rolls back). */
class NotWritten extends Error {}
