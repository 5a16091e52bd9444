/**
 * The idempotency statements both stores run (SQLite and PostgreSQL take the same upsert), with
 * `$n` placeholders; SQLite numbers them `?n`.
 */

/**
 * Claims a key: inserts it, or takes over a row that expired ($7) or whose call was abandoned
 * while running ($8). Nothing changes (no row returned) when someone holds the key.
 */
export const CLAIM_SQL = `
  INSERT INTO idempotency_keys (account_id, key, claim_id, request_hash, state, answer, claimed_at, expires_at)
  VALUES ($1, $2, $3, $4, 'running', NULL, $5, $6)
  ON CONFLICT (account_id, key) DO UPDATE SET
    claim_id = excluded.claim_id, request_hash = excluded.request_hash, state = 'running',
    answer = NULL, claimed_at = excluded.claimed_at, expires_at = excluded.expires_at
  WHERE idempotency_keys.expires_at <= $7
    OR (idempotency_keys.state = 'running' AND idempotency_keys.claimed_at < $8)
  RETURNING claim_id`;

export const HELD_SQL =
  "SELECT request_hash, state, answer FROM idempotency_keys WHERE account_id = $1 AND key = $2";

/** Keeps the answer ($4) of the claim $3 holds: state $5 'done', or 'dropped' (answer NULL: too large). */
export const COMPLETE_SQL = `
  UPDATE idempotency_keys SET answer = $4, state = $5
  WHERE account_id = $1 AND key = $2 AND claim_id = $3`;

/** The COMPLETE_SQL values for an answer (undefined: too large to keep). */
export function completeParams(
  accountId: string,
  key: string,
  claimId: string,
  answer: Uint8Array | undefined,
) {
  return [
    accountId,
    key,
    claimId,
    answer === undefined ? null : Buffer.from(answer),
    answer === undefined ? "dropped" : "done",
  ];
}

export const RELEASE_SQL =
  "DELETE FROM idempotency_keys WHERE account_id = $1 AND key = $2 AND claim_id = $3";

export const SWEEP_SQL = "DELETE FROM idempotency_keys WHERE expires_at <= $1";

/** A held key's row. */
export interface HeldRow {
  readonly request_hash: string;
  readonly state: "running" | "done" | "dropped";
  readonly answer: Uint8Array | null;
}

/** The record a held row stands for. */
export function heldRecord(row: HeldRow) {
  return {
    requestHash: row.request_hash,
    answer: row.state === "done" && row.answer !== null ? new Uint8Array(row.answer) : undefined,
    answerDropped: row.state === "dropped",
  };
}
