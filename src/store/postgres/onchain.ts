import type pg from "pg";
import {
  type BacklogRow,
  type DepositRow,
  emptyBacklog,
  type NewWithdrawal,
  type OnchainStore,
  SYSTEM_WITHDRAWAL_FEES,
  SYSTEM_WITHDRAWALS,
  type TransferRow,
  type WithdrawResult,
} from "../../core/ports/ledger.js";
import { toTransfer } from "../shared/ledger-rows.js";
import { inTransaction } from "./database.js";

import {
  exactRows,
  foldReleases,
  type Queryable,
  REFUSAL_RETRIES,
  retrying,
  shardFor,
  sqlState,
} from "./queries.js";

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

/** Why a withdrawal was not written: the transfer already there, and what may be withdrawn now. */
const WITHDRAW_REFUSED = `
  SELECT t.*, (SELECT COUNT(*) FROM settlement_intents i WHERE i.transfer_id = t.id) AS calls,
         LEAST(COALESCE((SELECT credits_posted - debits_posted - debits_pending FROM ledger_totals
                          WHERE account = $2::text AND chain = $3::text), 0),
               COALESCE((SELECT deposited - committed FROM onchain_backing
                          WHERE account_id = $2::text AND chain = $3::text), 0)) AS withdrawable
    FROM (SELECT 1) AS one LEFT JOIN chain_transfers t ON t.id = $1::text`;

/** A transfer as listed, with the number of calls a settlement covers. */
export const TRANSFER_WITH_CALLS = `
  SELECT t.*, (SELECT COUNT(*) FROM settlement_intents i WHERE i.transfer_id = t.id) AS calls
    FROM chain_transfers t`;

/**
 * The onchain port over PostgreSQL: deposits as credited, withdrawals, the transfers that carry
 * them and the settlements, and the backlog. Each write follows PgLedger's (ledger.ts)'s rules (one
 * statement or one READ COMMITTED transaction on row locks and constraints). The pool belongs to
 * whoever opened it.
 */
export class PgOnchain implements OnchainStore {
  constructor(protected readonly pool: pg.Pool) {}

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
            // The balance row with every release on it, locked: WITHDRAW debits the row alone.
            await foldReleases(client, w.accountId, w.chain);
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
