import type { CapPeriod, SpendCap } from "../../core/billing/spend-caps.js";
import type {
  BalanceRow,
  HoldRow,
  HoldState,
  NewHold,
  RaiseRow,
  ResolutionStatus,
  SettlementStatus,
  SettlementView,
  TransferRow,
  TransferStatus,
} from "../../core/ports/ledger.js";
import type { X402PaymentRow, X402Scheme, X402Status } from "../../core/ports/x402.js";

/**
 * Rows of the ledger's tables as both stores read them (the same columns in SQLite and
 * PostgreSQL, every money column a bigint) turned into the ports' types, and back.
 */
export type Raw = Record<string, unknown>;

/** Whether a ledger account is one of the gateway's own (allowed to run a negative balance). */
export function isSystem(account: string): boolean {
  return account.startsWith("system:");
}

export function sameCall(a: HoldRow, b: NewHold): boolean {
  return (
    a.accountId === b.accountId &&
    a.chain === b.chain &&
    a.amount === b.amount &&
    a.callKind === b.callKind &&
    a.model === b.model &&
    a.inputTokens === b.inputTokens &&
    a.maxTokens === b.maxTokens &&
    a.imageSize === b.imageSize &&
    a.imageCount === b.imageCount
  );
}

export function toBalance(row: Raw): BalanceRow {
  return {
    account: row.account as string,
    chain: row.chain as string,
    debitsPending: row.debits_pending as bigint,
    debitsPosted: row.debits_posted as bigint,
    creditsPending: row.credits_pending as bigint,
    creditsPosted: row.credits_posted as bigint,
  };
}

export function toHoldState(row: Raw): HoldState {
  const hold: HoldRow = {
    seq: Number(row.seq),
    id: row.id as string,
    accountId: row.account_id as string,
    requestId: row.request_id as string,
    keyId: row.key_id as string,
    chain: row.chain as string,
    amount: row.amount as bigint,
    raised: row.raised as bigint,
    callKind: row.call_kind as "text" | "image",
    model: row.model as string,
    inputTokens: row.input_tokens as bigint,
    maxTokens: row.max_tokens as bigint,
    imageSize: row.image_size as string,
    imageCount: Number(row.image_count),
    createdAt: Number(row.created_at),
  };
  if (row.status === null) return { hold, resolution: undefined };
  return {
    hold,
    resolution: {
      holdId: hold.id,
      status: row.status as ResolutionStatus,
      amount: row.settled_amount as bigint,
      usage: {
        inputTokens: row.u_input as bigint,
        outputTokens: row.u_output as bigint,
        cacheWrite5mTokens: row.u_cw5m as bigint,
        cacheWrite1hTokens: row.u_cw1h as bigint,
        cacheReadTokens: row.u_read as bigint,
        images: Number(row.u_images),
        // Absent rather than '' (migration 16 / PostgreSQL 17): rows without a router stay as they were.
        ...(typeof row.u_endpoint === "string" && row.u_endpoint !== "" ? { endpoint: row.u_endpoint } : {}),
      },
      charges: row.u_charges as string,
      resolvedAt: Number(row.resolved_at),
    },
  };
}

/**
 * The pending entry of a raise (kind 'hold', like the hold's own '<hold id>/hold'): one per
 * (hold, pass), as the raise itself. The ledger audit finds each raise's entry by it.
 */
export function raiseEntryId(raise: Pick<RaiseRow, "holdId" | "pass">): string {
  return `${raise.holdId}/raise/${raise.pass}`;
}

/** A hold_raises row as a raise. */
export function toRaise(row: Raw): RaiseRow {
  return {
    holdId: row.hold_id as string,
    pass: Number(row.pass),
    amount: row.amount as bigint,
    createdAt: Number(row.created_at),
  };
}

export function toTransfer(row: Raw): TransferRow {
  return {
    seq: Number(row.seq),
    id: row.id as string,
    kind: row.kind as "settlement" | "withdrawal",
    accountId: row.account_id as string,
    chain: row.chain as string,
    to: row.to_address as string,
    amount: row.amount as bigint,
    status: row.status as TransferStatus,
    txHash: (row.tx_hash as string | null) ?? "",
    raw: (row.raw as string | null) ?? "",
    attempts: Number(row.attempts),
    nextAttemptAt: Number(row.next_attempt_at),
    lastError: row.last_error as string,
    createdAt: Number(row.created_at),
    confirmedAt: row.confirmed_at === null ? undefined : Number(row.confirmed_at),
    calls: Number(row.calls),
    fee: row.fee as bigint,
  };
}

export function toSettlementView(row: Raw): SettlementView {
  const onchainAmount = row.onchain_amount as bigint;
  const transferStatus = row.status as string | null;
  const status: SettlementStatus =
    onchainAmount === 0n
      ? "offchain"
      : transferStatus === "confirmed"
        ? "confirmed"
        : transferStatus === "prepared" || transferStatus === "sent"
          ? "submitted"
          : "queued";
  return {
    holdId: row.hold_id as string,
    status,
    onchainAmount,
    offchainAmount: row.offchain_amount as bigint,
    transferId: (row.transfer_id as string | null) ?? "",
    txHash: (row.tx_hash as string | null) ?? "",
  };
}

/** A spend_caps row as a cap. */
export function toSpendCap(row: Raw): SpendCap {
  return {
    accountId: row.account_id as string,
    keyId: row.key_id as string,
    chain: row.chain as string,
    period: row.period as CapPeriod,
    amount: row.amount as bigint,
  };
}

/** An x402_payments row as a payment (its money columns read as bigints). */
export function toX402Payment(row: Raw): X402PaymentRow {
  return {
    id: row.id as string,
    holdId: row.hold_id as string,
    accountId: row.account_id as string,
    chain: row.chain as string,
    scheme: row.scheme as X402Scheme,
    payer: row.payer as string,
    authorised: row.authorised as bigint,
    payload: row.payload as string,
    status: row.status as X402Status,
    settled: row.settled as bigint,
    txHash: row.tx_hash as string,
    error: row.error as string,
    createdAt: Number(row.created_at),
    collectedAt: row.collected_at === null ? undefined : Number(row.collected_at),
    collectingAt: row.collecting_at == null ? undefined : Number(row.collecting_at),
    closedAt: row.closed_at === null ? undefined : Number(row.closed_at),
    clearedAt: row.cleared_at === null ? undefined : Number(row.cleared_at),
  };
}
