import type { CapRefusal, SpendCap } from "../billing/spend-caps.js";
/**
 * The ledger port: what the billing core asks of the store that keeps the money — balances,
 * holds and their outcomes, credits, and the onchain records callers see. Every method answers
 * asynchronously and only once its write is durable, so an implementation may commit in
 * another thread, another process or another host (SQLite in a worker thread by default,
 * PostgreSQL for several hosts). Amounts are bigints in the chain's ledger units (see
 * `billing/money.ts`); the rules that decide them live in the core, the arithmetic that must be
 * atomic (funds checks, double entry) in the store's transactions.
 */

/** The counterpart of every charge: what callers paid, per chain. */
export const SYSTEM_REVENUE = "system:revenue";
/** The counterpart of operator credits: money the operator vouched for off-chain. */
export const SYSTEM_MANUAL_CREDIT = "system:manual-credit";
/** The counterpart of onchain deposits (used by the deposit watcher). */
export const SYSTEM_DEPOSITS = "system:deposits";
/** The counterpart of withdrawals: funds sent onchain to an address the account named. */
export const SYSTEM_WITHDRAWALS = "system:withdrawals";
/**
 * The counterpart of withdrawals' network fees: what accounts paid towards the treasury's cost
 * of sending their withdrawals (see docs/chains.md, "Withdrawals").
 */
export const SYSTEM_WITHDRAWAL_FEES = "system:withdrawal-fees";

/** Running totals of one ledger account on one chain, in the chain's ledger units (see money.ts). */
export interface BalanceRow {
  readonly account: string;
  readonly chain: string;
  readonly debitsPending: bigint;
  readonly debitsPosted: bigint;
  readonly creditsPending: bigint;
  readonly creditsPosted: bigint;
}

/** What a call delivered, as recorded with its settlement. */
export interface UsageCounts {
  readonly inputTokens: bigint;
  readonly outputTokens: bigint;
  readonly cacheWrite5mTokens: bigint;
  readonly cacheWrite1hTokens: bigint;
  readonly cacheReadTokens: bigint;
  readonly images: number;
  /**
   * The configured name of the provider endpoint that served the call, when a router chose it
   * (docs/providers.md); absent otherwise (stored as '').
   */
  readonly endpoint?: string;
}

/** Usage with every count zero: a hold voided or expired, a settle whose counts are gone. */
export const ZERO_USAGE: UsageCounts = {
  inputTokens: 0n,
  outputTokens: 0n,
  cacheWrite5mTokens: 0n,
  cacheWrite1hTokens: 0n,
  cacheReadTokens: 0n,
  images: 0,
};

/**
 * A hold: what was reserved, and the call it was reserved for. What it holds is `amount` (as
 * placed) plus `raised` (the sum of its raises): see {@link heldOf}.
 */
export interface HoldRow {
  readonly seq: number;
  readonly id: string;
  readonly accountId: string;
  readonly requestId: string;
  readonly keyId: string;
  readonly chain: string;
  /** What the hold reserved when it was placed; never changes. */
  readonly amount: bigint;
  /** The sum of the hold's raises (0n when never raised); see {@link LedgerStore.raiseHold}. */
  readonly raised: bigint;
  readonly callKind: "text" | "image";
  readonly model: string;
  readonly inputTokens: bigint;
  readonly maxTokens: bigint;
  readonly imageSize: string;
  readonly imageCount: number;
  readonly createdAt: number;
}

export type ResolutionStatus = "settled" | "released" | "expired";

/** How a hold ended. */
export interface ResolutionRow {
  readonly holdId: string;
  readonly status: ResolutionStatus;
  /** Charged: zero unless settled. */
  readonly amount: bigint;
  readonly usage: UsageCounts;
  /** The priced breakdown (charge-record JSON), '' when none was recorded. */
  readonly charges: string;
  readonly resolvedAt: number;
}

/** A hold with its outcome, if it has one. */
export interface HoldState {
  readonly hold: HoldRow;
  readonly resolution: ResolutionRow | undefined;
}

/** A hold to place; `amount` is the worst case in the chain's ledger units. */
export type NewHold = Omit<HoldRow, "seq" | "raised">;

/**
 * What a hold holds: its amount as placed plus its raises. A charge never exceeds it; settling
 * or voiding the hold releases all of it but the charge.
 */
export function heldOf(hold: HoldRow): bigint {
  return hold.amount + hold.raised;
}

