import { channel } from "node:diagnostics_channel";
import type pg from "pg";
import {
  type CapRefusal,
  capRefusal,
  DAY_MS,
  periodStart,
  type SpendCap,
  spendDay,
} from "../../core/billing/spend-caps.js";
import {
  type BalanceRow,
  type CreditResult,
  type HoldState,
  heldOf,
  type LedgerStore,
  type NewCredit,
  type NewHold,
  type NewRaise,
  type OnchainStore,
  type PlaceHoldResult,
  type RaiseResult,
  type RaiseRow,
  type ResolutionStatus,
  type ResolveResult,
  type SettlementView,
  SYSTEM_REVENUE,
  type UsageCounts,
  ZERO_USAGE,
} from "../../core/ports/ledger.js";
import type { X402Store } from "../../core/ports/x402.js";
import { KeptResolutions } from "../shared/kept-resolutions.js";
import {
  raiseEntryId,
  sameCall,
  toBalance,
  toHoldState,
  toRaise,
  toSettlementView,
  toSpendCap,
} from "../shared/ledger-rows.js";
import type { Resolution, ResolutionSpool } from "../shared/resolution-spool.js";
import { type BatchAnswer, type BatchCount, Batches } from "./batches.js";
import { type BillingAnnouncements, BillingCache } from "./billing-cache.js";
import { inTransaction } from "./database.js";

import {
  BALANCE,
  CHECK_VIOLATION,
  exactRows,
  foldReleases,
  type Queryable,
  type Raw,
  REFUSAL_RETRIES,
  retrying,
  shardFor,
  sqlState,
} from "./queries.js";
import { pgKeptRefusal } from "./unreachable.js";
import { PgX402 } from "./x402.js";

/**
 * Each hold and settlement when it is sent and when its answer (committed) is back, in the
 * asking call's async context, on the channel the SQLite writer publishes on
 * (bench/timeline-hook.ts); silent while nobody subscribes.
 */
const writes = channel("tollgate:ledger:write");
let nextWrite = 1;

function published<T>(op: "placeHold" | "settle", answer: () => Promise<T>): Promise<T> {
  if (!writes.hasSubscribers) return answer();
  const id = nextWrite++;
  writes.publish({ op, id, phase: "sent" });
  const promise = answer();
  const done = () => writes.publish({ op, id, phase: "done" });
  promise.then(done, done);
  return promise;
}

const INT64_MAX_SQL = "9223372036854775807";

/** tollgate_place_hold's refusal when the funds it read were taken before it could lock them (migration 20). */
const FUNDS_MOVED = "TG402";

const HOLD_COLUMNS = `h.seq, h.id, h.account_id, h.request_id, h.key_id, h.chain, h.amount, h.call_kind, h.model,
  h.input_tokens, h.max_tokens, h.image_size, h.image_count, h.created_at,
  COALESCE((SELECT SUM(x.amount) FROM hold_raises x WHERE x.hold_id = h.id), 0) AS raised,
  r.status, r.amount AS settled_amount, r.input_tokens AS u_input, r.output_tokens AS u_output,
  r.cache_write_5m_tokens AS u_cw5m, r.cache_write_1h_tokens AS u_cw1h, r.cache_read_tokens AS u_read,
  r.images AS u_images, r.charges AS u_charges, r.endpoint AS u_endpoint, r.resolved_at`;

/**
 * A hold in one statement (no transaction, one round trip): `tollgate_place_hold` (migration 20).
 * The funds are read first without a lock: too few, and nothing is written and no row comes
 * back. Otherwise the hold's own rows are written, then the funds check is the conditional UPDATE
 * of the account's balance row (the lock every hold of the account waits on, taken last so that
 * it is held only to the commit); another hold having taken the funds in between fails the whole
 * statement with FUNDS_MOVED. An id already taken fails it on the primary key.
 */
const PLACE_HOLD = `
  SELECT seq FROM tollgate_place_hold($1::text, $2::text, $3::text, $4::text, $5::text, $6::bigint, $7::text,
                                      $8::text, $9::bigint, $10::bigint, $11::text, $12::integer, $13::bigint)`;

