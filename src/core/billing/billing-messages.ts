import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  type Balance,
  BalanceSchema,
  type Chain,
  ChainFamily,
  ChainSchema,
  type GetPricingResponse,
  GetPricingResponseSchema,
  type Hold,
  HoldSchema,
  HoldStatus,
  type ImageCall,
  SettlementStatus,
  type TextCall,
  type Usage,
  type UsageRow,
  UsageRowSchema,
} from "../../gen/tollgate/billing/v1/billing_pb.js";
import { availableOf, type HoldState } from "../../store/ledger-repository.js";
import type {
  SettlementView,
  SettlementStatus as StoredSettlementStatus,
} from "../../store/settlement-outbox.js";
import { invalidField } from "../errors.js";
import type { ChainBalance } from "./billing.js";
import type { ChainConfig, ChainRegistry } from "./chain-registry.js";
import { IMAGE_SIZES, type PriceCatalog } from "./price-catalog.js";
import { type CallSpec, type DeliveredUsage, NO_USAGE } from "./pricing.js";

/** The catalog and chains as the GetPricing response. */
export function toPricing(catalog: PriceCatalog, chains: ChainRegistry): GetPricingResponse {
  return create(GetPricingResponseSchema, {
    textModels: [...catalog.text.values()].map((p) => ({
      model: p.model,
      inputPerMtok: p.input,
      outputPerMtok: p.output,
      cacheReadPerMtok: p.cacheRead,
      cacheWrite5mPerMtok: p.cacheWrite5m,
      cacheWrite1hPerMtok: p.cacheWrite1h,
      maxOutputTokens: p.maxOutputTokens,
    })),
    imageModels: [...catalog.images.values()].map((p) => ({
      model: p.model,
      sizes: IMAGE_SIZES.filter((s) => p.perImage.has(s)).map((size) => ({
        size,
        pricePerImage: p.perImage.get(size)!,
      })),
    })),
    chains: chains.chains.map(toChain),
    defaultChain: chains.defaultChain,
  });
}

/** A chain as callers may see it (never its RPC URL, which may embed a provider key). */
export function toChain(chain: ChainConfig): Chain {
  return create(ChainSchema, {
    id: chain.id,
    family: chain.family === "evm" ? ChainFamily.EVM : ChainFamily.SOLANA,
    asset: { ...chain.asset },
    enabled: chain.enabled,
    evmChainId: BigInt(chain.chainId ?? 0),
  });
}

/** One chain's balance as the proto message. */
export function toBalance({ chain, row }: ChainBalance): Balance {
  return create(BalanceSchema, {
    chain: toChain(chain),
    creditsPosted: row.creditsPosted,
    debitsPosted: row.debitsPosted,
    debitsPending: row.debitsPending,
    available: availableOf(row),
  });
}

const STATUS = {
  settled: HoldStatus.SETTLED,
  released: HoldStatus.RELEASED,
  expired: HoldStatus.EXPIRED,
} as const;

/** A hold and its outcome as the proto Hold. */
export function toHold({ hold, resolution }: HoldState): Hold {
  return create(HoldSchema, {
    id: hold.id,
    accountId: hold.accountId,
    requestId: hold.requestId,
    chain: hold.chain,
    amount: hold.amount,
    status: resolution === undefined ? HoldStatus.PENDING : STATUS[resolution.status],
    settledAmount: resolution?.amount ?? 0n,
    model: hold.model,
    createdAt: timestampFromMs(hold.createdAt),
  });
}

/** A hold and its outcome (and its onchain settlement, if charged) as one ListUsage row. */
export function toUsageRow({ hold, resolution }: HoldState, settlement?: SettlementView): UsageRow {
  const usage = resolution?.usage ?? NO_USAGE;
  return create(UsageRowSchema, {
    holdId: hold.id,
    requestId: hold.requestId,
    keyId: hold.keyId,
    model: hold.model,
    imageSize: hold.imageSize,
    chain: hold.chain,
    status: resolution === undefined ? HoldStatus.PENDING : STATUS[resolution.status],
    heldAmount: hold.amount,
    amount: resolution?.amount ?? 0n,
    usage: {
      inputTokens: usage.inputTokens,
      outputTokens: usage.outputTokens,
      cacheWrite5mTokens: usage.cacheWrite5mTokens,
      cacheWrite1hTokens: usage.cacheWrite1hTokens,
      cacheReadTokens: usage.cacheReadTokens,
      images: usage.images,
    },
    createdAt: timestampFromMs(hold.createdAt),
    resolvedAt: resolution === undefined ? undefined : timestampFromMs(resolution.resolvedAt),
    settlementStatus: toSettlementStatus(settlement?.status),
    settlementTxHash: settlement?.txHash ?? "",
    settlementOnchainAmount: settlement?.onchainAmount ?? 0n,
    settlementOffchainAmount: settlement?.offchainAmount ?? 0n,
  });
}

/** The call of a Quote or Hold request; fails when neither kind is set. */
export function fromCall(
  call: { case: "text"; value: TextCall } | { case: "image"; value: ImageCall } | { case: undefined },
): CallSpec {
  switch (call.case) {
    case "text":
      return {
        kind: "text",
        model: call.value.model,
        inputTokens: call.value.inputTokens,
        maxTokens: call.value.maxTokens,
      };
    case "image":
      return { kind: "image", model: call.value.model, size: call.value.size, count: call.value.count };
    default:
      throw invalidField("call", "Set either text or image.");
  }
}

/** A Settle request's usage (absent means nothing was delivered). */
export function fromUsage(usage: Usage | undefined): DeliveredUsage {
  if (usage === undefined) return NO_USAGE;
  return {
    inputTokens: usage.inputTokens,
    outputTokens: usage.outputTokens,
    cacheWrite5mTokens: usage.cacheWrite5mTokens,
    cacheWrite1hTokens: usage.cacheWrite1hTokens,
    cacheReadTokens: usage.cacheReadTokens,
    images: usage.images,
  };
}

/** A call's stored settlement status as the proto enum. */
export function toSettlementStatus(status: StoredSettlementStatus | undefined): SettlementStatus {
  switch (status) {
    case undefined:
      return SettlementStatus.UNSPECIFIED;
    case "offchain":
      return SettlementStatus.OFFCHAIN;
    case "queued":
      return SettlementStatus.QUEUED;
    case "submitted":
      return SettlementStatus.SUBMITTED;
    case "confirmed":
      return SettlementStatus.CONFIRMED;
  }
}
