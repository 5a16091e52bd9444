import { createHash } from "node:crypto";
import pg from "pg";
import type {
  BacklogGlance,
  ChainRoles,
  ChainWorkStore,
  StoredAddress,
} from "../../core/ports/chain-work.js";
import {
  type BacklogRow,
  type DepositToCredit,
  SYSTEM_DEPOSITS,
  type TransferRow,
} from "../../core/ports/ledger.js";
import { toTransfer } from "../shared/ledger-rows.js";
import { inTransaction } from "./database.js";
import { readBacklog, TRANSFER_WITH_CALLS } from "./onchain.js";
import { exactRows, retrying, shardFor } from "./queries.js";

/**
 * Locks the chain's cursor row (creating it at `from` when the chain has none, as SQLite's
 * recordScan accepts any start then) and answers its newest position: a second scan of the
 * same chain waits here, then sees the cursor moved.
 */
const LOCK_CURSOR = `
  INSERT INTO chain_cursors AS c (chain, next_position, updated_at) VALUES ($1::text, $2::bigint, $3::bigint)
  ON CONFLICT (chain) DO UPDATE SET updated_at = c.updated_at
  RETURNING next_position`;

/**
 * One deposit: recorded once (its primary key), and only when this statement recorded it is it
 * credited: the account's row, the deposits shard, the entry and the backing. A balance that
 * would leave the int64 range keeps the record and credits nothing (as SQLite).
 */
const CREDIT_DEPOSIT = `
  WITH recorded AS (
    INSERT INTO deposits (chain, tx_hash, log_index, position, from_address, to_address, account_id,
                          onchain_amount, amount, entry_id, credited_at)
    SELECT $1::text, $2::text, $3::integer, $4::bigint, $5::text, $6::text, $7::text, $8::text, a.amount,
           CASE WHEN a.amount > 0 THEN $10::text END, $11::bigint
      FROM (SELECT CASE WHEN COALESCE((SELECT credits_posted::numeric FROM ledger_balances
                                        WHERE account = $7::text AND chain = $1::text AND shard = 0), 0)
                             + $9::bigint > 9223372036854775807 THEN 0 ELSE $9::bigint END AS amount) AS a
    ON CONFLICT DO NOTHING
    RETURNING amount
  ), credited AS (
    INSERT INTO ledger_balances AS b (account, chain, shard, may_overdraw, credits_posted)
    SELECT $7::text, $1::text, 0, false, amount FROM recorded WHERE amount > 0
    ON CONFLICT (account, chain, shard) DO UPDATE SET credits_posted = b.credits_posted + EXCLUDED.credits_posted
    RETURNING 1
  ), debited AS (
    INSERT INTO ledger_balances AS b (account, chain, shard, may_overdraw, debits_posted)
    SELECT '${SYSTEM_DEPOSITS}', $1::text, $12::smallint, true, r.amount FROM recorded r, credited
    ON CONFLICT (account, chain, shard) DO UPDATE SET debits_posted = b.debits_posted + EXCLUDED.debits_posted
    RETURNING 1
  ), entry AS (
    INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id, memo,
                                created_at)
    SELECT $10::text, $1::text, '${SYSTEM_DEPOSITS}', $7::text, r.amount, false, 'deposit', NULL,
           $2::text || '#' || $3::integer, $11::bigint
      FROM recorded r, credited
  )
  INSERT INTO onchain_backing AS b (account_id, chain, deposited)
  SELECT $7::text, $1::text, r.amount FROM recorded r, debited
  ON CONFLICT (account_id, chain) DO UPDATE SET deposited = b.deposited + EXCLUDED.deposited`;

/**
 * The pending list in one statement: rows still seen are upserted keeping when they were first
 * seen, rows no longer seen are deleted (the DELETE sees the statement's snapshot, so never a
 * row this statement inserted).
 */
