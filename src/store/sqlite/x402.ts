import { availableOf } from "../../core/ports/ledger.js";
import {
  type NewX402Payment,
  SYSTEM_X402,
  type X402Closing,
  type X402Collection,
  type X402PaymentRow,
} from "../../core/ports/x402.js";
import { type Raw, toX402Payment } from "../shared/ledger-rows.js";
import {
  x402ClosingRefusal,
  x402CollectionRefusal,
  x402CreditEntryId,
  x402ReturnEntryId,
  x402ReturnRefusal,
} from "../shared/x402-rules.js";
import type { Db } from "./database.js";
import type { LedgerRepository } from "./ledger.js";

/**
 * The x402 payments in SQLite. A payment's row and its ledger entries commit together: money
 * moves through {@link LedgerRepository.post} inside this repository's transactions (kind
 * 'x402', entries {@link x402CreditEntryId} and {@link x402ReturnEntryId}).
 */
export class X402Repository {
  private readonly s;
  private readonly tx;

  constructor(
    db: Db,
    private readonly ledger: LedgerRepository,
  ) {
    const money = <T extends unknown[] = unknown[]>(sql: string) =>
      db.prepare<T, Raw>(sql).safeIntegers(true);
    this.s = {
      byId: money<[string]>("SELECT * FROM x402_payments WHERE id = ?"),
      byHold: money<[string]>("SELECT * FROM x402_payments WHERE hold_id = ?"),
      // status written out as the partial index x402_payments_open states it, so the planner
      // sees the index fits without looking at bound values; id orders payments created in the
      // same millisecond.
      open: money<[number, number]>(
        `SELECT * FROM x402_payments WHERE status IN ('authorised', 'collected') AND created_at < ?
          ORDER BY created_at, id LIMIT ?`,
      ),
      // Written out as the partial index x402_payments_failed states it, as open is.
      failed: money<[string, number]>(
        `SELECT * FROM x402_payments WHERE payer = ? AND status = 'failed' AND cleared_at IS NULL
          ORDER BY created_at, id LIMIT ?`,
      ),
      clearFailed: db.prepare<[number, string]>(
        `UPDATE x402_payments SET cleared_at = ?
          WHERE payer = ? AND status = 'failed' AND cleared_at IS NULL`,
      ),
      collect: db.prepare<[bigint, string, number, string]>(
        `UPDATE x402_payments SET status = 'collected', settled = ?, tx_hash = ?, collected_at = ?
          WHERE id = ? AND status = 'authorised'`,
      ),
      markCollecting: db.prepare<[number, string]>(
        "UPDATE x402_payments SET collecting_at = ? WHERE id = ? AND status = 'authorised'",
      ),
      insert: db.prepare<[string, string, string, string, string, string, bigint, string, number]>(
        `INSERT INTO x402_payments (id, hold_id, account_id, chain, scheme, payer, authorised, payload, status,
                                    created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'authorised', ?)`,
      ),
      close: db.prepare<[string, bigint, string, string, number, string]>(
        `UPDATE x402_payments SET status = ?, settled = ?, tx_hash = ?, error = ?, closed_at = ?
          WHERE id = ? AND status IN ('authorised', 'collected')`,
      ),
    };
    this.tx = {
      authorise: db.transaction((payment: NewX402Payment) => this.authoriseTx(payment)),
      collect: db.transaction((collection: X402Collection) => this.collectTx(collection)),
      markCollecting: db.transaction((id: string, now: number) => this.markCollectingTx(id, now)),
      close: db.transaction((closing: X402Closing) => this.closeTx(closing)),
      clearFailed: db.transaction((payer: string, now: number) => this.s.clearFailed.run(now, payer).changes),
    };
  }

  /**
   * Records the payment and credits what it authorises, in one transaction; a payment id seen
   * before writes nothing. A hold already paid for by another payment is a bug: it throws.
   */
  authorise(payment: NewX402Payment): "authorised" | "replayed" {
    return this.tx.authorise.immediate(payment);
  }

  /** Records an authorised payment's collection onchain, in one transaction; no money moves. */
  collect(collection: X402Collection): "recorded" | "not-authorised" | "not-found" {
    return this.tx.collect.immediate(collection);
  }