/**
 * Several holds in one statement, one transaction (migration 21): each item PLACE_HOLD's work in a
 * subtransaction of its own, taken in balance-row order; `failed` names an item's SQLSTATE when
 * it failed (nothing of it written), and it is then sent again alone (batches.ts).
 */
const PLACE_HOLDS = `
  SELECT item, seq, failed
    FROM tollgate_place_holds($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[],
                              $8::text[], $9::bigint[], $10::bigint[], $11::text[], $12::integer[], $13::bigint[])`;

/** The values of several statements' parameters, one array per parameter (integers as text). */
function columnsOf(items: readonly (readonly unknown[])[]): unknown[][] {
  return items[0]!.map((_, column) =>
    items.map((values) => {
      const value = values[column];
      return typeof value === "bigint" ? value.toString() : value;
    }),
  );
}

/**
 * A batch's rows (`item`, 1-based; `failed`, a SQLSTATE) as one answer per item: `answer` of the
 * item's row, or of undefined when the item has none.
 */
function answersOf<R>(
  count: number,
  rows: readonly Raw[],
  answer: (row: Raw | undefined) => R,
): BatchAnswer<R>[] {
  const byItem = new Map(rows.map((row) => [row.item as number, row]));
  return Array.from({ length: count }, (_, i) => {
    const row = byItem.get(i + 1);
    const failed = row?.failed as string | null | undefined;
    return failed == null ? { value: answer(row) } : { failed };
  });
}

/**
 * A hold some caps bound, in one statement: `tollgate_place_capped_hold` (migration 15) locks the
 * account's balance row, looks for the hold's id (`taken`), sums each cap's period after the lock
 * (`spent`, in the caps' order) and places the hold with tollgate_place_hold only when no cap
 * refuses it (`refused`).
 */
const PLACE_CAPPED_HOLD = `
  SELECT seq, taken, refused, spent
    FROM tollgate_place_capped_hold($1::text, $2::text, $3::text, $4::text, $5::text, $6::bigint, $7::text,
                                    $8::text, $9::bigint, $10::bigint, $11::text, $12::integer, $13::bigint,
                                    $14::bigint[], $15::text[], $16::bigint[])`;

/**
 * What a cap's period has spent: its days' rows, of every key for an account's cap, less what
 * settlements gave back beside them (spend_totals, migration 22).
 */
