/**
 * Finding deposits in a block's transactions (pure; the adapter fetches the blocks). A deposit
 * is an SPL Token `transfer`, `transferChecked`, `mintTo` or `mintToChecked` — top-level or
 * inner (called by another program) — of the registry mint into the associated token account of
 * a watched owner, in a transaction that succeeded. The destination's mint and owner come from
 * the transaction's token balances (which the RPC reports for every token account it touched),
 * so a plain `transfer`, which does not name its mint, is matched too.
 *
 * Each deposit is identified by (signature, index), where index is the instruction's position
 * in the transaction's execution order: top-level instruction i, then its inner instructions,
 * then instruction i+1… Without inner instructions the index is the top-level index.
 */
import type { ObservedDeposit } from "../../core/ports/chains.js";
import { decodeTokenCredit } from "./token-instructions.js";

/** A compiled instruction with its account indexes into the transaction's account keys. */
export interface ScannedInstruction {
  readonly programIdIndex: number;
  readonly accounts: readonly number[];
  readonly data: Uint8Array;
}

/** The parts of a landed transaction the scan reads (from `getBlock`, encoding `json`). */
export interface ScannedTransaction {
  readonly signature: string;
  /** Static keys, then lookup-table writable, then lookup-table readonly keys. */
  readonly accountKeys: readonly string[];
  readonly instructions: readonly ScannedInstruction[];
  /** Inner instructions by the index of the top-level instruction that invoked them. */
  readonly innerInstructions: ReadonlyMap<number, readonly ScannedInstruction[]>;
  readonly preTokenBalances: readonly TokenBalanceEntry[];
  readonly postTokenBalances: readonly TokenBalanceEntry[];
  /** The transaction failed (it landed, paid its fee, and changed nothing else). */
  readonly failed: boolean;
}

/** A token account's mint and owner, as `preTokenBalances`/`postTokenBalances` report them. */
export interface TokenBalanceEntry {
  readonly accountIndex: number;
  readonly mint: string;
  readonly owner?: string | undefined;
}

/** What counts as a deposit. */
export interface DepositRule {
  readonly mint: string;
  /** The token program that owns the mint. */
  readonly tokenProgram: string;
  /** Watched owners (deposit addresses). */
  readonly recipients: ReadonlySet<string>;
  /** Whether `tokenAccount` is `owner`'s associated token account for the mint. */
  readonly isDepositAccount: (owner: string, tokenAccount: string) => boolean;
}

/** The deposits in one block's transactions, in transaction and instruction order. */
export function findDeposits(
  slot: bigint,
  transactions: readonly ScannedTransaction[],
  rule: DepositRule,
): ObservedDeposit[] {
  const deposits: ObservedDeposit[] = [];
  for (const tx of transactions) {
    if (tx.failed) continue;
    const post = byAccountIndex(tx.postTokenBalances);
    const pre = byAccountIndex(tx.preTokenBalances);
    let ordinal = 0;
    const visit = (ix: ScannedInstruction): void => {
      const index = ordinal++;
      if (tx.accountKeys[ix.programIdIndex] !== rule.tokenProgram) return;
      const credit = decodeTokenCredit(ix.data, ix.accounts.length);
      if (credit === undefined || credit.amount === 0n) return;
      const destinationIndex = ix.accounts[credit.destination]!;
      // A token account closed later in the same transaction has no post balance.
      const destination = post.get(destinationIndex) ?? pre.get(destinationIndex);
      if (destination === undefined || destination.mint !== rule.mint || destination.owner === undefined)
        return;
      if (!rule.recipients.has(destination.owner)) return;
      const destinationAddress = tx.accountKeys[destinationIndex];
      if (destinationAddress === undefined || !rule.isDepositAccount(destination.owner, destinationAddress))
        return;
      let from: string;
      if (credit.source !== undefined) {
        const sourceIndex = ix.accounts[credit.source]!;
        from = (pre.get(sourceIndex) ?? post.get(sourceIndex))?.owner ?? tx.accountKeys[sourceIndex] ?? "";
      } else {
        from = rule.mint;
      }
      deposits.push({
        txHash: tx.signature,
        index,
        position: slot,
        from,
        to: destination.owner,
        amount: credit.amount,
      });
    };
    tx.instructions.forEach((ix, i) => {
      visit(ix);
      for (const inner of tx.innerInstructions.get(i) ?? []) visit(inner);
    });
  }
  return deposits;
}

function byAccountIndex(entries: readonly TokenBalanceEntry[]): Map<number, TokenBalanceEntry> {
  return new Map(entries.map((entry) => [entry.accountIndex, entry]));
}
