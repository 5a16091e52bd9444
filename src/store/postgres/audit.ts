import pg from "pg";
import { SYSTEM_X402 } from "../../core/ports/x402.js";
import {
  AUDIT_QUERIES,
  type AuditResults,
  type AuditRows,
  checkLedger,
  spendDaysQuery,
} from "../shared/ledger-audit.js";
import { inTransaction } from "./database.js";

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
 * PostgreSQL's balances as the audit compares them with the entries' replay: each account's
 * totals per chain as the ledger port reads them (ledger_totals, migration 18: system:revenue
 * credited with the revenue columns of the paying accounts' rows; migration 19: system:x402
 * debited and credited with their x402 columns; migration 22: each account's settlements'
 * releases beside its row applied), so both stores report the same (account, chain) totals.
 */
const PG_BALANCES = `SELECT account, chain, debits_pending, debits_posted, credits_pending, credits_posted
                       FROM ledger_totals`;

/**
 * Settlements' releases (migration 22) that their balance row could not have held: more released
 * than the row holds pending (for the account, or as its revenue). Either means a release
 * counted twice or written for holds the row never held.
 */
const RELEASE_ROWS = `
  SELECT r.account, r.chain, r.released, b.debits_pending, b.revenue_pending
    FROM balance_releases r JOIN ledger_balances b ON b.account = r.account AND b.chain = r.chain AND b.shard = 0
   WHERE r.released > b.debits_pending OR r.released > b.revenue_pending
   ORDER BY 1, 2`;

/**
 * Each account's revenue columns (migration 18), with its settlements' releases applied
 * (migration 22), that disagree with its entries: revenue_pending
 * with its open holds' pending entries to system:revenue, revenue_posted with its charges. The
 * balances check sees system:revenue's total; this one sees which account's row carries it.
 */
const REVENUE_ROWS = `
  SELECT COALESCE(b.account, o.account) AS account, COALESCE(b.chain, o.chain) AS chain,
         COALESCE(b.revenue_pending, 0) AS stored_pending, COALESCE(o.pending, 0) AS pending,
         COALESCE(b.revenue_posted, 0) AS stored_posted, COALESCE(o.posted, 0) AS posted
    FROM (SELECT b.account, b.chain, b.revenue_pending - COALESCE(r.released, 0) AS revenue_pending,
                 b.revenue_posted + COALESCE(r.charged, 0) AS revenue_posted
            FROM ledger_balances b LEFT JOIN balance_releases r ON r.account = b.account AND r.chain = b.chain
           WHERE b.revenue_pending - COALESCE(r.released, 0) <> 0 OR b.revenue_posted + COALESCE(r.charged, 0) <> 0) b
    FULL JOIN (SELECT e.debit_account AS account, e.chain,
                      COALESCE(SUM(e.amount) FILTER (WHERE e.pending AND r.hold_id IS NULL), 0) AS pending,
                      COALESCE(SUM(e.amount) FILTER (WHERE NOT e.pending), 0) AS posted
                 FROM ledger_entries e LEFT JOIN hold_resolutions r ON r.hold_id = e.hold_id
                WHERE e.credit_account = 'system:revenue' AND e.kind IN ('hold', 'charge')
                GROUP BY e.debit_account, e.chain) o
      ON o.account = b.account AND o.chain = b.chain
   WHERE COALESCE(b.revenue_pending, 0) <> COALESCE(o.pending, 0)
      OR COALESCE(b.revenue_posted, 0) <> COALESCE(o.posted, 0)
   ORDER BY 1, 2`;

/**
 * Each account's x402 columns (migration 19) that disagree with its entries: x402_in with its
 * payments' credits from system:x402, x402_out with its returns to it (entries of kind 'x402').
 * The balances check sees system:x402's total; this one sees which account's row carries it.
 */
const X402_ROWS = `
  SELECT COALESCE(b.account, o.account) AS account, COALESCE(b.chain, o.chain) AS chain,
         COALESCE(b.x402_in, 0) AS stored_in, COALESCE(o.x402_in, 0) AS x402_in,
         COALESCE(b.x402_out, 0) AS stored_out, COALESCE(o.x402_out, 0) AS x402_out
    FROM (SELECT account, chain, x402_in, x402_out FROM ledger_balances WHERE x402_in <> 0 OR x402_out <> 0) b
    FULL JOIN (SELECT CASE WHEN e.debit_account = '${SYSTEM_X402}' THEN e.credit_account ELSE e.debit_account END
                        AS account, e.chain,
                      COALESCE(SUM(e.amount) FILTER (WHERE e.debit_account = '${SYSTEM_X402}'), 0) AS x402_in,
                      COALESCE(SUM(e.amount) FILTER (WHERE e.credit_account = '${SYSTEM_X402}'), 0) AS x402_out
                 FROM ledger_entries e
                WHERE e.kind = 'x402' AND NOT e.pending
                  AND (e.debit_account = '${SYSTEM_X402}' OR e.credit_account = '${SYSTEM_X402}')
                GROUP BY 1, 2) o
      ON o.account = b.account AND o.chain = b.chain
   WHERE COALESCE(b.x402_in, 0) <> COALESCE(o.x402_in, 0)
      OR COALESCE(b.x402_out, 0) <> COALESCE(o.x402_out, 0)
   ORDER BY 1, 2`;

/**
 * The ledger audit (see `auditLedger`) over PostgreSQL: the same reads and checks, in one
 * REPEATABLE READ, READ ONLY transaction, so every query sees one snapshot while hosts keep
 * writing; and where each account's row carries system:revenue's part (REVENUE_ROWS) and
 * system:x402's (X402_ROWS).
 */
export async function auditPostgres(pool: pg.Pool): Promise<string[]> {
  return inTransaction(
    pool,
    async (client) => {
      const rows: Record<string, AuditRows> = {};
      const queries = { ...AUDIT_QUERIES, balances: PG_BALANCES, spendDays: spendDaysQuery("spend_totals") };
      for (const [name, sql] of Object.entries(queries)) {
        rows[name] = (await client.query({ text: sql, types: EXACT_INTEGERS })).rows as AuditRows;
      }
      const revenue = (await client.query({ text: REVENUE_ROWS, types: EXACT_INTEGERS })).rows;
      const x402 = (await client.query({ text: X402_ROWS, types: EXACT_INTEGERS })).rows;
      const releases = (await client.query({ text: RELEASE_ROWS, types: EXACT_INTEGERS })).rows;
      return [
        ...checkLedger(rows as AuditResults),
        ...releases.map(
          (r) =>
            `${r.account} on ${r.chain}: its settlements released ${r.released} beside a row holding` +
            ` ${r.debits_pending} pending, ${r.revenue_pending} as revenue`,
        ),
        ...revenue.map(
          (r) =>
            `${r.account} on ${r.chain}: its row holds revenue pending ${r.stored_pending}, posted ${r.stored_posted};` +
            ` its entries give ${r.pending}, ${r.posted}`,
        ),
        ...x402.map(
          (r) =>
            `${r.account} on ${r.chain}: its row holds x402 in ${r.stored_in}, out ${r.stored_out};` +
            ` its entries give ${r.x402_in}, ${r.x402_out}`,
        ),
      ];
    },
    "REPEATABLE READ READ ONLY",
  );
}
