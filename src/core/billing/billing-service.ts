import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import type { BillingService } from "../../gen/tollgate/billing/v1/billing_pb.js";
import { SpendCapPeriod } from "../../gen/tollgate/billing/v1/billing_pb.js";
import { callerKey, requireOperator, scopedAccount } from "../caller.js";
import { invalidField } from "../errors.js";
import type { AccountStore } from "../ports/accounts.js";
import type { Billing, CapStanding } from "./billing.js";
import { capsNeedOwner, notThePayer } from "./billing-errors.js";
import { fromCall, fromUsage, toBalance, toHold, toPricing, toUsageRow } from "./billing-messages.js";
import { INT64_MAX } from "./money.js";
import type { OnchainBilling } from "./onchain-billing.js";
import { createOnchainMethods } from "./onchain-service.js";
import { httpOrigin, type Receipts, x402ReceiptPath } from "./receipts.js";
import type { CapPeriod } from "./spend-caps.js";
import { x402AccountId } from "./x402-accounts.js";
import type { X402SignIn } from "./x402-sign-in.js";

const DEFAULT_PAGE = 100;
const MAX_PAGE = 1000;

/**
 * The BillingService RPCs over the billing core. Reads are scoped to the caller's account;
 * Credit and the internal Quote/Hold/Settle/Release are operator-only over the network (the
 * Inference service calls {@link Billing} in-process instead). The dev faucet is added by the
 * core (see funding.ts).
 */
export function createBillingService(
  billing: Billing,
  onchain: OnchainBilling,
  webSearchMaxUses: number,
  accounts: Pick<AccountStore, "getKey">,
  receipts: Receipts,
  signIn?: X402SignIn,
): Omit<ServiceImpl<typeof BillingService>, "requestTestFunds" | "prepareFunding" | "clearX402Payer"> {
  return {
    ...createOnchainMethods(onchain),

    getPricing() {
      return toPricing(billing.catalog, billing.chains, webSearchMaxUses);
    },

    async getBalances(req, ctx) {
      const accountId = scopedAccount(ctx.values.get(callerKey), req.accountId);
      const { defaultChain, balances } = await billing.balances(accountId);
      return { accountId, defaultChain, balances: balances.map(toBalance) };
    },

    async setDefaultChain(req, ctx) {
      const accountId = scopedAccount(ctx.values.get(callerKey), req.accountId);
      return { accountId, defaultChain: await billing.setDefaultChain(accountId, req.chain) };
    },

    async setSpendCap(req, ctx) {
      const caller = ctx.values.get(callerKey);
      const accountId = scopedAccount(caller, req.accountId);
      if (caller.kind === "key") throw capsNeedOwner();
      const period = capPeriodOf(req.period);
      if (req.amount !== undefined && req.amount < 0n) throw invalidField("amount", "amount must be ≥ 0.");
      if (req.keyId !== "" && (await accounts.getKey(req.keyId))?.account_id !== accountId) {
        throw invalidField("key_id", `The account has no key ${JSON.stringify(req.keyId)}.`);
      }
      const caps = await billing.setSpendCap(
        { accountId, keyId: req.keyId, chain: req.chain, period },
        req.amount,
      );
      return { accountId, caps: caps.map(toSpendCap) };
    },

    async listSpendCaps(req, ctx) {
      const accountId = scopedAccount(ctx.values.get(callerKey), req.accountId);
      return { accountId, caps: (await billing.spendCaps(accountId)).map(toSpendCap) };
    },

    async getReceipt(req, ctx) {
      const caller = ctx.values.get(callerKey);
      if (req.requestId === "") throw invalidField("request_id", "request_id is required.");
      const origin = originOf(req.origin);
      if (caller.kind !== "anonymous" || signIn === undefined) {
        if (req.signInWithX !== "") {
          throw invalidField(
            "sign_in_with_x",
            "sign_in_with_x is for callers without a key: a key or session reads its own account's receipts.",
          );
        }
        return { jws: await receipts.forCall(scopedAccount(caller, req.accountId), req.requestId, origin) };
      }
      // No key: a call paid with x402, whose payer proves it holds the paying wallet.
      if (req.accountId !== "") {
        throw invalidField(
          "account_id",
          "account_id is for the operator: a signed-in payer reads its own receipts.",
        );
      }
      const payer = await signIn.payer(req.signInWithX, x402ReceiptPath(req.requestId));
      try {
        return { jws: await receipts.forCall(x402AccountId(payer), req.requestId, origin) };
      } catch (error) {
        // Another wallet's call and no call at all are one answer: the id says nothing more.
        if (error instanceof ConnectError && error.code === Code.NotFound)
          throw notThePayer(req.requestId, payer);
        throw error;
      }
    },

    getReceiptKeys() {
      return { jwks: JSON.stringify(receipts.signer.jwks()) };
    },

    async listUsage(req, ctx) {
      const accountId = scopedAccount(ctx.values.get(callerKey), req.accountId);
      if (req.pageSize < 0 || req.pageSize > MAX_PAGE) {
        throw invalidField("page_size", `page_size must be between 0 and ${MAX_PAGE}.`);
      }
      const size = req.pageSize === 0 ? DEFAULT_PAGE : req.pageSize;
      const rows = await billing.usage(accountId, decodePageToken(req.pageToken), size);
      const last = rows.at(-1);
      const settlements = await onchain.settlements(rows.map((r) => r.hold.id));
      return {
        rows: rows.map((r) => toUsageRow(r, settlements.get(r.hold.id))),
        nextPageToken: rows.length === size && last !== undefined ? encodePageToken(last.hold.seq) : "",
      };
    },

    async credit(req, ctx) {
      requireOperator(ctx.values.get(callerKey));
      const { entryId, balance } = await billing.credit({
        accountId: req.accountId,
        chain: req.chain,
        amount: req.amount,
        reason: req.reason,
        creditId: req.creditId,
      });
      return { entryId, balance: toBalance(balance) };
    },

    async quote(req, ctx) {
      const caller = ctx.values.get(callerKey);
      requireOperator(caller);
      const { chain, amount } = await billing.quote(
        scopedAccount(caller, req.accountId),
        req.chain,
        fromCall(req.call),
      );
      return { chain: chain.id, amount };
    },

    async hold(req, ctx) {
      const caller = ctx.values.get(callerKey);
      requireOperator(caller);
      const state = await billing.hold({
        accountId: scopedAccount(caller, req.accountId),
        requestId: req.requestId,
        keyId: req.keyId,
        chain: req.chain,
        call: fromCall(req.call),
      });
      return { hold: toHold(state) };
    },

    async settle(req, ctx) {
      requireOperator(ctx.values.get(callerKey));
      return { hold: toHold(await billing.settle(req.holdId, fromUsage(req.usage))) };
    },

    async release(req, ctx) {
      requireOperator(ctx.values.get(callerKey));
      return { hold: toHold(await billing.release(req.holdId)) };
    },
  };
}

