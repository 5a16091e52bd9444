import type pg from "pg";
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

/** A claim that loses a race with a release (the row gone before it is read) tries again. */
const CLAIM_ATTEMPTS = 3;

/**
 * Idempotency keys in PostgreSQL, shared by every gateway host. The claim's upsert is atomic on
 * the primary key: of two concurrent claims one inserts, the other waits for it and then finds
 * the key held.
 */
export class PgIdempotency implements IdempotencyStore {
  constructor(private readonly pool: pg.Pool) {}

  async claim(c: IdempotencyClaim): Promise<IdempotencyRecord | undefined> {
    for (let attempt = 0; attempt < CLAIM_ATTEMPTS; attempt++) {
      const won = await this.pool.query(CLAIM_SQL, [
        c.accountId,
        c.key,
        c.claimId,
        c.requestHash,
        c.now,
        c.expiresAt,
        c.now,
        c.staleBefore,
      ]);
      if (won.rowCount === 1) return undefined;
      const { rows } = await this.pool.query<HeldRow>(HELD_SQL, [c.accountId, c.key]);
      if (rows[0] !== undefined) return heldRecord(rows[0]);
    }
    throw new Error(`idempotency key ${JSON.stringify(c.key)} kept changing hands while claimed`);
  }

  async complete(accountId: string, key: string, claimId: string, answer: Uint8Array | undefined) {
    await this.pool.query(COMPLETE_SQL, completeParams(accountId, key, claimId, answer));
  }

  async release(accountId: string, key: string, claimId: string) {
    await this.pool.query(RELEASE_SQL, [accountId, key, claimId]);
  }

  async sweep(now: number): Promise<number> {
    return (await this.pool.query(SWEEP_SQL, [now])).rowCount ?? 0;
  }
}
