import { SYSTEM_REVENUE } from "../../core/ports/ledger.js";
import { isSystem } from "./ledger-rows.js";
import { checkOnchain, ONCHAIN_AUDIT_QUERIES } from "./onchain-audit.js";
import { checkX402, X402_AUDIT_QUERIES } from "./x402-audit.js";

/** Rows as the audit reads them: every integer a bigint, whichever store answered. */
export type AuditRows = Record<string, unknown>[];

interface Totals {
  debitsPending: bigint;
  debitsPosted: bigint;
  creditsPending: bigint;
  creditsPosted: bigint;
}

const zero = (): Totals => ({ debitsPending: 0n, debitsPosted: 0n, creditsPending: 0n, creditsPosted: 0n });

/**
 * Every key's spend per day that disagrees with its holds (what spend caps read), from `table`:
 * SQLite's spend_days, or PostgreSQL's spend_totals (spend_days less what settlements gave back
 * beside it, migration 22).
 */
export function spendDaysQuery(table: "spend_days" | "spend_totals"): string {
  return `SELECT x.account_id, x.key_id, x.chain, x.day, x.expected, d.spent
                 FROM (SELECT h.account_id, h.key_id, h.chain, h.created_at - h.created_at % 86400000 AS day,
                              SUM(CASE WHEN r.status IS NULL
                                       THEN h.amount + COALESCE((SELECT SUM(x.amount) FROM hold_raises x
                                                                  WHERE x.hold_id = h.id), 0)
                                       ELSE r.amount END) AS expected
                         FROM holds h LEFT JOIN hold_resolutions r ON r.hold_id = h.id
                        GROUP BY h.account_id, h.key_id, h.chain, h.created_at - h.created_at % 86400000) x
                 LEFT JOIN ${table} d
                   ON d.account_id = x.account_id AND d.key_id = x.key_id AND d.chain = x.chain AND d.day = x.day
                WHERE COALESCE(d.spent, 0) <> x.expected
               UNION ALL
               SELECT d.account_id, d.key_id, d.chain, d.day, 0, d.spent FROM ${table} d
                WHERE d.spent <> 0 AND NOT EXISTS (
                      SELECT 1 FROM holds h
                       WHERE h.account_id = d.account_id AND h.key_id = d.key_id AND h.chain = d.chain
                         AND h.created_at >= d.day AND h.created_at < d.day + 86400000)`;
}

/**
 * What the audit reads, in SQL both stores speak (SQLite and PostgreSQL): integers come back as
 * bigints (a PostgreSQL reader parses int8 and numeric so), booleans as 0/1 via CASE.
 */
export const AUDIT_QUERIES = {
  entries: `SELECT e.id, e.chain, e.debit_account, e.credit_account, e.amount,
                   CAST(CASE WHEN e.pending THEN 1 ELSE 0 END AS BIGINT) AS pending, e.kind, e.hold_id,
                   r.status AS resolution
              FROM ledger_entries e LEFT JOIN hold_resolutions r ON r.hold_id = e.hold_id`,
  // PostgreSQL spreads a system account over shard rows: the balance is their sum.
  balances: `SELECT account, chain, SUM(debits_pending) AS debits_pending, SUM(debits_posted) AS debits_posted,
                    SUM(credits_pending) AS credits_pending, SUM(credits_posted) AS credits_posted
               FROM ledger_balances GROUP BY account, chain`,
  // A hold's pending entries are its own ('<id>/hold') and its raises' ('<id>/raise/<pass>').
  holds: `SELECT h.id, h.amount, r.status, r.amount AS charged,
                 (SELECT amount FROM ledger_entries WHERE id = h.id || '/hold') AS held_entry,
                 (SELECT amount FROM ledger_entries WHERE id = h.id || '/charge') AS charge_entry,
                 (SELECT 1 FROM open_holds o WHERE o.hold_id = h.id) AS open,
                 (SELECT o.raised FROM open_holds o WHERE o.hold_id = h.id) AS open_raised,
                 (SELECT SUM(x.amount) FROM hold_raises x WHERE x.hold_id = h.id) AS raised,
                 (SELECT SUM(e.amount) FROM ledger_entries e
                   WHERE e.hold_id = h.id AND e.pending AND e.kind = 'hold') AS pending_entries
            FROM holds h LEFT JOIN hold_resolutions r ON r.hold_id = h.id`,
  // Each raise with the pending entry it should have written, and its hold.
  raises: `SELECT x.hold_id, x.pass, x.amount, h.account_id, h.chain, e.id AS entry_id, e.amount AS entry_amount,
                  CAST(CASE WHEN e.pending THEN 1 ELSE 0 END AS BIGINT) AS entry_pending, e.kind AS entry_kind,
                  e.hold_id AS entry_hold, e.debit_account, e.credit_account, e.chain AS entry_chain
             FROM hold_raises x JOIN holds h ON h.id = x.hold_id
             LEFT JOIN ledger_entries e ON e.id = x.hold_id || '/raise/' || CAST(x.pass AS TEXT)`,
  // Every key's spend per day that disagrees with its holds (what spend caps read).
  spendDays: spendDaysQuery("spend_days"),
  ...ONCHAIN_AUDIT_QUERIES,
  ...X402_AUDIT_QUERIES,
} as const;

