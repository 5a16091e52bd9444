import { INT64_MAX } from "../../core/billing/money.js";
import {
  availableOf,
  type BacklogRow,
  type DepositRow,
  type DepositToCredit,
  emptyBacklog,
  type NewWithdrawal,
  SYSTEM_DEPOSITS,
  SYSTEM_WITHDRAWAL_FEES,
  SYSTEM_WITHDRAWALS,
  type TransferRow,
  type WithdrawResult,
} from "../../core/ports/ledger.js";
import { type Raw, toTransfer } from "../shared/ledger-rows.js";
import type { Db } from "./database.js";
import type { LedgerRepository } from "./ledger.js";

/**
 * The onchain side of the ledger in SQLite: deposit addresses, watcher cursors and credited
 * deposits, the settlement outbox's transfers, and withdrawals. Money moves through
 * {@link LedgerRepository.post} inside this repository's transactions, so every ledger entry
 * commits together with the onchain record that justifies it.
 */
export class OnchainRepository {
  private readonly s;
  private readonly tx;

  constructor(
    db: Db,
    private readonly ledger: LedgerRepository,
  ) {
    const money = <T extends unknown[] = unknown[]>(sql: string) =>
      db.prepare<T, Raw>(sql).safeIntegers(true);
    this.s = {
      insertAddress: db.prepare<[string, string, string, number]>(
        "INSERT INTO deposit_addresses (family, address, account_id, created_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
      ),
      addressOf: db.prepare<[string, string], { address: string }>(
        "SELECT address FROM deposit_addresses WHERE account_id = ? AND family = ?",
      ),
      addressesSince: db.prepare<[string, number], { seq: number; address: string; account_id: string }>(
        "SELECT seq, address, account_id FROM deposit_addresses WHERE family = ? AND seq > ? ORDER BY seq",
      ),
      cursor: money<[string]>("SELECT next_position FROM chain_cursors WHERE chain = ?"),
      setCursor: db.prepare<[string, bigint, number]>(
        `INSERT INTO chain_cursors (chain, next_position, updated_at) VALUES (?, ?, ?)
         ON CONFLICT (chain) DO UPDATE SET next_position = excluded.next_position, updated_at = excluded.updated_at`,
      ),
      insertDeposit: db.prepare<
        [string, string, number, bigint, string, string, string, string, bigint, string | null, number]
      >(
        `INSERT INTO deposits (chain, tx_hash, log_index, position, from_address, to_address, account_id,
                               onchain_amount, amount, entry_id, credited_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
      ),
      ensureBacking: db.prepare<[string, string]>(
        "INSERT INTO onchain_backing (account_id, chain) VALUES (?, ?) ON CONFLICT DO NOTHING",
      ),
      addDeposited: db.prepare<[bigint, string, string]>(
        "UPDATE onchain_backing SET deposited = deposited + ? WHERE account_id = ? AND chain = ?",
      ),
      addCommitted: db.prepare<[bigint, string, string]>(
        "UPDATE onchain_backing SET committed = committed + ? WHERE account_id = ? AND chain = ?",
      ),
      backing: money<[string, string]>(
        "SELECT deposited, committed FROM onchain_backing WHERE account_id = ? AND chain = ?",
      ),
      clearPending: db.prepare<[string]>("DELETE FROM pending_deposits WHERE chain = ?"),
      insertPending: db.prepare<[string, string, number, bigint, string, string, string, string, number]>(
        `INSERT INTO pending_deposits (chain, tx_hash, log_index, position, from_address, to_address, account_id,
                                       onchain_amount, seen_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
      ),
      pendingSeenAt: db.prepare<[string, string, number], { seen_at: number }>(
        "SELECT seen_at FROM pending_deposits WHERE chain = ? AND tx_hash = ? AND log_index = ?",
      ),
      listDeposits: money<[string, string, number]>(
        `SELECT chain, tx_hash, log_index, position, from_address, to_address, account_id, onchain_amount,
                0 AS amount, 0 AS credited, seen_at AS at
           FROM pending_deposits WHERE account_id = ?
         UNION ALL
         SELECT * FROM (SELECT chain, tx_hash, log_index, position, from_address, to_address, account_id,
                               onchain_amount, amount, 1 AS credited, credited_at AS at
                          FROM deposits WHERE account_id = ? ORDER BY credited_at DESC, position DESC LIMIT ?)`,
      ),
      unbatchedAccounts: money<[string, number]>(
        `SELECT account_id, MIN(created_at) AS oldest FROM settlement_intents
          WHERE chain = ? AND transfer_id IS NULL AND onchain_amount > 0
          GROUP BY account_id HAVING MIN(created_at) <= ?`,
      ),
      unbatchedOf: money<[string, string, number]>(
        `SELECT hold_id, onchain_amount FROM settlement_intents
          WHERE chain = ? AND account_id = ? AND transfer_id IS NULL AND onchain_amount > 0
          ORDER BY created_at LIMIT ?`,
      ),
      linkIntent: db.prepare<[string, string]>(
        "UPDATE settlement_intents SET transfer_id = ? WHERE hold_id = ? AND transfer_id IS NULL",
      ),
      insertTransfer: db.prepare<
        [string, string, string, string, string, bigint, bigint, number, number, number]
      >(
        `INSERT INTO chain_transfers (id, kind, account_id, chain, to_address, amount, fee, status, next_attempt_at,
                                      created_at, updated_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?)`,
      ),
      getTransfer: money<[string]>(
        `SELECT t.*, (SELECT COUNT(*) FROM settlement_intents i WHERE i.transfer_id = t.id) AS calls
           FROM chain_transfers t WHERE t.id = ?`,
      ),
      openTransfers: money<[string, number, number]>(
        `SELECT t.*, 0 AS calls FROM chain_transfers t
          WHERE t.chain = ? AND t.status <> 'confirmed' AND t.next_attempt_at <= ?
          ORDER BY CASE t.status WHEN 'queued' THEN 1 ELSE 0 END, t.seq LIMIT ?`,
      ),
      listTransfers: money<[string, string, bigint, number]>(
        `SELECT t.*, (SELECT COUNT(*) FROM settlement_intents i WHERE i.transfer_id = t.id) AS calls
           FROM chain_transfers t WHERE t.account_id = ? AND t.kind = ? AND t.seq < ?
          ORDER BY t.seq DESC LIMIT ?`,
      ),
      markPrepared: db.prepare<[string, string, number, string]>(
        `UPDATE chain_transfers SET status = 'prepared', tx_hash = ?, raw = ?, updated_at = ?, last_error = ''
          WHERE id = ? AND status = 'queued'`,
      ),
      markSent: db.prepare<[number, number, string]>(
        `UPDATE chain_transfers SET status = 'sent', next_attempt_at = ?, updated_at = ?, last_error = ''
          WHERE id = ? AND status IN ('prepared', 'sent')`,
      ),
      markConfirmed: db.prepare<[number, number, string]>(
        `UPDATE chain_transfers SET status = 'confirmed', updated_at = ?, confirmed_at = ?, last_error = ''
          WHERE id = ? AND status <> 'confirmed'`,
      ),
      markRequeued: db.prepare<[number, string, number, string]>(
        `UPDATE chain_transfers SET status = 'queued', tx_hash = NULL, raw = NULL, attempts = attempts + 1,
                next_attempt_at = ?, last_error = ?, updated_at = ?
          WHERE id = ? AND status IN ('prepared', 'sent')`,
      ),
      markRetry: db.prepare<[number, string, number, string]>(
        `UPDATE chain_transfers SET attempts = attempts + 1, next_attempt_at = ?, last_error = ?, updated_at = ?
          WHERE id = ? AND status <> 'confirmed'`,
      ),
      backlogIntents: money<[]>(
        `SELECT chain, COUNT(*) AS calls, COALESCE(SUM(onchain_amount), 0) AS amount, MIN(created_at) AS oldest
           FROM settlement_intents WHERE transfer_id IS NULL AND onchain_amount > 0 GROUP BY chain`,
      ),
      backlogTransfers: money<[]>(
        `SELECT chain, kind, COUNT(*) AS n, COALESCE(SUM(amount), 0) AS amount, MIN(created_at) AS oldest,
                (SELECT last_error FROM chain_transfers e WHERE e.chain = t.chain AND e.status <> 'confirmed'
                   AND e.last_error <> '' ORDER BY e.updated_at DESC LIMIT 1) AS last_error
           FROM chain_transfers t WHERE status <> 'confirmed' GROUP BY chain, kind`,
      ),
      confirmedSettled: money<[]>(
        `SELECT chain, COALESCE(SUM(amount), 0) AS amount FROM chain_transfers
          WHERE kind = 'settlement' AND status = 'confirmed' GROUP BY chain`,
      ),
      offchain: money<[]>(
        "SELECT chain, COALESCE(SUM(offchain_amount), 0) AS amount FROM settlement_intents GROUP BY chain",
      ),
    };
    this.tx = {
      recordScan: db.transaction(
        (chain: string, from: bigint, next: bigint, deposits: readonly DepositToCredit[], now: number) =>
          this.recordScanTx(chain, from, next, deposits, now),
      ),
      replacePending: db.transaction((chain: string, rows: readonly DepositToCredit[], now: number) => {
        const seen = new Map<string, number>();
        for (const r of rows) {
          const at = this.s.pendingSeenAt.get(chain, r.txHash, r.index)?.seen_at;
          if (at !== undefined) seen.set(`${r.txHash}/${r.index}`, at);
        }
        this.s.clearPending.run(chain);
        for (const r of rows) {
          this.s.insertPending.run(
            chain,
            r.txHash,
            r.index,
            r.position,
            r.from,
            r.to,
            r.accountId,
            r.onchainAmount.toString(),
            seen.get(`${r.txHash}/${r.index}`) ?? now,
          );
        }
      }),
      batch: db.transaction(
        (
          chain: string,
          perCall: boolean,
          cutoff: number,
          treasury: string,
          newId: () => string,
          now: number,
        ) => this.batchTx(chain, perCall, cutoff, treasury, newId, now),
      ),
      withdraw: db.transaction((w: NewWithdrawal) => this.withdrawTx(w)),
    };
  }

  /** Records an account's deposit address for a family (idempotent). */
  saveDepositAddress(family: string, accountId: string, address: string, now: number): void {
    this.s.insertAddress.run(family, address, accountId, now);
  }

  /** The stored deposit address of an account, if it has one yet. */
  depositAddressOf(accountId: string, family: string): string | undefined {
    return this.s.addressOf.get(accountId, family)?.address;
  }

  /** Deposit addresses of a family stored after `seq`, oldest first (the watcher loads only new ones). */
  addressesSince(family: string, seq: number): { seq: number; address: string; accountId: string }[] {
    return this.s.addressesSince
      .all(family, seq)
      .map((r) => ({ seq: r.seq, address: r.address, accountId: r.account_id }));
  }

  /** The watcher's next unscanned position on a chain, if it has scanned before. */
  cursor(chain: string): bigint | undefined {
    return this.s.cursor.get(chain)?.next_position as bigint | undefined;
  }

  /** Sets where a chain's watcher starts, unless it already has a cursor. */
  initCursor(chain: string, position: bigint, now: number): void {
    if (this.cursor(chain) === undefined) this.s.setCursor.run(chain, position, now);
  }

  /**
   * Credits the deposits of a scan of positions `from`..`next - 1` and moves the cursor to
   * `next`, in one transaction. A deposit already recorded is skipped (overlapping scans and
   * restarts credit nothing twice). If the cursor is no longer at `from` (another process
   * scanned meanwhile), nothing is written and false is returned.
   */
  recordScan(
    chain: string,
    from: bigint,
    next: bigint,
    deposits: readonly DepositToCredit[],
    now: number,
  ): boolean {
    return this.tx.recordScan.immediate(chain, from, next, deposits, now);
  }

  /** Replaces the chain's list of deposits seen above the finality line (display only). */
  replacePending(chain: string, rows: readonly DepositToCredit[], now: number): void {
    this.tx.replacePending.immediate(chain, rows, now);
  }

  /** An account's pending deposits, then its newest `limit` credited ones. */
  listDeposits(accountId: string, limit: number): DepositRow[] {
    return this.s.listDeposits.all(accountId, accountId, limit).map((r) => ({
      chain: r.chain as string,
      txHash: r.tx_hash as string,
      index: Number(r.log_index),
      position: r.position as bigint,
      from: r.from_address as string,
      to: r.to_address as string,
      accountId: r.account_id as string,
      onchainAmount: BigInt(r.onchain_amount as string),
      amount: r.amount as bigint,
      credited: r.credited === 1n,
      at: Number(r.at),
    }));
  }

  /**
   * Groups unbatched intents into transfers to the treasury: one per call (`perCall`), or one
   * per account whose oldest unbatched intent is older than `cutoff`. Returns how many
   * transfers it created.
   */
  batchIntents(
    chain: string,
    perCall: boolean,
    cutoff: number,
    treasury: string,
    newId: () => string,
    now: number,
  ): number {
    return this.tx.batch.immediate(chain, perCall, cutoff, treasury, newId, now);
  }

  /** Transfers of a chain that are due for work, signed ones first, oldest first. */
  openTransfers(chain: string, now: number, limit: number): TransferRow[] {
    return this.s.openTransfers.all(chain, now, limit).map(toTransfer);
  }

  /** One transfer by id. */
  transfer(id: string): TransferRow | undefined {
    const row = this.s.getTransfer.get(id);
    return row === undefined ? undefined : toTransfer(row);
  }

  /** An account's transfers of one kind, newest first, with seq below `beforeSeq`. */
  listTransfers(
    accountId: string,
    kind: "settlement" | "withdrawal",
    beforeSeq: bigint,
    limit: number,
  ): TransferRow[] {
    return this.s.listTransfers.all(accountId, kind, beforeSeq, limit).map(toTransfer);
  }

  /** Stores the signed transaction, before it is broadcast. */
  markPrepared(id: string, txHash: string, raw: string, now: number): void {
    this.s.markPrepared.run(txHash, raw, now, id);
  }

  /** The transaction was handed to the RPC; check on it again at `recheckAt`. */
  markSent(id: string, recheckAt: number, now: number): void {
    this.s.markSent.run(recheckAt, now, id);
  }

  markConfirmed(id: string, now: number): void {
    this.s.markConfirmed.run(now, now, id);
  }

  /** The signed transaction failed or was dropped: the order is prepared anew at `retryAt`. */
  markRequeued(id: string, reason: string, retryAt: number, now: number): void {
    this.s.markRequeued.run(retryAt, reason.slice(0, 500), now, id);
  }

  /** A step failed (RPC outage, …): try again at `retryAt`, keeping the state. */
  markRetry(id: string, error: string, retryAt: number, now: number): void {
    this.s.markRetry.run(retryAt, error.slice(0, 500), now, id);
  }

  /**
   * Writes a withdrawal: the ledger debits (the amount to withdrawals, the fee to withdrawal
   * fees) and the queued transfer of the amount, in one transaction, after checking amount + fee
   * against what the account may spend and what its deposit address holds for it. The same id
   * returns the first withdrawal if it matches.
   */
  withdraw(w: NewWithdrawal): WithdrawResult {
    return this.tx.withdraw.immediate(w);
  }

  /** The most an account can withdraw on a chain now: available and backed by its deposits. */
  withdrawable(accountId: string, chain: string): bigint {
    const available = availableOf(this.ledger.balance(accountId, chain));
    const backing = this.s.backing.get(accountId, chain);
    const free = backing === undefined ? 0n : (backing.deposited as bigint) - (backing.committed as bigint);
    return available < free ? available : free;
  }

  /** The settlement backlog and settled totals of every chain that has any. */
  backlog(): BacklogRow[] {
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
    for (const r of this.s.backlogIntents.all()) {
      const row = at(r.chain as string);
      row.unbatchedCalls = Number(r.calls);
      row.unbatchedAmount = r.amount as bigint;
      row.oldestAt = older(row.oldestAt, Number(r.oldest));
    }
    for (const r of this.s.backlogTransfers.all()) {
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
    for (const r of this.s.confirmedSettled.all())
      at(r.chain as string).confirmedSettlementAmount = r.amount as bigint;
    for (const r of this.s.offchain.all()) at(r.chain as string).offchainAmount = r.amount as bigint;
    return [...rows.values()].sort((a, b) => a.chain.localeCompare(b.chain));
  }

  private recordScanTx(
    chain: string,
    from: bigint,
    next: bigint,
    deposits: readonly DepositToCredit[],
    now: number,
  ): boolean {
    const cursor = this.cursor(chain);
    if (cursor !== undefined && cursor !== from) return false;
    for (const d of deposits) {
      const entryId = `deposit/${chain}/${d.txHash}/${d.index}`;
      let amount = d.amount;
      // A balance beyond int64 cannot be represented: keep the record, credit nothing.
      if (this.ledger.balance(d.accountId, chain).creditsPosted + amount > INT64_MAX) amount = 0n;
      const inserted = this.s.insertDeposit.run(
        chain,
        d.txHash,
        d.index,
        d.position,
        d.from,
        d.to,
        d.accountId,
        d.onchainAmount.toString(),
        amount,
        amount > 0n ? entryId : null,
        now,
      );
      if (inserted.changes === 0 || amount === 0n) continue;
      this.ledger.post({
        id: entryId,
        chain,
        debit: SYSTEM_DEPOSITS,
        credit: d.accountId,
        amount,
        kind: "deposit",
        memo: `${d.txHash}#${d.index}`,
        createdAt: now,
      });
      this.s.ensureBacking.run(d.accountId, chain);
      this.s.addDeposited.run(amount, d.accountId, chain);
    }
    this.s.setCursor.run(chain, next, now);
    return true;
  }

  private batchTx(
    chain: string,
    perCall: boolean,
    cutoff: number,
    treasury: string,
    newId: () => string,
    now: number,
  ): number {
    let created = 0;
    for (const account of this.s.unbatchedAccounts.all(chain, perCall ? Number.MAX_SAFE_INTEGER : cutoff)) {
      const accountId = account.account_id as string;
      const intents = this.s.unbatchedOf.all(chain, accountId, perCall ? 1000 : 10_000);
      const groups = perCall ? intents.map((i) => [i]) : [intents];
      for (const group of groups) {
        const amount = group.reduce((sum, i) => sum + (i.onchain_amount as bigint), 0n);
        if (amount <= 0n) continue;
        const id = newId();
        this.s.insertTransfer.run(id, "settlement", accountId, chain, treasury, amount, 0n, now, now, now);
        for (const i of group) this.s.linkIntent.run(id, i.hold_id as string);
        created += 1;
      }
    }
    return created;
  }

  private withdrawTx(w: NewWithdrawal): WithdrawResult {
    const existing = this.transfer(w.id);
    if (existing !== undefined) {
      const same =
        existing.kind === "withdrawal" &&
        existing.accountId === w.accountId &&
        existing.chain === w.chain &&
        existing.to === w.to &&
        existing.amount === w.amount;
      return same ? { kind: "existing", transfer: existing } : { kind: "conflict" };
    }
    const withdrawable = this.withdrawable(w.accountId, w.chain);
    if (w.amount + w.fee > withdrawable) return { kind: "insufficient", available: withdrawable };
    this.ledger.post({
      id: `${w.id}/withdrawal`,
      chain: w.chain,
      debit: w.accountId,
      credit: SYSTEM_WITHDRAWALS,
      amount: w.amount,
      kind: "withdrawal",
      memo: w.to,
      createdAt: w.now,
    });
    if (w.fee > 0n) {
      this.ledger.post({
        id: `${w.id}/fee`,
        chain: w.chain,
        debit: w.accountId,
        credit: SYSTEM_WITHDRAWAL_FEES,
        amount: w.fee,
        kind: "withdrawal",
        memo: "network fee",
        createdAt: w.now,
      });
    }
    // The fee's tokens stay at the deposit address, spoken for like the amount's.
    this.s.addCommitted.run(w.amount + w.fee, w.accountId, w.chain);
    this.s.insertTransfer.run(
      w.id,
      "withdrawal",
      w.accountId,
      w.chain,
      w.to,
      w.amount,
      w.fee,
      w.now,
      w.now,
      w.now,
    );
    return { kind: "written", transfer: this.transfer(w.id)! };
  }
}
