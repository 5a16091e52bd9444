import type { Statement } from "better-sqlite3";
import type { BacklogGlance, ChainWorkStore, StoredAddress } from "../../core/ports/chain-work.js";
import type { BacklogRow, DepositToCredit, TransferRow } from "../../core/ports/ledger.js";
import type { Db } from "./database.js";
import { LedgerRepository } from "./ledger.js";
import { OnchainRepository } from "./onchain.js";

/**
 * The chains worker's port over SQLite: the onchain repository's statements and transactions
 * (each `BEGIN IMMEDIATE`, committed before the answer) on the worker's own connection.
 */
export class SqliteChainWork implements ChainWorkStore {
  readonly #repo: OnchainRepository;
  readonly #glance: {
    readonly unbatched: Statement<[string, number]>;
    readonly open: Statement<[string, number]>;
    readonly lastError: Statement<[string, number]>;
  };

  constructor(db: Db) {
    this.#repo = new OnchainRepository(db, new LedgerRepository(db));
    // Each reads at most `atMost` rows of a partial index (settlement_intents_unbatched,
    // chain_transfers_open), however many intents the outbox holds.
    this.#glance = {
      unbatched: db.prepare(
        `SELECT COUNT(*) AS n FROM (SELECT 1 FROM settlement_intents
           WHERE chain = ? AND transfer_id IS NULL AND onchain_amount > 0 LIMIT ?)`,
      ),
      open: db.prepare(
        "SELECT COUNT(*) AS n FROM (SELECT 1 FROM chain_transfers WHERE chain = ? AND status <> 'confirmed' LIMIT ?)",
      ),
      lastError: db.prepare(
        `SELECT last_error FROM (SELECT last_error, updated_at FROM chain_transfers
           WHERE chain = ? AND status <> 'confirmed' LIMIT ?)
         WHERE last_error <> '' ORDER BY updated_at DESC LIMIT 1`,
      ),
    };
  }

  async saveDepositAddress(family: string, accountId: string, address: string, now: number): Promise<void> {
    this.#repo.saveDepositAddress(family, accountId, address, now);
  }

  async depositAddressOf(accountId: string, family: string): Promise<string | undefined> {
    return this.#repo.depositAddressOf(accountId, family);
  }

  async addressesSince(family: string, seq: number): Promise<StoredAddress[]> {
    return this.#repo.addressesSince(family, seq);
  }

  async cursor(chain: string): Promise<bigint | undefined> {
    return this.#repo.cursor(chain);
  }

  async initCursor(chain: string, position: bigint, now: number): Promise<void> {
    this.#repo.initCursor(chain, position, now);
  }

  async recordScan(
    chain: string,
    from: bigint,
    next: bigint,
    deposits: readonly DepositToCredit[],
    now: number,
  ): Promise<boolean> {
    return this.#repo.recordScan(chain, from, next, deposits, now);
  }

  async replacePending(chain: string, rows: readonly DepositToCredit[], now: number): Promise<void> {
    this.#repo.replacePending(chain, rows, now);
  }

  async batchIntents(
    chain: string,
    perCall: boolean,
    cutoff: number,
    treasury: string,
    newId: () => string,
    now: number,
  ): Promise<number> {
    return this.#repo.batchIntents(chain, perCall, cutoff, treasury, newId, now);
  }

  async openTransfers(chain: string, now: number, limit: number): Promise<TransferRow[]> {
    return this.#repo.openTransfers(chain, now, limit);
  }

  async transfer(id: string): Promise<TransferRow | undefined> {
    return this.#repo.transfer(id);
  }

  async markPrepared(id: string, txHash: string, raw: string, now: number): Promise<void> {
    this.#repo.markPrepared(id, txHash, raw, now);
  }

  async markSent(id: string, recheckAt: number, now: number): Promise<void> {
    this.#repo.markSent(id, recheckAt, now);
  }

  async markConfirmed(id: string, now: number): Promise<void> {
    this.#repo.markConfirmed(id, now);
  }

  async markRequeued(id: string, reason: string, retryAt: number, now: number): Promise<void> {
    this.#repo.markRequeued(id, reason, retryAt, now);
  }

  async markRetry(id: string, error: string, retryAt: number, now: number): Promise<void> {
    this.#repo.markRetry(id, error, retryAt, now);
  }

  async backlog(): Promise<BacklogRow[]> {
    return this.#repo.backlog();
  }

  async backlogGlance(chain: string, atMost: number): Promise<BacklogGlance> {
    const count = (statement: Statement<[string, number]>) =>
      Number((statement.get(chain, atMost) as { n: number | bigint }).n);
    const waiting = Math.min(count(this.#glance.unbatched) + count(this.#glance.open), atMost);
    const row = this.#glance.lastError.get(chain, atMost) as { last_error: string } | undefined;
    return { waiting, lastError: row?.last_error ?? "" };
  }
}
