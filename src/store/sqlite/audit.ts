import { AUDIT_QUERIES, type AuditResults, type AuditRows, checkLedger } from "../shared/ledger-audit.js";
import type { Db } from "./database.js";

/**
 * Checks the ledger's invariants from first principles and returns every violation found
 * (empty when sound): each running balance equals the replay of its entries; per chain,
 * Σdebits = Σcredits for pending and posted alike; no user balance is overdrawn; every hold
 * has the pending entry it should, each of its raises one too (their sum the open-list row's
 * `raised` while it is open), a charge no larger than it holds with its raises, and an open-list
 * row exactly while unresolved; the onchain tables agree with the ledger (`checkOnchain`); and each
 * x402 payment's credit, return and collection agree with it, its status and its call's charge
 * (`checkX402`).
 * Reads in one transaction, so it sees a consistent snapshot.
 */
export function auditLedger(db: Db): string[] {
  const read = db.transaction(() => {
    const rows: Record<string, AuditRows> = {};
    for (const [name, sql] of Object.entries(AUDIT_QUERIES))
      rows[name] = db.prepare(sql).safeIntegers(true).all() as AuditRows;
    return rows as AuditResults;
  });
  return checkLedger(read());
}