const SPENT_SINCE = `
  SELECT COALESCE(SUM(spent), 0) AS spent FROM spend_totals
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

/** A raise: the hold as raised, the cap that refused it, or neither (not written). */
interface Raising {
  readonly state?: HoldState | undefined;
  readonly refusal?: CapRefusal;
}

/**
 * Why a hold was not placed: the hold already there, and what the account has available now (its
 * totals: the balance row with the releases beside it, migration 22).
 */
const PLACE_HOLD_REFUSED = `
  SELECT ${HOLD_COLUMNS},
         (SELECT credits_posted - debits_posted - debits_pending FROM ledger_totals
           WHERE account = $2::text AND chain = $3::text) AS available
    FROM (SELECT 1) AS one
    LEFT JOIN holds h ON h.id = $1::text
    LEFT JOIN hold_resolutions r ON r.hold_id = h.id`;

/**
 * Settles or voids a hold in one statement, `tollgate_resolve` (migrations 20 and 23). The hold's
 * open-list row is its lock: whoever deletes it resolves the hold (a sweeper holding it makes
 * this wait, then find nothing; a raise holding it makes this wait, then see the raised total on
 * the row it deletes: `held` comes from that row), and the resolution's primary key still refuses
 * a second outcome. The rows only this hold has (its resolution, its charge) come first; then
 * the rows shared with the account's other settlements, in the order every writer takes them:
 * the account's releases beside its balance row (what the hold held, pending revenue and raises
 * included, released, and the charge taken: migrations 18 and 22), (settled with a charge) the
 * account's onchain backing, read FOR UPDATE so that the intent's onchain part is computed from
 * its newest version, as SettlementOutbox.record does, and what it gives back of the key's day
 * beside spend_days (migration 23). None is a row the account's holds lock, so a settlement
 * never waits for them; a hold waits for one only when it folds the releases onto its row (when
 * the row alone falls short). Each statement of the function reads the newest committed rows,
 * so the CHECK refusal of migrations 15-18's single statement (a raise it waited for made its
 * CHECKs refuse the snapshot's versions) no longer comes; the CHECK_VIOLATION retry below stays
 * as a guard, costing nothing while nothing is refused.
 */
const RESOLVE = `
  SELECT * FROM tollgate_resolve($1::text, $2::text, $3::bigint, $4::bigint, $5::bigint, $6::bigint, $7::bigint,
                                 $8::bigint, $9::integer, $10::text, $11::bigint, $12::text)`;

/** Several resolutions in one statement, one transaction (migration 21), as PLACE_HOLDS. */
const RESOLVE_HOLDS = `
  SELECT * FROM tollgate_resolve_holds($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[],
                                       $6::bigint[], $7::bigint[], $8::bigint[], $9::integer[], $10::text[],
                                       $11::bigint[], $12::text[])`;

/**
 * A hold's x402 payment is collected, or its collection begun: its hold is never expired (see
 * LedgerStore.expireHolds).
 */
const COLLECTED = `EXISTS (SELECT 1 FROM x402_payments p WHERE p.hold_id = o.hold_id
                     AND (p.status = 'collected' OR (p.status = 'authorised' AND p.collecting_at IS NOT NULL)))`;

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
 * A raise in one statement (no transaction, one round trip), in the lock order of a resolution:
 * the hold's open-list row first (FOR NO KEY UPDATE: a resolution or a sweeper deleting it
 * waits, or makes this wait and then find nothing; an x402 collection's FOR KEY SHARE does
 * not), then the funds check, PLACE_HOLD's conditional UPDATE of the account's balance row.
 * The same UPDATE adds the raise to the revenue the account's row holds for system:revenue
 * (migration 18). Every other row is written only if the funds moved: the raise (its primary
 * key refuses a pass raised before, failing the whole statement), the open hold's total, the
 * pending entry, and the hold's day in spend_days (created if the hold placed nothing).
 * Nothing updated: nothing written.
 */
const RAISE_HOLD = `
  WITH opened AS (
    SELECT h.* FROM open_holds o JOIN holds h ON h.id = o.hold_id
     WHERE o.hold_id = $1::text
       FOR NO KEY UPDATE OF o
  ), funds AS (
    UPDATE ledger_balances b
       SET debits_pending = b.debits_pending + $3::bigint, revenue_pending = b.revenue_pending + $3::bigint
      FROM opened
     WHERE b.account = opened.account_id AND b.chain = opened.chain AND b.shard = 0
       AND b.credits_posted - b.debits_posted - b.debits_pending >= $3::bigint
    RETURNING 1
  ), raise AS (
    INSERT INTO hold_raises (hold_id, pass, amount, created_at)
    SELECT $1::text, $2::integer, $3::bigint, $4::bigint FROM funds
    RETURNING 1
  ), total AS (
    UPDATE open_holds o SET raised = o.raised + $3::bigint FROM raise WHERE o.hold_id = $1::text
    RETURNING o.raised
  ), entry AS (
    INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id, memo,
                                created_at)
    SELECT $5::text, opened.chain, opened.account_id, '${SYSTEM_REVENUE}', $3::bigint, true, 'hold', $1::text, '',
           $4::bigint
      FROM opened, raise
  ), spent AS (
    INSERT INTO spend_days AS d (account_id, key_id, chain, day, spent)
    SELECT opened.account_id, opened.key_id, opened.chain, opened.created_at - opened.created_at % ${DAY_MS},
           $3::bigint
      FROM opened, raise
    ON CONFLICT (account_id, chain, key_id, day) DO UPDATE SET spent = d.spent + EXCLUDED.spent
  )
  SELECT opened.*, NULL AS status, total.raised FROM opened, total`;

/**
 * Why a raise was not written: the hold (with its outcome), the raise of that pass if there is
 * one, and what the account has available now on the hold's chain.
 */
const RAISE_REFUSED = `
  SELECT ${HOLD_COLUMNS}, x.amount AS raise_amount,
         (SELECT credits_posted - debits_posted - debits_pending FROM ledger_totals
           WHERE account = h.account_id AND chain = h.chain) AS available
    FROM holds h
    LEFT JOIN hold_resolutions r ON r.hold_id = h.id
    LEFT JOIN hold_raises x ON x.hold_id = h.id AND x.pass = $2::integer
   WHERE h.id = $1::text`;

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
    DELETE FROM open_holds o USING due WHERE o.hold_id = due.hold_id RETURNING o.hold_id, o.raised
  ), expired AS (
    INSERT INTO hold_resolutions (hold_id, status, amount, resolved_at)
    SELECT hold_id, 'expired', 0, $2::bigint FROM closed
    RETURNING hold_id
  )
  SELECT h.seq, h.account_id, h.key_id, h.chain, h.amount + closed.raised AS amount, h.created_at
    FROM holds h JOIN expired ON expired.hold_id = h.id JOIN closed ON closed.hold_id = h.id`;