const REPLACE_PENDING = `
  WITH seen AS (
    SELECT * FROM unnest($2::text[], $3::integer[], $4::bigint[], $5::text[], $6::text[], $7::text[], $8::text[])
      AS r (tx_hash, log_index, position, from_address, to_address, account_id, onchain_amount)
  ), kept AS (
    INSERT INTO pending_deposits AS p (chain, tx_hash, log_index, position, from_address, to_address, account_id,
                                       onchain_amount, seen_at)
    SELECT $1::text, tx_hash, log_index, position, from_address, to_address, account_id, onchain_amount, $9::bigint
      FROM seen
    ON CONFLICT (chain, tx_hash, log_index) DO UPDATE SET position = EXCLUDED.position,
      from_address = EXCLUDED.from_address, to_address = EXCLUDED.to_address, account_id = EXCLUDED.account_id,
      onchain_amount = EXCLUDED.onchain_amount
  )
  DELETE FROM pending_deposits p
   WHERE p.chain = $1::text
     AND NOT EXISTS (SELECT 1 FROM seen s WHERE s.tx_hash = p.tx_hash AND s.log_index = p.log_index)`;

/** The accounts with unbatched onchain intents whose oldest is at or before the cutoff. */
const UNBATCHED_ACCOUNTS = `
  SELECT account_id FROM settlement_intents
   WHERE chain = $1::text AND transfer_id IS NULL AND onchain_amount > 0
   GROUP BY account_id HAVING MIN(created_at) <= $2::bigint
   ORDER BY account_id COLLATE "C"`;

/** An account's unbatched intents that no other batcher holds (SKIP LOCKED), locked until commit. */
const UNBATCHED_OF = `
  SELECT hold_id, onchain_amount FROM settlement_intents
   WHERE chain = $1::text AND account_id = $2::text AND transfer_id IS NULL AND onchain_amount > 0
   ORDER BY created_at, hold_id LIMIT $3::integer
     FOR UPDATE SKIP LOCKED`;

/** A settlement transfer and the links of the intents it covers, in one statement. */
const BATCH = `
  WITH transfer AS (
    INSERT INTO chain_transfers (id, kind, account_id, chain, to_address, amount, status, next_attempt_at,
                                 created_at, updated_at)
    VALUES ($1::text, 'settlement', $2::text, $3::text, $4::text, $5::bigint, 'queued', $6::bigint, $6::bigint,
            $6::bigint)
    RETURNING id
  )
  UPDATE settlement_intents SET transfer_id = (SELECT id FROM transfer)
   WHERE hold_id = ANY($7::text[]) AND transfer_id IS NULL`;

/**
 * The chains worker's port over PostgreSQL. Whichever host holds a chain's role (see
 * {@link PgChainRoles}) does its work, but nothing here relies on that: a scan commits only
 * from the cursor it started at (the cursor row locked), a deposit is credited once (its
 * primary key), an intent is linked to one transfer (locked SKIP LOCKED, and a trigger refuses
 * a second link), and each status change is guarded by the status it leaves, as in SQLite.
 */
export class PgChainWork implements ChainWorkStore {
  constructor(private readonly pool: pg.Pool) {}

  async saveDepositAddress(family: string, accountId: string, address: string, now: number): Promise<void> {
    await this.pool.query(
      `INSERT INTO deposit_addresses (family, address, account_id, created_at) VALUES ($1, $2, $3, $4)
       ON CONFLICT DO NOTHING`,
      [family, address, accountId, now],
    );
  }

  async depositAddressOf(accountId: string, family: string): Promise<string | undefined> {
    const { rows } = await this.pool.query<{ address: string }>(
      "SELECT address FROM deposit_addresses WHERE account_id = $1 AND family = $2",
      [accountId, family],
    );
    return rows[0]?.address;
  }

