import type { SettlementView } from "../../core/ports/ledger.js";
import { type Raw, toSettlementView } from "../shared/ledger-rows.js";
import type { Db } from "./database.js";

/**
 * The settlement outbox: {@link record} runs inside the ledger's settle transaction, so a call's
 * charge and the intent to move it onchain commit together or not at all. The worker in
 * `src/chains/` batches intents into chain transfers.
 */
export class SettlementOutbox {
  private readonly s;

  constructor(db: Db) {
    const money = <T extends unknown[] = unknown[]>(sql: string) =>
      db.prepare<T, Raw>(sql).safeIntegers(true);
    this.s = {
      backing: money<[string, string]>(
        "SELECT deposited, committed FROM onchain_backing WHERE account_id = ? AND chain = ?",
      ),
      commit: db.prepare<[bigint, string, string]>(
        "UPDATE onchain_backing SET committed = committed + ? WHERE account_id = ? AND chain = ?",
      ),
      insert: db.prepare<[string, string, string, bigint, bigint, bigint, number]>(
        `INSERT INTO settlement_intents (hold_id, account_id, chain, amount, onchain_amount, offchain_amount, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?)`,
      ),
      view: money<[string]>(
        `SELECT i.hold_id, i.onchain_amount, i.offchain_amount, i.transfer_id, t.status, t.tx_hash
           FROM settlement_intents i LEFT JOIN chain_transfers t ON t.id = i.transfer_id
          WHERE i.hold_id = ?`,
      ),
    };
  }

  /**
   * Writes the settlement intent of a charged call. The part of the charge the account's
   * deposits still back moves onchain; the rest (spent from operator credit) is off-chain.
   * Must run inside the settle transaction.
   */
  record(holdId: string, accountId: string, chain: string, charge: bigint, now: number): void {
    const row = this.s.backing.get(accountId, chain);
    const free = row === undefined ? 0n : (row.deposited as bigint) - (row.committed as bigint);
    const onchain = charge < free ? charge : free;
    if (onchain > 0n) this.s.commit.run(onchain, accountId, chain);
    this.s.insert.run(holdId, accountId, chain, charge, onchain, charge - onchain, now);
  }

  /** The settlements of these calls (calls without a charge have none). */
  views(holdIds: readonly string[]): Map<string, SettlementView> {
    const out = new Map<string, SettlementView>();
    for (const id of holdIds) {
      const row = this.s.view.get(id);
      if (row === undefined) continue;
      out.set(id, toSettlementView(row));
    }
    return out;
  }
}