/**
 * A raise of an open hold, recorded (append-only) with the hold's history: `amount` more held
 * for pass `pass` of the call. The raise's id is (hold id, pass): a raise retried with the same
 * pass finds the first one. Pass 1 is the hold itself, so raises start at pass 2.
 */
export interface RaiseRow {
  readonly holdId: string;
  readonly pass: number;
  /** Ledger units, > 0. */
  readonly amount: bigint;
  readonly createdAt: number;
}

/** A raise to record. */
export type NewRaise = RaiseRow;

/** The outcome of {@link LedgerStore.raiseHold}. */
export type RaiseResult =
  /**
   * Raised now, or raised before by the same amount (a retry: nothing more held); `state` is the
   * hold as it stands, its `raised` the new total.
   */
  | { readonly kind: "raised" | "existing"; readonly state: HoldState }
  | { readonly kind: "not-found" }
  /** This pass of the hold was raised before by another amount. */
  | { readonly kind: "conflict" }
  /** The hold has resolved (settled, released or expired): it can no longer be raised. */
  | { readonly kind: "not-open"; readonly state: HoldState }
  /** The account's available funds on the hold's chain do not cover the raise; nothing written. */
  | { readonly kind: "insufficient"; readonly available: bigint }
  /** A spend cap of the account or key leaves less than the raise (checked with the funds). */
  | { readonly kind: "capped"; readonly refusal: CapRefusal };

/** The outcome of {@link LedgerStore.placeHold}. */
export type PlaceHoldResult =
  | { readonly kind: "placed" | "existing"; readonly state: HoldState }
  /** The id exists for a different call. */
  | { readonly kind: "conflict" }
  | { readonly kind: "insufficient"; readonly available: bigint }
  /** A spend cap of the account or key leaves less than the hold (checked with the funds). */
  | { readonly kind: "capped"; readonly refusal: CapRefusal };

/** The outcome of settling or voiding a hold (`exceeds`: the charge is above what it holds). */
export type ResolveResult =
  | { readonly kind: "resolved"; readonly state: HoldState }
  | { readonly kind: "not-found" }
  | { readonly kind: "already-resolved"; readonly state: HoldState }
  | { readonly kind: "exceeds"; readonly state: HoldState };

/** A credit to post. */
export interface NewCredit {
  readonly entryId: string;
  readonly accountId: string;
  readonly chain: string;
  readonly amount: bigint;
  /** The system account the money comes from. */
  readonly from: string;
  readonly memo: string;
  readonly createdAt: number;
}

/**
 * A posted (non-pending) entry outside the hold cycle: a deposit, a withdrawal, or an x402
 * payment's credit or return (see x402.ts).
 */
export interface PostedEntry {
  readonly id: string;
  readonly chain: string;
  readonly debit: string;
  readonly credit: string;
  readonly amount: bigint;
  readonly kind: "deposit" | "withdrawal" | "x402";
  readonly memo: string;
  readonly createdAt: number;
}

/** The outcome of {@link LedgerStore.credit}. */
export type CreditResult =
  | { readonly kind: "credited" | "existing"; readonly balance: BalanceRow }
  | { readonly kind: "conflict" }
  /** The balance would leave the int64 range. */
  | { readonly kind: "overflow" };

/** Funds a user account may spend now: credits_posted − debits_posted − debits_pending. */
export function availableOf(balance: BalanceRow): bigint {
  return balance.creditsPosted - balance.debitsPosted - balance.debitsPending;
}