  async addressesSince(family: string, seq: number): Promise<StoredAddress[]> {
    const { rows } = await this.pool.query<{ seq: number; address: string; account_id: string }>(
      "SELECT seq, address, account_id FROM deposit_addresses WHERE family = $1 AND seq > $2 ORDER BY seq",
      [family, seq],
    );
    return rows.map((r) => ({ seq: r.seq, address: r.address, accountId: r.account_id }));
  }

  async cursor(chain: string): Promise<bigint | undefined> {
    const [row] = await exactRows(
      this.pool,
      "SELECT next_position FROM chain_cursors WHERE chain = $1::text",
      [chain],
    );
    return row?.next_position as bigint | undefined;
  }

  async initCursor(chain: string, position: bigint, now: number): Promise<void> {
    await this.pool.query(
      `INSERT INTO chain_cursors (chain, next_position, updated_at) VALUES ($1, $2, $3)
       ON CONFLICT (chain) DO NOTHING`,
      [chain, position, now],
    );
  }

  /**
   * One transaction: the cursor row locked (LOCK_CURSOR), one statement per deposit (sorted by
   * account, so two transactions never take users' rows in opposite orders), the cursor moved.
   */
  recordScan(
    chain: string,
    from: bigint,
    next: bigint,
    deposits: readonly DepositToCredit[],
    now: number,
  ): Promise<boolean> {
    const sorted = [...deposits].sort((a, b) => compareText(a.accountId, b.accountId));
    return retrying(() =>
      inTransaction(this.pool, async (client) => {
        const [cursor] = await exactRows(client, LOCK_CURSOR, [chain, from, now]);
        if (cursor!.next_position !== from) return false;
        for (const d of sorted) {
          await client.query(CREDIT_DEPOSIT, [
            chain,
            d.txHash,
            d.index,
            d.position,
            d.from,
            d.to,
            d.accountId,
            d.onchainAmount.toString(),
            d.amount,
            `deposit/${chain}/${d.txHash}/${d.index}`,
            now,
            shardFor(SYSTEM_DEPOSITS).shard,
          ]);
        }
        await client.query("UPDATE chain_cursors SET next_position = $2, updated_at = $3 WHERE chain = $1", [
          chain,
          next,
          now,
        ]);
        return true;
      }),
    );
  }

  async replacePending(chain: string, rows: readonly DepositToCredit[], now: number): Promise<void> {
    // The first of two rows with one key wins, as SQLite's INSERT … ON CONFLICT DO NOTHING.
    const unique = new Map<string, DepositToCredit>();
    for (const r of rows) {
      const key = `${r.txHash}/${r.index}`;
      if (!unique.has(key)) unique.set(key, r);
    }
    const list = [...unique.values()];
    await retrying(() =>
      this.pool.query(REPLACE_PENDING, [
        chain,
        list.map((r) => r.txHash),
        list.map((r) => r.index),
        list.map((r) => r.position.toString()),
        list.map((r) => r.from),
        list.map((r) => r.to),
        list.map((r) => r.accountId),
        list.map((r) => r.onchainAmount.toString()),
        now,
      ]),
    );
  }

  /**
   * One transaction: the due accounts, then per account its unbatched intents locked SKIP
   * LOCKED (a second batcher at the same time takes none of them) and one statement per
   * transfer, which must link every intent it counted or the whole batch rolls back.
   */
  batchIntents(
    chain: string,
    perCall: boolean,
    cutoff: number,
    treasury: string,
    newId: () => string,
    now: number,
  ): Promise<number> {
    return retrying(() =>
      inTransaction(this.pool, async (client) => {
        let created = 0;
        const accounts = await client.query<{ account_id: string }>(UNBATCHED_ACCOUNTS, [
          chain,
          perCall ? Number.MAX_SAFE_INTEGER : cutoff,
        ]);
        for (const { account_id: accountId } of accounts.rows) {
          const intents = await exactRows(client, UNBATCHED_OF, [chain, accountId, perCall ? 1000 : 10_000]);
          const groups = perCall ? intents.map((i) => [i]) : [intents];
          for (const group of groups) {
            const amount = group.reduce((sum, i) => sum + (i.onchain_amount as bigint), 0n);
            if (amount <= 0n) continue;
            const id = newId();
            const holdIds = group.map((i) => i.hold_id as string);
            const linked = await client.query(BATCH, [id, accountId, chain, treasury, amount, now, holdIds]);
            if (linked.rowCount !== holdIds.length) {
              throw new Error(`settlement ${id}: linked ${linked.rowCount} of ${holdIds.length} intents`);
            }
            created += 1;
          }
        }
        return created;
      }),
    );
  }

