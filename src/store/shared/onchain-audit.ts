import { SYSTEM_WITHDRAWAL_FEES, SYSTEM_WITHDRAWALS } from "../../core/ports/ledger.js";

type Row = Record<string, unknown>;

/**
 * The reads of the onchain checks, in SQL both stores speak (part of the ledger audit's
 * snapshot; see ledger-audit.ts).
 */
export const ONCHAIN_AUDIT_QUERIES = {
  chargedWithoutIntent: `SELECT r.hold_id, r.amount AS charged, i.amount AS intent
       FROM hold_resolutions r LEFT JOIN settlement_intents i ON i.hold_id = r.hold_id
      WHERE r.status = 'settled' AND r.amount > 0 AND (i.amount IS NULL OR i.amount <> r.amount)`,
  intentWithoutCharge: `SELECT i.hold_id FROM settlement_intents i LEFT JOIN hold_resolutions r ON r.hold_id = i.hold_id
      WHERE r.status IS NULL OR r.status <> 'settled'`,
  settlementTransfers: `SELECT t.id, t.amount, t.account_id, t.chain,
            (SELECT COALESCE(SUM(onchain_amount), 0) FROM settlement_intents i WHERE i.transfer_id = t.id) AS covered,
            (SELECT COUNT(*) FROM settlement_intents i WHERE i.transfer_id = t.id
                AND (i.account_id <> t.account_id OR i.chain <> t.chain)) AS foreign_intents
       FROM chain_transfers t WHERE t.kind = 'settlement'`,
  withdrawalsWithoutDebit: `SELECT * FROM (
         SELECT t.id, t.amount, t.fee,
                (SELECT e.amount FROM ledger_entries e WHERE e.id = t.id || '/withdrawal' AND e.kind = 'withdrawal'
                    AND e.debit_account = t.account_id AND e.credit_account = '${SYSTEM_WITHDRAWALS}'
                    AND e.chain = t.chain) AS entry,
                (SELECT e.amount FROM ledger_entries e WHERE e.id = t.id || '/fee' AND e.kind = 'withdrawal'
                    AND e.debit_account = t.account_id AND e.credit_account = '${SYSTEM_WITHDRAWAL_FEES}'
                    AND e.chain = t.chain) AS fee_entry
           FROM chain_transfers t WHERE t.kind = 'withdrawal') w
      WHERE w.entry IS NULL OR w.entry <> w.amount OR COALESCE(w.fee_entry, 0) <> w.fee`,
  withdrawalTotals:
    "SELECT chain, SUM(amount) AS amount, SUM(fee) AS fee FROM chain_transfers WHERE kind = 'withdrawal' GROUP BY chain",
  depositsWithoutCredit: `SELECT d.chain, d.tx_hash, d.log_index, d.amount, e.amount AS entry FROM deposits d
       LEFT JOIN ledger_entries e ON e.id = d.entry_id AND e.kind = 'deposit' AND e.credit_account = d.account_id
      WHERE d.amount > 0 AND (e.amount IS NULL OR e.amount <> d.amount)`,
  depositedTotals: "SELECT account_id, chain, SUM(amount) AS s FROM deposits GROUP BY account_id, chain",
  committedByIntents:
    "SELECT account_id, chain, SUM(onchain_amount) AS s FROM settlement_intents GROUP BY account_id, chain",
  committedByWithdrawals:
    "SELECT account_id, chain, SUM(amount + fee) AS s FROM chain_transfers WHERE kind = 'withdrawal' GROUP BY account_id, chain",
  backing: "SELECT account_id, chain, deposited, committed FROM onchain_backing",
} as const;

/**
 * The onchain tables' invariants (part of the ledger audit): every charged call has exactly one
 * settlement intent for its whole charge; each settlement transfer moves exactly the onchain
 * part of the intents it covers; each withdrawal transfer has its ledger debit and, with a fee,
 * its fee entry; per chain the withdrawals and withdrawal-fees accounts hold exactly the
 * transfers' amounts and fees (`balances`: the ledger audit's per-account sums); each credited
 * deposit has its ledger credit; and per (account, chain) the backing counters replay from
 * deposits, intents and withdrawals (amount + fee), never committing more than was deposited.
 */
