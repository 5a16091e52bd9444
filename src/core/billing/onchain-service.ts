import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  type BillingService,
  type ChainBacklog,
  ChainBacklogSchema,
  type Deposit,
  DepositSchema,
  TransferStatus,
  type Withdrawal,
  WithdrawalSchema,
} from "../../gen/tollgate/billing/v1/billing_pb.js";
import { callerKey, requireOperator, scopedAccount } from "../caller.js";
import { invalidField } from "../errors.js";
import type { BacklogRow, DepositRow, TransferRow } from "../ports/ledger.js";
import { toBalance, toChain } from "./billing-messages.js";
import { INT64_MAX } from "./money.js";
import type { OnchainBilling } from "./onchain-billing.js";

/** The onchain RPCs of BillingService. */
export type OnchainMethods = Pick<
  ServiceImpl<typeof BillingService>,
  "getDepositAddresses" | "listDeposits" | "withdraw" | "listWithdrawals" | "getSettlementBacklog"
>;

const DEFAULT_PAGE = 100;
const MAX_PAGE = 1000;

/**
 * BillingService's onchain RPCs over {@link OnchainBilling}: reads and withdrawals are scoped
 * to the caller's account (the operator names one); the backlog is operator-only. Withdrawals
 * by the account's own callers count against its withdrawal rate.
 */
export function createOnchainMethods(onchain: OnchainBilling): OnchainMethods {
  return {
    async getDepositAddresses(req, ctx) {
      const accountId = scopedAccount(ctx.values.get(callerKey), req.accountId);
      return {
        accountId,
        addresses: (await onchain.depositAddresses(accountId)).map((a) => ({
          chain: toChain(a.chain),
          address: a.address,
        })),
      };
    },

    async listDeposits(req, ctx) {
      const accountId = scopedAccount(ctx.values.get(callerKey), req.accountId);
      return { deposits: (await onchain.deposits(accountId, pageSize(req.pageSize))).map(toDeposit) };
    },

    async withdraw(req, ctx) {
      const caller = ctx.values.get(callerKey);
      const accountId = scopedAccount(caller, req.accountId);
      const { transfer, balance } = await onchain.withdraw({
        accountId,
        chain: req.chain,
        amount: req.amount,
        to: req.toAddress,
        withdrawalId: req.withdrawalId,
        // The operator moves money on an account's behalf; only the account's own callers are rated.
        limited: caller.kind !== "operator",
      });
      return { withdrawal: toWithdrawal(transfer), balance: toBalance(balance) };
    },

    async listWithdrawals(req, ctx) {
      const accountId = scopedAccount(ctx.values.get(callerKey), req.accountId);
      const size = pageSize(req.pageSize);
      const rows = await onchain.withdrawals(accountId, decodePageToken(req.pageToken), size);
      const last = rows.at(-1);
      return {
        withdrawals: rows.map(toWithdrawal),
        nextPageToken: rows.length === size && last !== undefined ? encodePageToken(last.seq) : "",
      };
    },

    async getSettlementBacklog(_req, ctx) {
      requireOperator(ctx.values.get(callerKey));
      return { chains: (await onchain.backlog()).map(toBacklog) };
    },
  };
}

function toDeposit(d: DepositRow): Deposit {
  return create(DepositSchema, {
    chain: d.chain,
    txHash: d.txHash,
    index: d.index,
    position: d.position,
    fromAddress: d.from,
    toAddress: d.to,
    onchainAmount: d.onchainAmount.toString(),
    amount: d.amount,
    credited: d.credited,
    at: timestampFromMs(d.at),
  });
}

function toWithdrawal(t: TransferRow): Withdrawal {
  return create(WithdrawalSchema, {
    id: t.id,
    accountId: t.accountId,
    chain: t.chain,
    toAddress: t.to,
    amount: t.amount,
    status:
      t.status === "confirmed"
        ? TransferStatus.CONFIRMED
        : t.status === "queued"
          ? TransferStatus.QUEUED
          : TransferStatus.SUBMITTED,
    txHash: t.txHash,
    createdAt: timestampFromMs(t.createdAt),
    confirmedAt: t.confirmedAt === undefined ? undefined : timestampFromMs(t.confirmedAt),
    lastError: t.lastError,
    fee: t.fee,
  });
}

function toBacklog(b: BacklogRow & { readonly treasuryAddress: string }): ChainBacklog {
  return create(ChainBacklogSchema, {
    chain: b.chain,
    unbatchedCalls: BigInt(b.unbatchedCalls),
    unbatchedAmount: b.unbatchedAmount,
    openSettlements: BigInt(b.openSettlements),
    openSettlementAmount: b.openSettlementAmount,
    openWithdrawals: BigInt(b.openWithdrawals),
    openWithdrawalAmount: b.openWithdrawalAmount,
    oldest: b.oldestAt === 0 ? undefined : timestampFromMs(b.oldestAt),
    lastError: b.lastError,
    settledOnchain: b.confirmedSettlementAmount,
    settledOffchain: b.offchainAmount,
    treasuryAddress: b.treasuryAddress,
  });
}

function pageSize(requested: number): number {
  if (requested < 0 || requested > MAX_PAGE) {
    throw invalidField("page_size", `page_size must be between 0 and ${MAX_PAGE}.`);
  }
  return requested === 0 ? DEFAULT_PAGE : requested;
}

function encodePageToken(seq: number): string {
  return Buffer.from(`w:${seq}`).toString("base64url");
}

function decodePageToken(token: string): bigint {
  if (token === "") return INT64_MAX;
  const match = /^w:(\d{1,18})$/.exec(Buffer.from(token, "base64url").toString());
  if (match === null) throw invalidField("page_token", "page_token is not one this service issued.");
  return BigInt(match[1]!);
}
