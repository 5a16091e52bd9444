import type { Statement, Transaction } from "better-sqlite3";
import type { IdempotencyClaim, IdempotencyRecord, IdempotencyStore } from "../../core/ports/idempotency.js";
import {
  CLAIM_SQL,
  COMPLETE_SQL,
  completeParams,
  HELD_SQL,
  type HeldRow,
  heldRecord,
  RELEASE_SQL,
  SWEEP_SQL,
} from "../shared/idempotency-sql.js";
import type { Db } from "./database.js";

/** The shared statements with named parameters (`$n` → `@pn`), as better-sqlite3 binds them. */
const sqlite = (sql: string) => sql.replace(/\$(\d+)/g, "@p$1");
/** Values for `@p1`, `@p2`, … in order. */
const params = (...values: unknown[]) => Object.fromEntries(values.map((value, i) => [`p${i + 1}`, value]));

/**
 * Idempotency keys in the SQLite database. A claim is one transaction on this connection (the
 * upsert, then the read of whoever holds the key), so two claims of a key never both win.
 */
export class SqliteIdempotency implements IdempotencyStore {
  private readonly claimKey: Transaction<(claim: IdempotencyClaim) => IdempotencyRecord | undefined>;
  private readonly completeKey: Statement;
  private readonly releaseKey: Statement;
  private readonly sweepKeys: Statement;

  constructor(db: Db) {
    const upsert = db.prepare(sqlite(CLAIM_SQL));
    const held = db.prepare<[Record<string, unknown>], HeldRow>(sqlite(HELD_SQL));
    this.claimKey = db.transaction((c: IdempotencyClaim) => {
      const won = upsert.get(
        params(c.accountId, c.key, c.claimId, c.requestHash, c.now, c.expiresAt, c.now, c.staleBefore),
      );
      if (won !== undefined) return undefined;
      const row = held.get(params(c.accountId, c.key));
      if (row === undefined) throw new Error("an idempotency key vanished inside its claim's transaction");
      return heldRecord(row);
    });
    this.completeKey = db.prepare(sqlite(COMPLETE_SQL));
    this.releaseKey = db.prepare(sqlite(RELEASE_SQL));
    this.sweepKeys = db.prepare(sqlite(SWEEP_SQL));
  }

  async claim(claim: IdempotencyClaim): Promise<IdempotencyRecord | undefined> {
    return this.claimKey.immediate(claim);
  }

  async complete(accountId: string, key: string, claimId: string, answer: Uint8Array | undefined) {
    this.completeKey.run(params(...completeParams(accountId, key, claimId, answer)));
  }

  async release(accountId: string, key: string, claimId: string) {
    this.releaseKey.run(params(accountId, key, claimId));
  }

  async sweep(now: number): Promise<number> {
    return this.sweepKeys.run(params(now)).changes;
  }
}