/** The ledger: balances, holds, credits. Writes are atomic; each answer comes after its commit. */
export interface LedgerStore {
  /** Whether an account with this id exists. */
  accountExists(accountId: string): Promise<boolean>;
  /**
   * An account as a new hold needs it, in one read: undefined when there is no such account,
   * else the chain it picked (undefined when it never picked one).
   */
  billingAccount(accountId: string): Promise<{ readonly defaultChain: string | undefined } | undefined>;
  /** The chain the account picked, or undefined when it never picked one. */
  defaultChain(accountId: string): Promise<string | undefined>;
  /** Records the chain `auto` bills for this account. */
  setDefaultChain(accountId: string, chain: string, now: number): Promise<void>;
  /** One ledger account's totals on one chain (all zero if it never moved money there). */
  balance(account: string, chain: string): Promise<BalanceRow>;
  /** Every chain on which the ledger account has ever moved money, by chain id. */
  balances(account: string): Promise<BalanceRow[]>;
  /** A hold and its outcome. */
  getHold(holdId: string): Promise<HoldState | undefined>;
  /** An account's holds, newest first, with seq below `beforeSeq`. */
  listHolds(accountId: string, beforeSeq: bigint, limit: number): Promise<HoldState[]>;
  /**
   * Reserves `hold.amount` atomically with the funds check. An existing hold with the same id is
   * returned (`existing`) if it is for the same call, refused (`conflict`) otherwise; nothing is
   * written when funds are short.
   */
  placeHold(hold: NewHold): Promise<PlaceHoldResult>;
  /**
   * Raises an open hold by `raise.amount` atomically with the funds check (available funds on
   * the hold's chain) and the spend caps (the raise counts on the hold's day, against the caps'
   * periods as of the hold): one more pending entry from the account, recorded in the hold's
   * raises. A pass raised before answers `existing` for the same amount (nothing more held),
   * `conflict` for another; a resolved hold is `not-open`. Nothing is written unless `raised`.
   */
  raiseHold(raise: NewRaise): Promise<RaiseResult>;
  /** A hold's raises, by pass. */
  holdRaises(holdId: string): Promise<RaiseRow[]>;
  /** Sets a spend cap (replacing the one for the same account, key, chain and period). */
  setSpendCap(cap: SpendCap, now: number): Promise<void>;
  /** Removes a spend cap; whether there was one. */
  clearSpendCap(cap: Omit<SpendCap, "amount">): Promise<boolean>;
  /** The account's caps, its own and its keys'. */
  spendCaps(accountId: string): Promise<SpendCap[]>;
  /** What `cap`'s holds placed at or after `since` have spent (as the hold-time check counts it). */
  capSpent(cap: SpendCap, since: number): Promise<bigint>;
  /**
   * Posts `charge` (≤ what the hold holds, raises included) and voids the rest of a pending hold, recording the usage, the
   * charge breakdown and the settlement intent in the same transaction. Changes nothing unless
   * the hold is pending.
   */
  settle(
    holdId: string,
    charge: bigint,
    usage: UsageCounts,
    now: number,
    charges: string,
  ): Promise<ResolveResult>;
  /** Voids a pending hold (`released` by the caller, `expired` by the sweeper); nothing is charged. */
  void(holdId: string, status: "released" | "expired", now: number): Promise<ResolveResult>;
  /**
   * Expires up to `limit` holds placed before `cutoff`, in one transaction; returns how many.
   * A hold whose x402 payment is `collected` (ports/x402.ts) is never expired: its charge was
   * collected onchain, and the x402 recovery pass settles it. Nor is one whose payment is still
   * `authorised` with a collection begun (`collectingAt`): the chain may have taken it, and the
   * recovery pass asks the chain before the hold ends.
   */
  expireHolds(cutoff: number, now: number, limit: number): Promise<number>;
  /** Posts a credit from a system account; an entry id seen before answers as the first credit did. */
  credit(credit: NewCredit): Promise<CreditResult>;
  /** The settlements of these calls (calls without a charge have none). */
  settlements(holdIds: readonly string[]): Promise<Map<string, SettlementView>>;
}

/** A deposit found by a scan, mapped to its account and converted to ledger units. */
export interface DepositToCredit {
  readonly txHash: string;
  readonly index: number;
  readonly position: bigint;
  readonly from: string;
  readonly to: string;
  readonly accountId: string;
  /** The asset's smallest units. */
  readonly onchainAmount: bigint;
  /** What the ledger credits (onchain amount at the ledger's scale, dust dropped). */
  readonly amount: bigint;
}

/** A deposit as listed: credited at finality, or seen above the finality line (`amount` 0 while pending). */
export interface DepositRow extends DepositToCredit {
  readonly chain: string;
  readonly credited: boolean;
  /** When credited, or when first seen while pending (unix ms). */
  readonly at: number;
}

/** Where a transfer out of a deposit address stands. */
export type TransferStatus = "queued" | "prepared" | "sent" | "confirmed";

/** A settlement or withdrawal transfer, as stored. */
export interface TransferRow {
  readonly seq: number;
  readonly id: string;
  readonly kind: "settlement" | "withdrawal";
  readonly accountId: string;
  readonly chain: string;
  readonly to: string;
  /** Ledger units. */
  readonly amount: bigint;
  readonly status: TransferStatus;
  readonly txHash: string;
  readonly raw: string;
  readonly attempts: number;
  readonly nextAttemptAt: number;
  readonly lastError: string;
  readonly createdAt: number;
  readonly confirmedAt: number | undefined;
  /** Calls a settlement covers (0 for a withdrawal). */
  readonly calls: number;
  /** A withdrawal's network fee, debited with it on top of `amount` (0 for a settlement). */
  readonly fee: bigint;
}