/** The audit's reads, one row list per query. */
export type AuditResults = { readonly [K in keyof typeof AUDIT_QUERIES]: AuditRows };

/** The audit's checks over rows read in one consistent snapshot (see {@link AUDIT_QUERIES}). */
export function checkLedger(rows: AuditResults): string[] {
  const problems: string[] = [];
  const replay = new Map<string, Totals>();
  const at = (account: string, chain: string): Totals => {
    const key = `${account}\u0000${chain}`;
    const totals = replay.get(key) ?? zero();
    replay.set(key, totals);
    return totals;
  };
  const entries = rows.entries as unknown as {
    id: string;
    chain: string;
    debit_account: string;
    credit_account: string;
    amount: bigint;
    pending: bigint;
    kind: string;
    hold_id: string | null;
    resolution: string | null;
  }[];
  for (const e of entries) {
    if (e.pending === 1n) {
      // A pending entry counts only until its hold resolves (either way).
      if (e.resolution !== null) continue;
      at(e.debit_account, e.chain).debitsPending += e.amount;
      at(e.credit_account, e.chain).creditsPending += e.amount;
    } else {
      at(e.debit_account, e.chain).debitsPosted += e.amount;
      at(e.credit_account, e.chain).creditsPosted += e.amount;
    }
  }

  const stored = rows.balances as unknown as {
    account: string;
    chain: string;
    debits_pending: bigint;
    debits_posted: bigint;
    credits_pending: bigint;
    credits_posted: bigint;
  }[];
  const perChain = new Map<string, Totals>();
  const seen = new Set<string>();
  for (const row of stored) {
    const key = `${row.account}\u0000${row.chain}`;
    seen.add(key);
    const expected = replay.get(key) ?? zero();
    const actual: Totals = {
      debitsPending: row.debits_pending,
      debitsPosted: row.debits_posted,
      creditsPending: row.credits_pending,
      creditsPosted: row.credits_posted,
    };
    for (const field of Object.keys(actual) as (keyof Totals)[]) {
      if (actual[field] !== expected[field]) {
        problems.push(
          `${row.account} on ${row.chain}: ${field} is ${actual[field]}, replay gives ${expected[field]}`,
        );
      }
    }
    if (!isSystem(row.account) && actual.creditsPosted - actual.debitsPosted - actual.debitsPending < 0n) {
      problems.push(`${row.account} on ${row.chain} is overdrawn`);
    }
    const sum = perChain.get(row.chain) ?? zero();
    sum.debitsPending += actual.debitsPending;
    sum.debitsPosted += actual.debitsPosted;
    sum.creditsPending += actual.creditsPending;
    sum.creditsPosted += actual.creditsPosted;
    perChain.set(row.chain, sum);
  }
  for (const [key, totals] of replay) {
    const moved = totals.debitsPending + totals.debitsPosted + totals.creditsPending + totals.creditsPosted;
    if (!seen.has(key) && moved !== 0n)
      problems.push(`no running balance for ${key.replace("\u0000", " on ")}`);
  }
  for (const [chain, sum] of perChain) {
    if (sum.debitsPending !== sum.creditsPending) {
      problems.push(`${chain}: pending debits ${sum.debitsPending} ≠ pending credits ${sum.creditsPending}`);
    }
    if (sum.debitsPosted !== sum.creditsPosted) {
      problems.push(`${chain}: posted debits ${sum.debitsPosted} ≠ posted credits ${sum.creditsPosted}`);
    }
  }

  const holds = rows.holds as unknown as {
    id: string;
    amount: bigint;
    status: string | null;
    charged: bigint | null;
    held_entry: bigint | null;
    charge_entry: bigint | null;
    open: bigint | null;
    open_raised: bigint | null;
    raised: bigint | null;
    pending_entries: bigint | null;
  }[];
  for (const h of holds) {
    if ((h.held_entry ?? 0n) !== h.amount)
      problems.push(`hold ${h.id}: pending entry ${h.held_entry} ≠ ${h.amount}`);
    // What the hold holds: its amount and its raises, each with its pending entry.
    const raised = h.raised ?? 0n;
    const held = h.amount + raised;
    if ((h.pending_entries ?? 0n) !== held)
      problems.push(
        `hold ${h.id}: pending entries ${h.pending_entries ?? 0n} ≠ its hold ${h.amount} + raises ${raised}`,
      );
    if ((h.open !== null) !== (h.status === null))
      problems.push(`hold ${h.id}: open list disagrees with its state`);
    if (h.open !== null && h.open_raised !== raised)
      problems.push(`hold ${h.id}: open list says raised ${h.open_raised}, its raises ${raised}`);
    if (h.status === null) {
      if (h.charge_entry !== null) problems.push(`hold ${h.id}: charged while pending`);
      continue;
    }
    const charged = h.charged ?? 0n;
    if (charged > held) problems.push(`hold ${h.id}: charged ${charged} above its hold ${held}`);
    if (h.status !== "settled" && charged !== 0n) problems.push(`hold ${h.id}: ${h.status} but charged`);
    if ((h.charge_entry ?? 0n) !== charged)
      problems.push(`hold ${h.id}: charge entry ${h.charge_entry} ≠ ${charged}`);
  }
  for (const x of rows.raises as unknown as {
    hold_id: string;
    pass: bigint;
    amount: bigint;
    account_id: string;
    chain: string;
    entry_id: string | null;
    entry_amount: bigint | null;
    entry_pending: bigint;
    entry_kind: string | null;
    entry_hold: string | null;
    debit_account: string | null;
    credit_account: string | null;
    entry_chain: string | null;
  }[]) {
    const raise = `hold ${x.hold_id} raise ${x.pass}`;
    if (x.entry_id === null) {
      problems.push(`${raise}: no pending entry`);
      continue;
    }
    if (
      x.entry_amount !== x.amount ||
      x.entry_pending !== 1n ||
      x.entry_kind !== "hold" ||
      x.entry_hold !== x.hold_id ||
      x.debit_account !== x.account_id ||
      x.credit_account !== SYSTEM_REVENUE ||
      x.entry_chain !== x.chain
    ) {
      problems.push(
        `${raise}: its entry moves ${x.entry_amount} from ${x.debit_account} to ${x.credit_account} on ${x.entry_chain}` +
          ` (pending ${x.entry_pending}, kind ${x.entry_kind}, hold ${x.entry_hold}), not ${x.amount} pending from` +
          ` ${x.account_id} to ${SYSTEM_REVENUE} on ${x.chain}`,
      );
    }
  }
  for (const d of rows.spendDays as unknown as {
    account_id: string;
    key_id: string;
    chain: string;
    day: bigint;
    expected: bigint;
    spent: bigint | null;
  }[]) {
    problems.push(
      `${d.account_id} key '${d.key_id}' on ${d.chain}, day ${new Date(Number(d.day)).toISOString().slice(0, 10)}: ` +
        `spend_days says ${d.spent ?? "nothing"}, its holds ${d.expected}`,
    );
  }
  problems.push(...checkOnchain(rows));
  problems.push(...checkX402(rows));
  return problems;
}
