import { SYSTEM_X402 } from "../../core/ports/x402.js";

type Row = Record<string, unknown>;

/**
 * The payment an 'x402' entry belongs to, by its id: 'x402ret_<payment id>' (a return) or
 * 'x402_<payment id>' (a credit). The prefixes differ in their fifth character, so no id is
 * read both ways.
 */
const PAYMENT_OF_ENTRY = `CASE WHEN substr(e.id, 1, 8) = 'x402ret_' THEN substr(e.id, 9)
                               WHEN substr(e.id, 1, 5) = 'x402_' THEN substr(e.id, 6) END`;

/**
 * The reads of the x402 checks, in SQL both stores speak (part of the ledger audit's snapshot;
 * see ledger-audit.ts). `charged` is what the payment's hold was charged: its charge entries,
 * none when it was released or expired (or never placed).
 */
export const X402_AUDIT_QUERIES = {
  x402Payments: `SELECT p.id, p.status, p.authorised, p.settled, p.tx_hash, p.collected_at, p.closed_at, p.cleared_at,
            (SELECT e.amount FROM ledger_entries e WHERE e.id = 'x402_' || p.id AND e.kind = 'x402'
                AND e.debit_account = '${SYSTEM_X402}' AND e.credit_account = p.account_id
                AND e.chain = p.chain) AS credit_entry,
            (SELECT e.amount FROM ledger_entries e WHERE e.id = 'x402ret_' || p.id AND e.kind = 'x402'
                AND e.debit_account = p.account_id AND e.credit_account = '${SYSTEM_X402}'
                AND e.chain = p.chain) AS return_entry,
            (SELECT COUNT(*) FROM ledger_entries e WHERE e.id = 'x402ret_' || p.id) AS returns,
            (SELECT COALESCE(SUM(e.amount), 0) FROM ledger_entries e
              WHERE e.hold_id = p.hold_id AND e.kind = 'charge') AS charged
       FROM x402_payments p`,
  // Entries of kind 'x402' that are not their payment's credit or return as it should be.
  x402StrayEntries: `SELECT e.id FROM ledger_entries e
       LEFT JOIN x402_payments p ON p.id = ${PAYMENT_OF_ENTRY}
      WHERE e.kind = 'x402' AND (p.id IS NULL OR e.chain <> p.chain OR NOT (
              (substr(e.id, 1, 8) = 'x402ret_' AND e.debit_account = p.account_id
                 AND e.credit_account = '${SYSTEM_X402}')
           OR (substr(e.id, 1, 5) = 'x402_' AND e.debit_account = '${SYSTEM_X402}'
                 AND e.credit_account = p.account_id)))`,
} as const;

/**
 * The x402 payments' invariants (part of the ledger audit): each payment has its credit entry
 * for exactly what it authorised; an open ('authorised' or 'collected') payment has no return
 * entry and no closing time; a closed one returned exactly what its call did not spend
 * (authorised less its hold's charge; no entry when that is 0) and has a closing time; a
 * collected one has collected something (settled > 0), by a transaction, at a recorded time;
 * only a collected or settled payment has collected anything onchain or a collection time; only
 * a failed one is cleared; and every 'x402' entry is one of those credits or returns.
 */
export function checkX402(
  rows: { readonly [K in keyof typeof X402_AUDIT_QUERIES]: readonly Row[] },
): string[] {
  const problems: string[] = [];
  for (const p of rows.x402Payments) {
    const id = p.id as string;
    const status = p.status as string;
    const authorised = p.authorised as bigint;
    const settled = p.settled as bigint;
    if (p.credit_entry !== authorised)
      problems.push(
        `x402 payment ${id}: authorises ${authorised}, its credit entry is ${p.credit_entry ?? "missing"}`,
      );
    if (status === "authorised" || status === "collected") {
      if (p.returns !== 0n) problems.push(`x402 payment ${id}: open, but its return is posted`);
      if (p.closed_at !== null) problems.push(`x402 payment ${id}: open, but has a closing time`);
    } else {
      const charged = p.charged as bigint;
      const owed = authorised - charged;
      const returned = (p.return_entry as bigint | null) ?? 0n;
      if (returned !== owed)
        problems.push(
          `x402 payment ${id}: returned ${returned}, but authorised ${authorised} less its call's charge ${charged} is ${owed}`,
        );
      if (p.closed_at === null) problems.push(`x402 payment ${id}: ${status} without a closing time`);
    }
    const collects = status === "collected" || status === "settled";
    if (!collects && settled !== 0n)
      problems.push(`x402 payment ${id}: ${status}, yet ${settled} collected onchain`);
    if (!collects && p.collected_at !== null)
      problems.push(`x402 payment ${id}: ${status}, yet has a collection time`);
    if (status === "collected") {
      if (settled <= 0n) problems.push(`x402 payment ${id}: collected, but nothing collected onchain`);
      if (p.tx_hash === "") problems.push(`x402 payment ${id}: collected, without its transaction`);
      if (p.collected_at === null) problems.push(`x402 payment ${id}: collected, without a collection time`);
    }
    if (status !== "failed" && p.cleared_at !== null)
      problems.push(`x402 payment ${id}: ${status}, yet cleared as a failed one`);
  }
  for (const e of rows.x402StrayEntries)
    problems.push(`ledger entry ${e.id}: of kind x402, but no payment's credit or return`);
  return problems;
}
