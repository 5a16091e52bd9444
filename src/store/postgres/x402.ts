import {
  type NewX402Payment,
  SYSTEM_X402,
  type X402Closing,
  type X402Collection,
  type X402PaymentRow,
  type X402Status,
  type X402Store,
} from "../../core/ports/x402.js";
import { toX402Payment } from "../shared/ledger-rows.js";
import {
  x402ClosingRefusal,
  x402CollectionRefusal,
  x402CreditEntryId,
  x402ReturnEntryId,
  x402ReturnRefusal,
} from "../shared/x402-rules.js";
import { inTransaction } from "./database.js";
import { PgOnchain } from "./onchain.js";
import { BALANCE, exactRows, retrying, sqlState } from "./queries.js";

/**
 * An x402 payment's authorisation in one statement: the payment row (its id the replay guard: a
 * payment seen before inserts nothing, and nothing else is written), its credit entry, then the
 * account's own row (an x402 payment's account is a user's: one row, shard 0), credited, with
 * the same amount added to x402_in, system:x402's debit kept on that row (migration 19): no row
 * another account's payment writes. A hold id already paid for fails the whole statement on its
 * unique key.
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
  )
  INSERT INTO ledger_balances AS b (account, chain, shard, may_overdraw, credits_posted, x402_in)
  SELECT $3::text, $4::text, 0, false, $7::bigint, $7::bigint FROM payment
  ON CONFLICT (account, chain, shard) DO UPDATE
    SET credits_posted = b.credits_posted + EXCLUDED.credits_posted, x402_in = b.x402_in + EXCLUDED.x402_in
  RETURNING b.account`;

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
 * its locked row; the same UPDATE adds the return to x402_out, system:x402's credit kept on the
 * account's row: migration 19) and the return entry. Answers, when the
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
    UPDATE ledger_balances b SET debits_posted = b.debits_posted + $7::bigint, x402_out = b.x402_out + $7::bigint
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
  )
  SELECT payment.account_id, payment.chain, payment.authorised, payment.status, payment.settled, payment.tx_hash,
         EXISTS (SELECT 1 FROM closed) AS closed, EXISTS (SELECT 1 FROM debited) AS debited
    FROM payment`;

/** The payer's releases on the payment's chain taken onto its balance row (migration 22). */
const FOLD_PAYERS_RELEASES = `
  SELECT tollgate_fold_releases(account_id, chain) FROM x402_payments WHERE id = $1::text`;

/**
 * The x402 port over PostgreSQL: payments authorised, collected and closed, each write one
 * statement or one transaction idempotent by its payment id. Stacked on {@link PgOnchain} so
 * that PgLedger (ledger.ts) answers every port of the ledger on one pool without forwarding.
 */
export class PgX402 extends PgOnchain implements X402Store {
  /**
   * One statement (AUTHORISE_X402). A unique key refusing it means the same payment raced in from
   * another connection (answered `replayed` once its row is there) or a hold already paid for by
   * another payment (a bug: thrown).
   */
  async authoriseX402(payment: NewX402Payment): Promise<"authorised" | "replayed"> {
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
   * from `not-found`. A return is debited from the account's balance row alone, so the
   * releases of its settlements (its own hold's among them) are taken onto that row first, in a
   * statement of their own (migration 22).
   */
  async closeX402(closing: X402Closing): Promise<"closed" | "already-closed" | "not-found"> {
    if (closing.returned > 0n) await this.pool.query(FOLD_PAYERS_RELEASES, [closing.id]);
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

  /**
   * One statement. The sweeper's claim (ledger.ts, CLAIM_EXPIRED) reads the mark afresh once it
   * holds the hold's row, so a mark committed before that is seen and the hold skipped.
   */
  async markX402Collecting(id: string, now: number): Promise<"marked" | "not-authorised" | "not-found"> {
    const marked = await retrying(() =>
      this.pool.query(
        `UPDATE x402_payments SET collecting_at = $2::bigint WHERE id = $1::text AND status = 'authorised'`,
        [id, now],
      ),
    );
    if (marked.rowCount === 1) return "marked";
    const seen = await this.pool.query("SELECT 1 FROM x402_payments WHERE id = $1", [id]);
    return seen.rowCount === 1 ? "not-authorised" : "not-found";
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
}
