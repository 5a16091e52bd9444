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
import { invalidField } from "../errors.js";
import type { SettlementView, SettlementStatus as StoredSettlementStatus } from "../ports/ledger.js";
import { availableOf, type HoldState, heldOf } from "../ports/ledger.js";
import type { ChainBalance } from "./billing.js";
import type { ChainConfig, ChainRegistry } from "./chain-registry.js";
import { decodeCharges } from "./charge-record.js";
import { IMAGE_SIZES, type PriceCatalog, type TokenRates } from "./price-catalog.js";
import {
  type CallSpec,
  type DeliveredUsage,
  NO_USAGE,
  type PassKind,
  type Speed,
  type TokenCounts,
} from "./pricing.js";

/** The catalog and chains as the GetPricing response. */
export function toPricing(
  catalog: PriceCatalog,
  chains: ChainRegistry,
  webSearchDefaultMaxUses: number,
): GetPricingResponse {
  return create(GetPricingResponseSchema, {
    textModels: [...catalog.text.values()].map((p) => ({
      model: p.model,
      inputPerMtok: p.input,
      outputPerMtok: p.output,
      cacheReadPerMtok: p.cacheRead,
      cacheWrite5mPerMtok: p.cacheWrite5m,
      cacheWrite1hPerMtok: p.cacheWrite1h,
      maxOutputTokens: p.maxOutputTokens,
      fast: p.fast === undefined ? undefined : toRates(p.fast),
      residency: [...p.residency].map(([geo, multiplierBp]) => ({ geo, multiplierBp })),
      contextWindow: p.contextWindow,
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
    catalog: { ...catalog.source },
    serverTools: [
      {
        tool: "web_search",
        pricePerUse: catalog.serverTools.webSearch,
        note: "failed searches are free",
      },
      { tool: "web_fetch", pricePerUse: catalog.serverTools.webFetch, note: "tokens only" },
    ],
    webSearchDefaultMaxUses,
    serverToolIterationLimit: catalog.serverToolIterationLimit,
  });
}

function toRates(r: TokenRates) {
  return {
    inputPerMtok: r.input,
    outputPerMtok: r.output,
    cacheReadPerMtok: r.cacheRead,
    cacheWrite5mPerMtok: r.cacheWrite5m,
    cacheWrite1hPerMtok: r.cacheWrite1h,
  };
}

/**
 * A chain as callers may see it (never its RPC URL, which may embed a provider key), with the
 * withdrawal minimum and fee a page or CLI shows before a withdrawal is confirmed.
 */
export function toChain(chain: ChainConfig): Chain {
  return create(ChainSchema, {
    id: chain.id,
    family: chain.family === "evm" ? ChainFamily.EVM : ChainFamily.SOLANA,
    asset: { ...chain.asset },
    enabled: chain.enabled,
    evmChainId: BigInt(chain.chainId ?? 0),
    withdrawalMinimum: chain.withdrawal.minimum,
    withdrawalFee: chain.withdrawal.fee,
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
    amount: heldOf(hold),
    status: resolution === undefined ? HoldStatus.PENDING : STATUS[resolution.status],
    settledAmount: resolution?.amount ?? 0n,
    model: hold.model,
    createdAt: timestampFromMs(hold.createdAt),
  });
}

/** A hold and its outcome (and its onchain settlement, if charged) as one ListUsage row. */
export function toUsageRow({ hold, resolution }: HoldState, settlement?: SettlementView): UsageRow {
  const usage = resolution?.usage ?? NO_USAGE;
  const charges = decodeCharges(resolution?.charges ?? "");
  return create(UsageRowSchema, {
    holdId: hold.id,
    requestId: hold.requestId,
    keyId: hold.keyId,
    model: hold.model,
    imageSize: hold.imageSize,
    chain: hold.chain,
    status: resolution === undefined ? HoldStatus.PENDING : STATUS[resolution.status],
    heldAmount: heldOf(hold),
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
    charges: charges.lines.map((line) => ({
      kind: line.kind,
      pass: line.pass,
      model: line.model,
      tokens: line.tokens === undefined ? undefined : toTokens(line.tokens),
      quantity: line.quantity,
      speed: line.speed,
      multiplierBp: line.multiplierBp,
      amountPico: line.amountPico,
      description: line.description,
    })),
    unpriced: [...charges.unpriced],
  });
}

function toTokens(t: TokenCounts) {
  return {
    inputTokens: t.inputTokens,
    outputTokens: t.outputTokens,
    cacheWrite5mTokens: t.cacheWrite5mTokens,
    cacheWrite1hTokens: t.cacheWrite1hTokens,
    cacheReadTokens: t.cacheReadTokens,
  };
}

/** The call of a Quote or Hold request; fails when neither kind is set. */
export function fromCall(
  call: { case: "text"; value: TextCall } | { case: "image"; value: ImageCall } | { case: undefined },
): CallSpec {
  switch (call.case) {
    case "text": {
      const text = call.value;
      return {
        kind: "text",
        model: text.model,
        inputTokens: text.inputTokens,
        maxTokens: text.maxTokens,
        speed: speedOf(text.speed, "text.speed"),
        inferenceGeo: text.inferenceGeo === "" ? undefined : text.inferenceGeo,
        serverToolLoop: text.serverToolLoop,
        webSearchMaxUses: text.webSearchMaxUses,
        advisor:
          text.advisor === undefined
            ? undefined
            : { model: text.advisor.model, maxTokens: text.advisor.maxTokens, maxUses: text.advisor.maxUses },
        compaction: text.compaction,
        fallbacks: text.fallbacks.map((f, i) => ({
          model: f.model,
          maxTokens: f.maxTokens,
          speed: f.speed === "" ? undefined : speedOf(f.speed, `text.fallbacks.${i}.speed`),
        })),
        defaultFallback: text.defaultFallback,
      };
    }
    case "image":
      return { kind: "image", model: call.value.model, size: call.value.size, count: call.value.count };
    default:
      throw invalidField("call", "Set either text or image.");
  }
}

const PASS_KINDS: Readonly<Record<string, PassKind>> = {
  message: "message",
  compaction: "compaction",
  advisor_message: "advisor",
  fallback_message: "fallback",
};

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
    model: usage.model,
    passes: usage.iterations.map((it) => ({
      kind: PASS_KINDS[it.type] ?? "unknown",
      model: it.model,
      inputTokens: it.inputTokens,
      outputTokens: it.outputTokens,
      cacheWrite5mTokens: it.cacheWrite5mTokens,
      cacheWrite1hTokens: it.cacheWrite1hTokens,
      cacheReadTokens: it.cacheReadTokens,
    })),
    speed: speedOf(usage.speed, "usage.speed"),
    inferenceGeo: usage.inferenceGeo,
    webSearchRequests: usage.webSearchRequests,
    webFetchRequests: usage.webFetchRequests,
  };
}

function speedOf(speed: string, field: string): Speed | undefined {
  if (speed === "") return undefined;
  if (speed === "standard" || speed === "fast") return speed;
  throw invalidField(field, `${field} must be "standard" or "fast".`);
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
