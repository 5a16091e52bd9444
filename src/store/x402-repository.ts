import { availableOf } from "../core/ports/ledger.js";
import {
  type NewX402Payment,
  SYSTEM_X402,
  type X402Closing,
  type X402PaymentRow,
} from "../core/ports/x402.js";
import type { Db } from "./database.js";
import type { LedgerRepository } from "./ledger-repository.js";
import { type Raw, toX402Payment } from "./ledger-rows.js";

/** The ledger entry that credits an x402 payment to its account, from {@link SYSTEM_X402}. */
export function x402CreditEntryId(paymentId: string): string {
  return `x402_${paymentId}`;
}

/** The ledger entry that returns what a payment's call did not spend to {@link SYSTEM_X402}. */
export function x402ReturnEntryId(paymentId: string): string {
  return `x402ret_${paymentId}`;
}

/**
 * Why a closing cannot be written, or undefined when it can: a return is never negative, never
 * more than the payment brought in, and never more than the account has available (the
 * ledger never goes below zero). Each is a caller's bug, not an outcome: it throws.
 */
export function x402ReturnRefusal(
  paymentId: string,
  returned: bigint,
  authorised: bigint,
  available: bigint,
): Error | undefined {
  if (returned < 0n) return new Error(`x402 payment ${paymentId}: a negative return (${returned})`);
  if (returned > authorised)
    return new Error(`x402 payment ${paymentId}: returning ${returned}, more than its ${authorised}`);
  if (returned > available)
    return new Error(
      `x402 payment ${paymentId}: returning ${returned}, the account has ${available} available`,
    );
  return undefined;
}

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
        `SELECT * FROM x402_payments WHERE status = 'authorised' AND created_at < ?
          ORDER BY created_at, id LIMIT ?`,
      ),
      insert: db.prepare<[string, string, string, string, string, string, bigint, string, number]>(
        `INSERT INTO x402_payments (id, hold_id, account_id, chain, scheme, payer, authorised, payload, status,
                                    created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'authorised', ?)`,
      ),
      close: db.prepare<[string, bigint, string, string, number, string]>(
        `UPDATE x402_payments SET status = ?, settled = ?, tx_hash = ?, error = ?, closed_at = ?
          WHERE id = ? AND status = 'authorised'`,
      ),
    };
    this.tx = {
      authorise: db.transaction((payment: NewX402Payment) => this.authoriseTx(payment)),
      close: db.transaction((closing: X402Closing) => this.closeTx(closing)),
    };
  }

  /**
   * Records the payment and credits what it authorises, in one transaction; a payment id seen
   * before writes nothing. A hold already paid for by another payment is a bug: it throws.
   */
  authorise(payment: NewX402Payment): "authorised" | "replayed" {
    return this.tx.authorise.immediate(payment);
  }

  /** Closes an authorised payment and posts its return (when > 0), in one transaction. */
  close(closing: X402Closing): "closed" | "already-closed" | "not-found" {
    return this.tx.close.immediate(closing);
  }

  /** The payments of these holds, by hold id. */
  payments(holdIds: readonly string[]): Map<string, X402PaymentRow> {
    const out = new Map<string, X402PaymentRow>();
    for (const id of holdIds) {
      const row = this.s.byHold.get(id);
      if (row !== undefined) out.set(id, toX402Payment(row));
    }
    return out;
  }

  /** The payments still authorised that were created before `createdBefore`, oldest first, at most `limit`. */
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

  private closeTx(c: X402Closing): "closed" | "already-closed" | "not-found" {
    const row = this.s.byId.get(c.id);
    if (row === undefined) return "not-found";
    const payment = toX402Payment(row);
    if (payment.status !== "authorised") return "already-closed";
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