export function checkOnchain(
  rows: { readonly [K in keyof typeof ONCHAIN_AUDIT_QUERIES | "balances"]: readonly Row[] },
): string[] {
  const problems: string[] = [];
  for (const r of rows.chargedWithoutIntent) {
    problems.push(
      `hold ${r.hold_id}: charged ${r.charged} but its settlement intent is ${r.intent ?? "missing"}`,
    );
  }
  for (const r of rows.intentWithoutCharge) {
    problems.push(`settlement intent ${r.hold_id} has no settled hold`);
  }
  for (const r of rows.settlementTransfers) {
    if (r.amount !== r.covered)
      problems.push(`settlement ${r.id}: moves ${r.amount}, its calls total ${r.covered}`);
    if (r.foreign_intents !== 0n)
      problems.push(`settlement ${r.id}: covers another account's or chain's calls`);
  }
  for (const r of rows.withdrawalsWithoutDebit) {
    if (r.entry !== r.amount)
      problems.push(`withdrawal ${r.id}: moves ${r.amount}, its ledger debit is ${r.entry ?? "missing"}`);
    if ((r.fee_entry ?? 0n) !== r.fee)
      problems.push(`withdrawal ${r.id}: fee ${r.fee}, its fee entry is ${r.fee_entry ?? "missing"}`);
  }
  problems.push(...checkWithdrawalAccounts(rows.withdrawalTotals, rows.balances));
  for (const r of rows.depositsWithoutCredit) {
    problems.push(
      `deposit ${r.chain} ${r.tx_hash}#${r.log_index}: credited ${r.amount}, ledger has ${r.entry ?? "nothing"}`,
    );
  }
  const expected = new Map<string, { deposited: bigint; committed: bigint }>();
  const slot = (account: string, chain: string) => {
    const key = `${account}\u0000${chain}`;
    const v = expected.get(key) ?? { deposited: 0n, committed: 0n };
    expected.set(key, v);
    return v;
  };
  for (const r of rows.depositedTotals)
    slot(r.account_id as string, r.chain as string).deposited += r.s as bigint;
  for (const r of rows.committedByIntents)
    slot(r.account_id as string, r.chain as string).committed += r.s as bigint;
  for (const r of rows.committedByWithdrawals)
    slot(r.account_id as string, r.chain as string).committed += r.s as bigint;
  const stored = new Map<string, Row>();
  for (const r of rows.backing) stored.set(`${r.account_id}\u0000${r.chain}`, r);
  for (const [key, want] of expected) {
    const have = stored.get(key);
    const where = key.replace("\u0000", " on ");
    const deposited = (have?.deposited as bigint | undefined) ?? 0n;
    const committed = (have?.committed as bigint | undefined) ?? 0n;
    if (deposited !== want.deposited)
      problems.push(`${where}: backing deposited ${deposited}, deposits give ${want.deposited}`);
    if (committed !== want.committed)
      problems.push(`${where}: backing committed ${committed}, transfers give ${want.committed}`);
    if (want.committed > want.deposited)
      problems.push(`${where}: commits ${want.committed} onchain, only ${want.deposited} deposited`);
  }
  for (const [key, have] of stored) {
    if (!expected.has(key) && (have.deposited !== 0n || have.committed !== 0n))
      problems.push(`${key.replace("\u0000", " on ")}: backing without deposits`);
  }
  return problems;
}

/**
 * Per chain, what the withdrawals account and the withdrawal-fees account hold (credits less
 * debits) against the sums of the withdrawal transfers' amounts and fees: an entry to either
 * account that no transfer accounts for shows here.
 */
function checkWithdrawalAccounts(totals: readonly Row[], balances: readonly Row[]): string[] {
  const expected = new Map<string, bigint>();
  for (const t of totals) {
    expected.set(`${SYSTEM_WITHDRAWALS}\u0000${t.chain}`, t.amount as bigint);
    expected.set(`${SYSTEM_WITHDRAWAL_FEES}\u0000${t.chain}`, t.fee as bigint);
  }
  const held = new Map<string, bigint>();
  for (const b of balances) {
    if (b.account !== SYSTEM_WITHDRAWALS && b.account !== SYSTEM_WITHDRAWAL_FEES) continue;
    held.set(`${b.account}\u0000${b.chain}`, (b.credits_posted as bigint) - (b.debits_posted as bigint));
  }
  const problems: string[] = [];
  for (const key of new Set([...expected.keys(), ...held.keys()])) {
    const want = expected.get(key) ?? 0n;
    const have = held.get(key) ?? 0n;
    if (want !== have)
      problems.push(`${key.replace("\u0000", " on ")} holds ${have}, its withdrawals give ${want}`);
  }
  return problems;
}