/** Takes expired holds' amounts off their keys' days (after their balance rows were locked). */
const UNSPEND = `
  UPDATE spend_days d SET spent = d.spent - u.amount
    FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[]) AS u (account_id, chain, key_id, day, amount)
   WHERE d.account_id = u.account_id AND d.chain = u.chain AND d.key_id = u.key_id AND d.day = u.day`;

/** The expired holds' accounts' rows, in key order: the order every writer locks them in. */
const LOCK_BALANCES = `
  SELECT 1 FROM ledger_balances b
    JOIN unnest($1::text[], $2::text[]) AS k (account, chain)
      ON b.account = k.account AND b.chain = k.chain AND b.shard = 0
   ORDER BY b.account, b.chain
     FOR UPDATE OF b`;

/**
 * Takes expired holds' pending amounts off their accounts' rows: the debit, and the revenue the
 * row holds for system:revenue (migration 18), both on the one row.
 */
const RELEASE_PENDING = `
  UPDATE ledger_balances b
     SET debits_pending = b.debits_pending - d.amount, revenue_pending = b.revenue_pending - d.amount
    FROM unnest($1::text[], $2::text[], $3::bigint[]) AS d (account, chain, amount)
   WHERE b.account = d.account AND b.chain = d.chain AND b.shard = 0`;

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
     WHERE COALESCE((SELECT SUM(credits_posted) FROM ledger_totals WHERE account = $4::text AND chain = $2::text), 0)
             + $5::bigint <= ${INT64_MAX_SQL}
       AND COALESCE((SELECT SUM(debits_posted) FROM ledger_totals WHERE account = $3::text AND chain = $2::text), 0)
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

/**
 * The ledger and onchain ports over PostgreSQL, for several gateway hosts on one database. Every
 * write is one statement or one READ COMMITTED transaction whose correctness rests on row locks
 * and constraints, not on isolation: a hold's funds check is a conditional UPDATE of the
 * account's balance row (the lock its holds serialise on, with the `available_never_negative`
 * CHECK behind it), a hold resolves once (its open-list row, then the resolution's primary
 * key), and a credit or withdrawal is idempotent by its entry or transfer id, an x402 payment by
 * its payment id. The calls' path (placeHold, settle, void, authoriseX402) is one statement
 * each: one round trip; the holds and resolutions that arrive while one of their kind is in
 * flight go together in one statement (batches.ts, migration 21). The pool belongs to whoever opened it; {@link close} leaves it open.
 *
 * The ledger port's methods are here; the onchain port's (onchain.ts) and x402's (x402.ts) are
 * its base classes, one file per port, so one object answers all three without forwarding.
 */