function encodePageToken(seq: number): string {
  return Buffer.from(`u:${seq}`).toString("base64url");
}

function decodePageToken(token: string): bigint {
  if (token === "") return INT64_MAX;
  const match = /^u:(\d{1,18})$/.exec(Buffer.from(token, "base64url").toString());
  if (match === null) throw invalidField("page_token", "page_token is not one this service issued.");
  return BigInt(match[1]!);
}

const PERIODS: ReadonlyMap<SpendCapPeriod, CapPeriod> = new Map([
  [SpendCapPeriod.DAY, "day"],
  [SpendCapPeriod.MONTH, "month"],
  [SpendCapPeriod.LIFETIME, "lifetime"],
]);

/** The store's period for the wire's; unspecified is refused by name. */
function capPeriodOf(period: SpendCapPeriod): CapPeriod {
  const found = PERIODS.get(period);
  if (found === undefined) throw invalidField("period", "period must be DAY, MONTH or LIFETIME.");
  return found;
}

function toSpendCap({ cap, spent, resetsAt }: CapStanding) {
  const period = [...PERIODS].find(([, p]) => p === cap.period)![0];
  return {
    keyId: cap.keyId,
    chain: cap.chain,
    period,
    amount: cap.amount,
    spent,
    resetsAtMs: BigInt(resetsAt ?? 0),
  };
}

/** A request's `origin` field: an http(s) origin, or undefined when empty. */
function originOf(origin: string): string | undefined {
  if (origin === "") return undefined;
  const valid = httpOrigin(origin);
  if (valid === undefined)
    throw invalidField("origin", "origin must be an http(s) origin such as https://gateway.example.");
  return valid;
}