/** A withdrawal to write. */
export interface NewWithdrawal {
  readonly id: string;
  readonly accountId: string;
  readonly chain: string;
  readonly to: string;
  /** What `to` receives, in ledger units. */
  readonly amount: bigint;
  /** The network fee, debited on top of `amount` to {@link SYSTEM_WITHDRAWAL_FEES} (≥ 0). */
  readonly fee: bigint;
  readonly now: number;
}

/** The outcome of {@link OnchainStore.withdraw}. */
export type WithdrawResult =
  | { readonly kind: "written" | "existing"; readonly transfer: TransferRow }
  | { readonly kind: "conflict" }
  /**
   * `available`: the most that may leave this account now (spendable and backed onchain), fee
   * included: amount + fee must not exceed it.
   */
  | { readonly kind: "insufficient"; readonly available: bigint };

/** The settlement backlog of one chain. */
export interface BacklogRow {
  readonly chain: string;
  /** Charged calls whose onchain part is not yet in a transfer (batch window). */
  readonly unbatchedCalls: number;
  readonly unbatchedAmount: bigint;
  /** Transfers not yet confirmed, by kind. */
  readonly openSettlements: number;
  readonly openSettlementAmount: bigint;
  readonly openWithdrawals: number;
  readonly openWithdrawalAmount: bigint;
  /** The oldest unconfirmed intent or transfer (unix ms), 0 when none. */
  readonly oldestAt: number;
  /** The newest error of a transfer still open, "" when none. */
  readonly lastError: string;
  /** Settled to the treasury and confirmed (ledger units). */
  readonly confirmedSettlementAmount: bigint;
  /** Charged off-chain (operator credit, nothing to move). */
  readonly offchainAmount: bigint;
}

/** Where a charged call's onchain settlement stands, as its usage row shows it. */
export type SettlementStatus =
  /** Backed by operator credit only: nothing onchain to move (see docs/chains.md). */
  | "offchain"
  /** Waiting for the worker (per call) or for its batch window. */
  | "queued"
  /** Signed and stored; being sent or awaiting confirmation. */
  | "submitted"
  /** Landed at the chain's finality rule. */
  | "confirmed";

/** One call's settlement: the outbox row and, once batched, its transfer. */
export interface SettlementView {
  readonly holdId: string;
  readonly status: SettlementStatus;
  /** Ledger units moved onchain to the treasury for this call. */
  readonly onchainAmount: bigint;
  /** Ledger units settled off-chain (operator credit, no tokens behind them). */
  readonly offchainAmount: bigint;
  /** The transfer covering the call (several calls share one when batched); "" until batched. */
  readonly transferId: string;
  /** Its transaction hash (or signature) once signed; "" before. */
  readonly txHash: string;
}

/** The backlog of a chain with nothing waiting and nothing settled yet. */
export function emptyBacklog(chain: string): { -readonly [K in keyof BacklogRow]: BacklogRow[K] } {
  return {
    chain,
    unbatchedCalls: 0,
    unbatchedAmount: 0n,
    openSettlements: 0,
    openSettlementAmount: 0n,
    openWithdrawals: 0,
    openWithdrawalAmount: 0n,
    oldestAt: 0,
    lastError: "",
    confirmedSettlementAmount: 0n,
    offchainAmount: 0n,
  };
}

/** The onchain side of the ledger that callers see: deposits, withdrawals, the settlement backlog. */
export interface OnchainStore {
  /** Pending deposits, then the newest `limit` credited ones. */
  listDeposits(accountId: string, limit: number): Promise<DepositRow[]>;
  /**
   * Debits the account amount + fee (the amount to {@link SYSTEM_WITHDRAWALS}, the fee to
   * {@link SYSTEM_WITHDRAWAL_FEES}) and queues the transfer of the amount, in one transaction.
   * Idempotent by id: an id seen before answers `existing` when the account, chain, address and
   * amount match (whatever the fee is now), `conflict` otherwise.
   */
  withdraw(withdrawal: NewWithdrawal): Promise<WithdrawResult>;
  /** One transfer (settlement or withdrawal) by id. */
  transfer(id: string): Promise<TransferRow | undefined>;
  /** The account's transfers of one kind, newest first, with seq below `beforeSeq`. */
  listTransfers(
    accountId: string,
    kind: "settlement" | "withdrawal",
    beforeSeq: bigint,
    limit: number,
  ): Promise<TransferRow[]>;
  /** The settlement pipeline of every chain that has one. */
  backlog(): Promise<BacklogRow[]>;
}
