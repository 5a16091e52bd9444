import pg from "pg";
import { AUDIT_QUERIES, type AuditResults, type AuditRows, checkLedger } from "../shared/ledger-audit.js";

const INT8_OID = 20;
const NUMERIC_OID = 1700;

/** Integers as bigints: the audit compares money exactly, and SUMs of BIGINT are numeric. */
const EXACT_INTEGERS = {
  getTypeParser: (oid: number, format?: "text" | "binary") =>
    oid === INT8_OID || oid === NUMERIC_OID
      ? (value: string) => BigInt(value)
      : (pg.types.getTypeParser(oid, format) as (value: string) => unknown),
};

/**
 * The ledger audit (see `auditLedger`) over PostgreSQL: the same reads and checks, in one
 * REPEATABLE READ, READ ONLY transaction, so every query sees one snapshot while hosts keep
 * writing.
 */
export async function auditPostgres(pool: pg.Pool): Promise<string[]> {
  const client = await pool.connect();
  try {
    await client.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
    const rows: Record<string, AuditRows> = {};
    for (const [name, sql] of Object.entries(AUDIT_QUERIES)) {
      rows[name] = (await client.query({ text: sql, types: EXACT_INTEGERS })).rows as AuditRows;
    }
    await client.query("COMMIT");
    return checkLedger(rows as AuditResults);
  } catch (error) {
    await client.query("ROLLBACK").catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}