  /** Marks that a collection of an authorised payment is begun, in one transaction; no money moves. */
  markCollecting(id: string, now: number): "marked" | "not-authorised" | "not-found" {
    return this.tx.markCollecting.immediate(id, now);
  }

  /** Closes an authorised or collected payment and posts its return (when > 0), in one transaction. */
  close(closing: X402Closing): "closed" | "already-closed" | "not-found" {
    return this.tx.close.immediate(closing);
  }

  /** Clears every failed, not yet cleared payment of `payer`; answers how many. */
  clearFailed(payer: string, now: number): number {
    return this.tx.clearFailed.immediate(payer, now);
  }

  /** The failed payments of `payer` no operator cleared, oldest first, at most `limit`. */
  failed(payer: string, limit: number): X402PaymentRow[] {
    return this.s.failed.all(payer, limit).map(toX402Payment);
  }

  /** The payments of these holds, by hold id. */
  /** The payment with this id, in any status. */
  payment(id: string): X402PaymentRow | undefined {
    const row = this.s.byId.get(id);
    return row === undefined ? undefined : toX402Payment(row);
  }

  payments(holdIds: readonly string[]): Map<string, X402PaymentRow> {
    const out = new Map<string, X402PaymentRow>();
    for (const id of holdIds) {
      const row = this.s.byHold.get(id);
      if (row !== undefined) out.set(id, toX402Payment(row));
    }
    return out;
  }

  /** The payments still authorised or collected, created before `createdBefore`, oldest first, at most `limit`. */
  open(createdBefore: number, limit: number): X402PaymentRow[] {
    return this.s.open.all(createdBefore, limit).map(toX402Payment);
  }

  private authoriseTx(p: NewX402Payment): "authorised" | "replayed" {
    if (this.s.byId.get(p.id) !== undefined) return "replayed";
    this.s.insert.run(
      p.id,
      p.holdId,
      p.accountId,
      p.chain,
      p.scheme,
      p.payer,
      p.authorised,
      p.payload,
      p.createdAt,
    );
    this.ledger.post({
      id: x402CreditEntryId(p.id),
      chain: p.chain,
      debit: SYSTEM_X402,
      credit: p.accountId,
      amount: p.authorised,
      kind: "x402",
      memo: "",
      createdAt: p.createdAt,
    });
    return "authorised";
  }

  private collectTx(c: X402Collection): "recorded" | "not-authorised" | "not-found" {
    const row = this.s.byId.get(c.id);
    if (row === undefined) return "not-found";
    const payment = toX402Payment(row);
    if (payment.status !== "authorised") return "not-authorised";
    const refusal = x402CollectionRefusal(c, payment.authorised);
    if (refusal !== undefined) throw refusal;
    this.s.collect.run(c.collected, c.txHash, c.now, c.id);
    return "recorded";
  }

  private markCollectingTx(id: string, now: number): "marked" | "not-authorised" | "not-found" {
    if (this.s.markCollecting.run(now, id).changes === 1) return "marked";
    return this.s.byId.get(id) === undefined ? "not-found" : "not-authorised";
  }

  private closeTx(c: X402Closing): "closed" | "already-closed" | "not-found" {
    const row = this.s.byId.get(c.id);
    if (row === undefined) return "not-found";
    const payment = toX402Payment(row);
    if (payment.status !== "authorised" && payment.status !== "collected") return "already-closed";
    const wrong = x402ClosingRefusal(c, payment.status, payment.settled, payment.txHash);
    if (wrong !== undefined) throw wrong;
    const available = availableOf(this.ledger.balance(payment.accountId, payment.chain));
    const refusal = x402ReturnRefusal(c.id, c.returned, payment.authorised, available);
    if (refusal !== undefined) throw refusal;
    this.s.close.run(c.status, c.settled, c.txHash, c.error, c.now, c.id);
    if (c.returned > 0n) {
      this.ledger.post({
        id: x402ReturnEntryId(c.id),
        chain: payment.chain,
        debit: payment.accountId,
        credit: SYSTEM_X402,
        amount: c.returned,
        kind: "x402",
        memo: "",
        createdAt: c.now,
      });
    }
    return "closed";
  }
}