  async openTransfers(chain: string, now: number, limit: number): Promise<TransferRow[]> {
    const rows = await exactRows(
      this.pool,
      `SELECT t.*, 0::bigint AS calls FROM chain_transfers t
        WHERE t.chain = $1::text AND t.status <> 'confirmed' AND t.next_attempt_at <= $2::bigint
        ORDER BY CASE t.status WHEN 'queued' THEN 1 ELSE 0 END, t.seq LIMIT $3::integer`,
      [chain, now, limit],
    );
    return rows.map(toTransfer);
  }

  async transfer(id: string): Promise<TransferRow | undefined> {
    const [row] = await exactRows(this.pool, `${TRANSFER_WITH_CALLS} WHERE t.id = $1::text`, [id]);
    return row === undefined ? undefined : toTransfer(row);
  }

  async markPrepared(id: string, txHash: string, raw: string, now: number): Promise<void> {
    await this.pool.query(
      `UPDATE chain_transfers SET status = 'prepared', tx_hash = $1, raw = $2, updated_at = $3, last_error = ''
        WHERE id = $4 AND status = 'queued'`,
      [txHash, raw, now, id],
    );
  }

  async markSent(id: string, recheckAt: number, now: number): Promise<void> {
    await this.pool.query(
      `UPDATE chain_transfers SET status = 'sent', next_attempt_at = $1, updated_at = $2, last_error = ''
        WHERE id = $3 AND status IN ('prepared', 'sent')`,
      [recheckAt, now, id],
    );
  }

  async markConfirmed(id: string, now: number): Promise<void> {
    await this.pool.query(
      `UPDATE chain_transfers SET status = 'confirmed', updated_at = $1, confirmed_at = $1, last_error = ''
        WHERE id = $2 AND status <> 'confirmed'`,
      [now, id],
    );
  }

  async markRequeued(id: string, reason: string, retryAt: number, now: number): Promise<void> {
    await this.pool.query(
      `UPDATE chain_transfers SET status = 'queued', tx_hash = NULL, raw = NULL, attempts = attempts + 1,
              next_attempt_at = $1, last_error = $2, updated_at = $3
        WHERE id = $4 AND status IN ('prepared', 'sent')`,
      [retryAt, reason.slice(0, 500), now, id],
    );
  }

  async markRetry(id: string, error: string, retryAt: number, now: number): Promise<void> {
    await this.pool.query(
      `UPDATE chain_transfers SET attempts = attempts + 1, next_attempt_at = $1, last_error = $2, updated_at = $3
        WHERE id = $4 AND status <> 'confirmed'`,
      [retryAt, error.slice(0, 500), now, id],
    );
  }

  backlog(): Promise<BacklogRow[]> {
    return readBacklog(this.pool);
  }

  async backlogGlance(chain: string, atMost: number): Promise<BacklogGlance> {
    const { rows } = await this.pool.query<{ waiting: string; last_error: string | null }>(BACKLOG_GLANCE, [
      chain,
      atMost,
    ]);
    return { waiting: Math.min(Number(rows[0]?.waiting ?? 0), atMost), lastError: rows[0]?.last_error ?? "" };
  }
}

/**
 * One chain's backlog at a glance (as SQLite's): each part reads at most `$2` rows of a partial
 * index (settlement_intents_unbatched, chain_transfers_open), however large the outbox.
 */