export class PgLedger extends PgX402 implements LedgerStore, OnchainStore, X402Store {
  /**
   * Settles and voids the server refused (its disk full, or it could not be reached), written
   * when it takes them again; with a spool ({@link keepIn}), on this host's disk meanwhile.
   * Another host's sweeper may still void such a hold once it expires (docs/store.md).
   */
  readonly #kept = new KeptResolutions(
    (r: Resolution) =>
      r.kind === "settle"
        ? this.resolve(r.holdId, "settled", r.charge, r.usage, r.now, r.charges)
        : this.resolve(r.holdId, r.status, 0n, ZERO_USAGE, r.now, ""),
    pgKeptRefusal,
  );

  /** Uncapped holds, sent together while earlier ones are in flight (batches.ts). */
  readonly #holds = new Batches<readonly unknown[], Placement>(
    async (values) => {
      const [placed] = await exactRows(this.pool, PLACE_HOLD, values, "tollgate_place_hold");
      return { seq: placed?.seq as bigint | undefined };
    },
    async (items) => {
      const rows = await exactRows(this.pool, PLACE_HOLDS, columnsOf(items), "tollgate_place_holds");
      return answersOf(items.length, rows, (row) => ({
        seq: (row?.seq as bigint | null | undefined) ?? undefined,
      }));
    },
  );

  /** Resolutions (RESOLVE), sent together while earlier ones are in flight (batches.ts). */
  readonly #resolutions = new Batches<readonly unknown[], Raw | undefined>(
    async (values) =>
      (
        await retrying(
          () => exactRows(this.pool, RESOLVE, values, "tollgate_resolve"),
          // A raise of the hold that committed after this statement's snapshot: see RESOLVE.
          [CHECK_VIOLATION],
        )
      )[0],
    async (items) => {
      const rows = await exactRows(this.pool, RESOLVE_HOLDS, columnsOf(items), "tollgate_resolve_holds");
      return answersOf(items.length, rows, (row) => row);
    },
  );

  /** The batches of two or more this ledger has sent, and the calls they carried (batches.ts). */
  get batchesSent(): { holds: BatchCount; resolutions: BatchCount } {
    return { holds: { ...this.#holds.sent }, resolutions: { ...this.#resolutions.sent } };
  }

  /** An account's billing row and caps, kept while `announcements` arrive (a serving host). */
  readonly #cache: BillingCache | undefined;

  constructor(pool: pg.Pool, announcements?: BillingAnnouncements) {
    super(pool);
    this.#cache = announcements === undefined ? undefined : new BillingCache(announcements);
  }

  async accountExists(accountId: string): Promise<boolean> {
    return (await this.pool.query("SELECT 1 FROM accounts WHERE id = $1", [accountId])).rowCount === 1;
  }

  /** From the billing cache when it has the account (see BillingCache), else one read. */
  async billingAccount(accountId: string): Promise<{ defaultChain: string | undefined } | undefined> {
    const cached = this.#cache?.billing(accountId);
    if (cached !== undefined) return cached;
    const mark = this.#cache?.mark() ?? 0;
    const { rows } = await this.pool.query<{ default_chain: string | null }>(
      `SELECT b.default_chain FROM accounts a LEFT JOIN billing_accounts b ON b.account_id = a.id WHERE a.id = $1`,
      [accountId],
    );
    const row = rows[0];
    if (row === undefined) return undefined;
    const billing = { defaultChain: row.default_chain ?? undefined };
    this.#cache?.keepBilling(accountId, mark, billing);
    return billing;
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
    // Bites on this host's next call; other hosts' caches hear of it at the commit (migration 15).
    this.#cache?.forget(accountId);
  }

  /**
   * A system account's totals are the sum of its shard rows (system:revenue's with every
   * account's revenue columns); a user's, its one row (ledger_totals, migration 18).
   */
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
         FROM ledger_totals WHERE account = $1::text GROUP BY account, chain ORDER BY chain COLLATE "C"`,
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
  placeHold(hold: NewHold): Promise<PlaceHoldResult> {
    return published("placeHold", () => this.placeOnce(hold));
  }

  private async placeOnce(hold: NewHold): Promise<PlaceHoldResult> {
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
            state: { hold: { ...hold, raised: 0n, seq: Number(placed.seq) }, resolution: undefined },
          };
        }
      } catch (error) {
        const state = sqlState(error);
        if (state !== "23505" && state !== FUNDS_MOVED) throw error;
        if (state === "23505") taken = error;
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

  /**
   * PLACE_HOLD alone, or PLACE_HOLDS with the holds that arrived while another was in flight: one
   * statement, one round trip either way (no caps bound the hold).
   */
  private placeUncapped(values: readonly unknown[]): Promise<Placement> {
    return this.#holds.run(values);
  }

  /**
   * A hold some caps bound, in one statement (PLACE_CAPPED_HOLD): the account's balance row on
   * the chain locked first (the lock every hold of the account there waits on, PLACE_HOLD's
   * included), then the caps' periods summed in queries that each see every hold placed before
   * the lock was granted: parallel holds cannot run past a cap. The refusal is the core's
   * (capRefusal) over the sums the function read. No balance row: no funds, and nothing placed.
   */
  private async placeWithinCaps(
    hold: NewHold,
    caps: readonly SpendCap[],
    values: readonly unknown[],
  ): Promise<Placement> {
    const [row] = await exactRows(
      this.pool,
      PLACE_CAPPED_HOLD,
      [
        ...values,
        caps.map((cap) => periodStart(cap.period, hold.createdAt)),
        caps.map((cap) => cap.keyId),
        caps.map((cap) => cap.amount.toString()),
      ],
      "tollgate_place_capped_hold",
    );
    // A retry of a hold already placed is answered by the refusal path, not counted against itself.
    if (row === undefined || row.taken === true) return {};
    if (row.refused === true) {
      const spent = new Map(caps.map((cap, i) => [cap, BigInt((row.spent as string[])[i]!)]));
      const refusal = capRefusal(caps, hold.amount, hold.createdAt, (cap) => spent.get(cap)!);
      if (refusal === undefined) throw new Error(`hold ${hold.id}: refused by a cap that leaves room`);
      return { refusal };
    }
    return { seq: (row.seq as bigint | null) ?? undefined };
  }

  /**
   * One statement when it raises (see RAISE_HOLD), after one read of the caps that bound the
   * hold; a second read when it does not, to answer from what is committed now (`existing`,
   * `conflict`, `not-found`, `not-open` or `insufficient`). Funds that appeared between the two
   * make it try again, as placeHold does.
   */
  async raiseHold(raise: NewRaise): Promise<RaiseResult> {
    const values = [raise.holdId, raise.pass, raise.amount, raise.createdAt, raiseEntryId(raise)];
    const caps = await this.capsForHold(raise.holdId);
    for (let attempt = 1; ; attempt++) {
      let taken: unknown;
      try {
        const raised = await retrying(() =>
          caps.length === 0 ? this.raiseUncapped(values) : this.raiseWithinCaps(raise, caps, values),
        );
        if (raised.refusal !== undefined) return { kind: "capped", refusal: raised.refusal };
        if (raised.state !== undefined) return { kind: "raised", state: raised.state };
      } catch (error) {
        if (sqlState(error) !== "23505") throw error;
        taken = error;
      }
      const [row] = await exactRows(this.pool, RAISE_REFUSED, [raise.holdId, raise.pass]);
      if (row === undefined) return { kind: "not-found" };
      const state = toHoldState(row);
      if (row.raise_amount !== null) {
        return row.raise_amount === raise.amount ? { kind: "existing", state } : { kind: "conflict" };
      }
      if (taken !== undefined) throw taken;
      if (state.resolution !== undefined) return { kind: "not-open", state };
      const available = (row.available as bigint | null) ?? 0n;
      if (raise.amount > available || attempt >= REFUSAL_RETRIES) return { kind: "insufficient", available };
      // The account's totals cover it and its row alone did not: settlements' releases onto the row first.
      await foldReleases(this.pool, state.hold.accountId, state.hold.chain);
    }
  }

  async holdRaises(holdId: string): Promise<RaiseRow[]> {
    const rows = await exactRows(
      this.pool,
      "SELECT * FROM hold_raises WHERE hold_id = $1::text ORDER BY pass",
      [holdId],
    );
    return rows.map(toRaise);
  }

  /** RAISE_HOLD alone: one statement, one round trip (no caps bound the hold). */
  private async raiseUncapped(values: readonly unknown[]): Promise<Raising> {
    const [row] = await exactRows(this.pool, RAISE_HOLD, values, "tollgate_raise_hold");
    return { state: row === undefined ? undefined : toHoldState(row) };
  }

  /**
   * A raise some caps bound, in one READ COMMITTED transaction, in RAISE_HOLD's lock order: the
   * hold's open-list row (no longer open: nothing to raise), then the account's balance row on
   * the chain (every hold and raise of the account there waits on it, as placeWithinCaps), then
   * the caps' periods as of the hold, summed in statements that see every hold and raise
   * committed before the locks were granted; then RAISE_HOLD.
   */
  private raiseWithinCaps(raise: NewRaise, caps: readonly SpendCap[], values: readonly unknown[]) {
    return inTransaction(this.pool, async (client): Promise<Raising> => {
      const [hold] = await exactRows(
        client,
        `SELECT h.account_id, h.chain, h.created_at FROM open_holds o JOIN holds h ON h.id = o.hold_id
          WHERE o.hold_id = $1::text FOR NO KEY UPDATE OF o`,
        [raise.holdId],
      );
      if (hold === undefined) return {};
      await client.query(
        "SELECT 1 FROM ledger_balances WHERE account = $1 AND chain = $2 AND shard = 0 FOR NO KEY UPDATE",
        [hold.account_id, hold.chain],
      );
      // A retry of a raise already made is answered by the refusal path, not counted against itself.
      const taken = await client.query("SELECT 1 FROM hold_raises WHERE hold_id = $1 AND pass = $2", [
        raise.holdId,
        raise.pass,
      ]);
      if (taken.rowCount !== 0) return {};
      const at = Number(hold.created_at);
      const spent = new Map<SpendCap, bigint>();
      for (const cap of caps) spent.set(cap, await capSpentOn(client, cap, periodStart(cap.period, at)));
      const refusal = capRefusal(caps, raise.amount, at, (cap) => spent.get(cap)!);
      if (refusal !== undefined) return { refusal };
      const [row] = await exactRows(client, RAISE_HOLD, values);
      return { state: row === undefined ? undefined : toHoldState(row) };
    });
  }

  /** The caps that bound a hold's raises: those of its account and key on its chain. */
  private async capsForHold(holdId: string): Promise<SpendCap[]> {
    const rows = await exactRows(
      this.pool,
      `SELECT c.* FROM holds h
         JOIN spend_caps c ON c.account_id = h.account_id AND c.chain = h.chain AND c.key_id IN ('', h.key_id)
        WHERE h.id = $1::text`,
      [holdId],
    );
    return rows.map(toSpendCap);
  }

  /**
   * The caps that bound a hold: the account's own and its key's, on the hold's chain; from the
   * billing cache when it has them.
   */
  private async capsFor(hold: NewHold): Promise<SpendCap[]> {
    const cached = this.#cache?.caps(hold.accountId, hold.chain, hold.keyId);
    if (cached !== undefined) return cached;
    const mark = this.#cache?.mark() ?? 0;
    const rows = await exactRows(
      this.pool,
      "SELECT * FROM spend_caps WHERE account_id = $1 AND chain = $2 AND key_id IN ('', $3)",
      [hold.accountId, hold.chain, hold.keyId],
    );
    const caps = rows.map(toSpendCap);
    this.#cache?.keepCaps(hold.accountId, hold.chain, hold.keyId, mark, caps);
    return caps;
  }

  async setSpendCap(cap: SpendCap, now: number): Promise<void> {
    await this.pool.query(
      `INSERT INTO spend_caps (account_id, key_id, chain, period, amount, updated_at) VALUES ($1, $2, $3, $4, $5, $6)
       ON CONFLICT (account_id, key_id, chain, period)
       DO UPDATE SET amount = EXCLUDED.amount, updated_at = EXCLUDED.updated_at`,
      [cap.accountId, cap.keyId, cap.chain, cap.period, cap.amount, now],
    );
    this.#cache?.forget(cap.accountId);
  }

  async clearSpendCap(cap: Omit<SpendCap, "amount">): Promise<boolean> {
    const { rowCount } = await this.pool.query(
      "DELETE FROM spend_caps WHERE account_id = $1 AND key_id = $2 AND chain = $3 AND period = $4",
      [cap.accountId, cap.keyId, cap.chain, cap.period],
    );
    this.#cache?.forget(cap.accountId);
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
   * Settles, or keeps the settle for a retry when the server refuses it (53100 disk_full, or
   * unreachable: see KeptResolutions and unreachable.ts); so does {@link void}.
   */
  settle(
    holdId: string,
    charge: bigint,
    usage: UsageCounts,
    now: number,
    charges: string,
  ): Promise<ResolveResult> {
    return published("settle", () => this.#kept.run({ kind: "settle", holdId, charge, usage, now, charges }));
  }

  void(holdId: string, status: "released" | "expired", now: number): Promise<ResolveResult> {
    return this.#kept.run({ kind: "void", holdId, status, now });
  }

  /**
   * Keeps the resolutions the server refuses in `spool` too, and writes (or keeps) the ones a
   * previous process on this host left there: a serving host's, before it serves or sweeps.
   */
  keepIn(spool: ResolutionSpool): Promise<void> {
    return this.#kept.useSpool(spool);
  }

  /**
   * One transaction, off the calls' path: lock the due holds (LOCK_DUE), claim those whose x402
   * payment is still not collected (CLAIM_EXPIRED), then lock their accounts' balance rows in
   * key order and release their pending amounts (the revenue side is on those rows too:
   * migration 18). Two hosts' sweepers claim disjoint holds and never wait on each other in a
   * cycle.
   */
  async expireHolds(cutoff: number, now: number, limit: number): Promise<number> {
    // This host's kept resolutions first: a hold whose settlement waits for space is not voided.
    await this.#kept.flush();
    return retrying(() =>
      inTransaction(this.pool, async (client) => {
        const due = await client.query<{ hold_id: string }>(LOCK_DUE, [cutoff, limit]);
        if (due.rows.length === 0) return 0;
        const expired = await exactRows(client, CLAIM_EXPIRED, [due.rows.map((r) => r.hold_id), now]);
        const deltas = new Map<string, { account: string; chain: string; amount: bigint }>();
        for (const h of expired) {
          const amount = h.amount as bigint;
          if (amount === 0n) continue;
          const account = h.account_id as string;
          const chain = h.chain as string;
          const id = `${account}\u0000${chain}`;
          const delta = deltas.get(id) ?? { account, chain, amount: 0n };
          delta.amount += amount;
          deltas.set(id, delta);
        }
        if (deltas.size > 0) {
          const rows = [...deltas.values()];
          const keys = [rows.map((d) => d.account), rows.map((d) => d.chain)];
          await client.query(LOCK_BALANCES, keys);
          const released = await client.query(RELEASE_PENDING, [
            ...keys,
            rows.map((d) => d.amount.toString()),
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

  /**
   * Tries the kept resolutions one last time (the spool keeps those still refused) and closes
   * the spool; nothing else to finish: every other write answered
   * after its commit, and the pool is its opener's.
   */
  async close(): Promise<void> {
    await this.#kept.close();
  }

  private async resolve(
    holdId: string,
    status: ResolutionStatus,
    charge: bigint,
    usage: UsageCounts,
    now: number,
    charges: string,
  ): Promise<ResolveResult> {
    const row = await this.#resolutions.run([
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
      usage.endpoint ?? "",
    ]);
    if (row === undefined) return { kind: "not-found" };
    const state = toHoldState(row);
    if (row.resolved_now !== true) {
      if (state.resolution !== undefined) return { kind: "already-resolved", state };
      if (charge < 0n || charge > heldOf(state.hold)) return { kind: "exceeds", state };
      // Another host resolved it after this statement's snapshot was taken.
      const current = await this.getHold(holdId);
      if (current?.resolution === undefined) throw new Error(`hold ${holdId} is neither open nor resolved`);
      return { kind: "already-resolved", state: current };
    }
    // What was just written, without reading it back; the raises as the deleted open-list row had
    // them (a raise that committed after this statement's snapshot is among them).
    return {
      kind: "resolved",
      state: {
        hold: { ...state.hold, raised: row.raised_now as bigint },
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
            ...(usage.endpoint ? { endpoint: usage.endpoint } : {}),
          },
          charges,
          resolvedAt: now,
        },
      },
    };
  }
}