const BACKLOG_GLANCE = `
  SELECT
    (SELECT COUNT(*) FROM (SELECT 1 FROM settlement_intents
       WHERE chain = $1 AND transfer_id IS NULL AND onchain_amount > 0 LIMIT $2) u)
    + (SELECT COUNT(*) FROM (SELECT 1 FROM chain_transfers WHERE chain = $1 AND status <> 'confirmed' LIMIT $2) o)
      AS waiting,
    (SELECT last_error FROM (SELECT last_error, updated_at FROM chain_transfers
       WHERE chain = $1 AND status <> 'confirmed' LIMIT $2) e
     WHERE last_error <> '' ORDER BY updated_at DESC LIMIT 1) AS last_error`;

/** The advisory lock key of a chain's role: 64 bits of a hash, the same on every host. */
export function roleKey(chain: string): bigint {
  return createHash("sha256").update(`tollgate:chain:${chain}`).digest().readBigInt64BE(0);
}

/**
 * Chain roles as PostgreSQL session advisory locks on one connection of this process's own:
 * the server holds a role for as long as that session lives, so a process that dies (or whose
 * connection the server ends) loses every role at once, and another process takes them over at
 * its next {@link hold}. A held role is confirmed with a `SELECT 1` on the connection before
 * each tick; when that fails every role is considered lost, and a later call reconnects.
 */
export class PgChainRoles implements ChainRoles {
  #client: pg.Client | undefined;
  #connecting: Promise<pg.Client> | undefined;
  readonly #held = new Set<string>();
  #closed = false;

  /** `config`: where to connect (the store's URL); the connection opens at the first {@link hold}. */
  constructor(private readonly config: string | pg.ClientConfig) {}

  async hold(chain: string): Promise<boolean> {
    if (this.#closed) return false;
    const held = this.#held.has(chain);
    let client: pg.Client | undefined;
    try {
      client = held ? this.#client! : await this.#connection();
      if (held) {
        await client.query("SELECT 1");
        return true;
      }
      const { rows } = await client.query<{ taken: boolean }>(
        "SELECT pg_try_advisory_lock($1::bigint) AS taken",
        [roleKey(chain).toString()],
      );
      if (rows[0]?.taken !== true) return false;
      // A connection lost while the lock was being taken took the lock with it.
      if (this.#client !== client) return false;
      this.#held.add(chain);
      return true;
    } catch {
      if (client !== undefined) this.#lost(client);
      return false;
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    const client = this.#client ?? (await this.#connecting?.catch(() => undefined));
    this.#client = undefined;
    this.#held.clear();
    if (client === undefined) return;
    // Ending the session releases its advisory locks; unlocking first says so explicitly.
    await client.query("SELECT pg_advisory_unlock_all()").catch(() => {});
    await client.end().catch(() => {});
  }

  #connection(): Promise<pg.Client> {
    if (this.#client !== undefined) return Promise.resolve(this.#client);
    this.#connecting ??= (async () => {
      const client = new pg.Client(
        typeof this.config === "string" ? { connectionString: this.config } : this.config,
      );
      // The server ending an idle session: every role held on it is gone.
      client.on("error", () => this.#lost(client));
      try {
        await client.connect();
      } catch (error) {
        await client.end().catch(() => {});
        throw error;
      }
      if (this.#closed) {
        await client.end().catch(() => {});
        throw new Error("chain roles closed");
      }
      this.#client = client;
      return client;
    })().finally(() => {
      this.#connecting = undefined;
    });
    return this.#connecting;
  }

  /** Drops a failed connection and every role held on it (only if it is still the current one). */
  #lost(client: pg.Client): void {
    if (this.#client !== client) return;
    this.#client = undefined;
    this.#held.clear();
    client.end().catch(() => {});
  }
}

/** Bytewise order of two strings' UTF-16 code units (what `<` does), as a comparator. */
function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
