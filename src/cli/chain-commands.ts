import { toJson } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { Client } from "@connectrpc/connect";
import { loadConfig } from "../config/config.js";
import { formatChargeLines } from "../core/billing/charge-format.js";
import { formatUnits, INT64_MAX, ledgerDecimals, parseDecimalAmount } from "../core/billing/money.js";
import { readDevChainsFile, requestFaucet } from "../dev/chains/dev-chains-file.js";
import {
  type BillingService,
  type Chain,
  GetDepositAddressesResponseSchema,
  GetSettlementBacklogResponseSchema,
  ListDepositsResponseSchema,
  ListUsageResponseSchema,
  ListWithdrawalsResponseSchema,
  SettlementStatus,
  TransferStatus,
  type UsageRow,
  WithdrawResponseSchema,
} from "../gen/tollgate/billing/v1/billing_pb.js";
import { type Command, option, table, UsageError } from "./command.js";

async function chainsById(billing: Client<typeof BillingService>): Promise<Map<string, Chain>> {
  const { chains } = await billing.getPricing({});
  return new Map(chains.map((c) => [c.id, c]));
}

/** Ledger units of `chain` as a decimal amount of its asset. */
function fmt(units: bigint, chain: Chain | undefined): string {
  const asset = chain?.asset;
  return asset === undefined
    ? `${units}`
    : `${formatUnits(units, ledgerDecimals(asset.decimals))} ${asset.symbol}`;
}

/** A decimal amount of `chain`'s asset as ledger units, or a usage error naming the problem. */
function parseAmount(raw: string, chain: Chain): bigint {
  const decimals = ledgerDecimals(chain.asset?.decimals ?? 0);
  let amount: bigint;
  try {
    amount = parseDecimalAmount(raw, decimals);
  } catch (error) {
    throw new UsageError(
      `--amount: ${(error as Error).message} (the ledger counts ${chain.id} to ${decimals} decimals)`,
    );
  }
  if (amount <= 0n) throw new UsageError("--amount must be more than zero");
  if (amount > INT64_MAX) throw new UsageError("--amount is beyond the ledger's int64 range");
  return amount;
}

async function requireChain(billing: Client<typeof BillingService>, id: string): Promise<Chain> {
  const chains = await chainsById(billing);
  const chain = chains.get(id);
  if (chain === undefined) {
    throw new UsageError(
      `--chain must be one of ${[...chains.keys()].join(", ")}; got ${JSON.stringify(id)}`,
    );
  }
  return chain;
}

const time = (t: Parameters<typeof timestampDate>[0] | undefined) =>
  t === undefined
    ? ""
    : timestampDate(t)
        .toISOString()
        .replace(/\.\d{3}Z$/, "Z");

/** `tollgate addresses`: an account's deposit address on every chain. */
export const addressesCommand: Command = {
  options: { account: { type: "string" } },
  positionals: 0,
  database: "writes",
  chains: true,
  async run(args, context) {
    const response = await context.billing.getDepositAddresses({ accountId: option(args, "account", true) });
    if (context.json) return context.out(JSON.stringify(toJson(GetDepositAddressesResponseSchema, response)));
    const rows = response.addresses.map((a) => [a.chain?.id ?? "", a.chain?.asset?.symbol ?? "", a.address]);
    context.out(
      `Deposit addresses of ${response.accountId} (send the chain's asset; credited at finality)\n\n` +
        table(["CHAIN", "ASSET", "ADDRESS"], rows),
    );
  },
};

/** `tollgate deposits`: pending and credited deposits. */
export const depositsCommand: Command = {
  options: { account: { type: "string" } },
  positionals: 0,
  database: "reads",
  async run(args, context) {
    const [response, chains] = await Promise.all([
      context.billing.listDeposits({ accountId: option(args, "account", true) }),
      chainsById(context.billing),
    ]);
    if (context.json) return context.out(JSON.stringify(toJson(ListDepositsResponseSchema, response)));
    const rows = response.deposits.map((d) => {
      const chain = chains.get(d.chain);
      const decimals = chain?.asset?.decimals ?? 0;
      return [
        d.chain,
        d.credited ? "credited" : "pending",
        `${formatUnits(BigInt(d.onchainAmount), decimals)} ${chain?.asset?.symbol ?? ""}`.trim(),
        `${d.txHash}#${d.index}`,
        `${d.position}`,
        time(d.at),
      ];
    });
    context.out(table(["CHAIN", "STATE", "AMOUNT", "TRANSACTION", "POSITION", "AT"], rows));
  },
};

/**
 * `tollgate withdraw`: sends deposit-backed funds to an address; `--amount` is what the address
 * receives, the chain's network fee is debited on top, and the output says both.
 */
export const withdrawCommand: Command = {
  options: {
    account: { type: "string" },
    chain: { type: "string" },
    amount: { type: "string" },
    to: { type: "string" },
    "withdrawal-id": { type: "string" },
  },
  positionals: 0,
  database: "writes",
  chains: true,
  async run(args, context) {
    const chain = await requireChain(context.billing, option(args, "chain", true));
    const amount = parseAmount(option(args, "amount", true), chain);
    const response = await context.billing.withdraw({
      accountId: option(args, "account", true),
      chain: chain.id,
      amount,
      toAddress: option(args, "to", true),
      withdrawalId: option(args, "withdrawal-id"),
    });
    if (context.json) return context.out(JSON.stringify(toJson(WithdrawResponseSchema, response)));
    const w = response.withdrawal!;
    context.out(
      `Withdrawal ${w.id} on ${chain.id} to ${w.toAddress}, queued for the settlement worker:\n` +
        `  receives     ${fmt(w.amount, chain)}\n` +
        `  network fee  ${fmt(w.fee, chain)}\n` +
        `  debited      ${fmt(w.amount + w.fee, chain)}\n` +
        `Available on ${chain.id}: ${fmt(response.balance?.available ?? 0n, chain)}.`,
    );
  },
};

const TRANSFER_STATUS: Record<TransferStatus, string> = {
  [TransferStatus.UNSPECIFIED]: "?",
  [TransferStatus.QUEUED]: "queued",
  [TransferStatus.SUBMITTED]: "submitted",
  [TransferStatus.CONFIRMED]: "confirmed",
};

/** `tollgate withdrawals`: an account's withdrawals and their transactions. */
export const withdrawalsCommand: Command = {
  options: { account: { type: "string" } },
  positionals: 0,
  database: "reads",
  async run(args, context) {
    const [response, chains] = await Promise.all([
      context.billing.listWithdrawals({ accountId: option(args, "account", true) }),
      chainsById(context.billing),
    ]);
    if (context.json) return context.out(JSON.stringify(toJson(ListWithdrawalsResponseSchema, response)));
    const rows = response.withdrawals.map((w) => [
      w.id,
      w.chain,
      fmt(w.amount, chains.get(w.chain)),
      fmt(w.fee, chains.get(w.chain)),
      w.toAddress,
      TRANSFER_STATUS[w.status],
      w.txHash,
      w.lastError,
    ]);
    context.out(table(["ID", "CHAIN", "AMOUNT", "FEE", "TO", "STATUS", "TRANSACTION", "LAST ERROR"], rows));
  },
};

const SETTLEMENT_STATUS: Record<SettlementStatus, string> = {
  [SettlementStatus.UNSPECIFIED]: "-",
  [SettlementStatus.OFFCHAIN]: "off-chain",
  [SettlementStatus.QUEUED]: "queued",
  [SettlementStatus.SUBMITTED]: "submitted",
  [SettlementStatus.CONFIRMED]: "confirmed",
};

/** `tollgate usage`: an account's calls with their charge and onchain settlement. */
export const usageCommand: Command = {
  options: { account: { type: "string" }, limit: { type: "string" } },
  positionals: 0,
  database: "reads",
  async run(args, context) {
    const limit = option(args, "limit") === "" ? 20 : Number(option(args, "limit"));
    if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new UsageError("--limit must be 1–1000");
    const [response, chains] = await Promise.all([
      context.billing.listUsage({ accountId: option(args, "account", true), pageSize: limit }),
      chainsById(context.billing),
    ]);
    if (context.json) return context.out(JSON.stringify(toJson(ListUsageResponseSchema, response)));
    context.out(formatUsage(response.rows, chains));
  },
};

/**
 * Usage rows as a table, each call followed by its charge lines (indented) and its unpriced
 * warning, if any.
 */
export function formatUsage(rows: readonly UsageRow[], chains: ReadonlyMap<string, Chain>): string {
  const cells = rows.map((r) => [
    time(r.createdAt),
    r.model,
    r.chain,
    fmt(r.amount, chains.get(r.chain)),
    SETTLEMENT_STATUS[r.settlementStatus],
    r.settlementTxHash,
  ]);
  // Aligned as one table, then split so each call's lines go right under its row.
  const [header, ...lines] = table(
    ["AT", "MODEL", "CHAIN", "CHARGED", "SETTLEMENT", "TRANSACTION"],
    cells,
  ).split("\n");
  return [
    header!,
    ...lines.flatMap((line, i) => [line, ...formatChargeLines(rows[i]!.charges, rows[i]!.unpriced)]),
  ].join("\n");
}

/** `tollgate settlement`: the settlement backlog of every chain (operator). */
export const settlementCommand: Command = {
  options: {},
  positionals: 0,
  database: "reads",
  chains: true,
  async run(_args, context) {
    const [response, chains] = await Promise.all([
      context.billing.getSettlementBacklog({}),
      chainsById(context.billing),
    ]);
    if (context.json)
      return context.out(JSON.stringify(toJson(GetSettlementBacklogResponseSchema, response)));
    const rows = response.chains.map((b) => {
      const chain = chains.get(b.chain);
      return [
        b.chain,
        `${b.unbatchedCalls} (${fmt(b.unbatchedAmount, chain)})`,
        `${b.openSettlements} (${fmt(b.openSettlementAmount, chain)})`,
        `${b.openWithdrawals} (${fmt(b.openWithdrawalAmount, chain)})`,
        time(b.oldest),
        fmt(b.settledOnchain, chain),
        fmt(b.settledOffchain, chain),
        b.treasuryAddress,
        b.lastError,
      ];
    });
    context.out(
      table(
        [
          "CHAIN",
          "WAITING CALLS",
          "OPEN SETTLEMENTS",
          "OPEN WITHDRAWALS",
          "OLDEST",
          "SETTLED ONCHAIN",
          "OFF-CHAIN",
          "TREASURY",
          "LAST ERROR",
        ],
        rows,
      ),
    );
  },
};

/**
 * `tollgate faucet`: mints dev-chain test stablecoin to an account's deposit address, through
 * the faucet of the dev chains recorded in the data directory.
 */
export const faucetCommand: Command = {
  options: { account: { type: "string" }, chain: { type: "string" }, amount: { type: "string" } },
  positionals: 0,
  database: "writes",
  chains: true,
  async run(args, context) {
    const url = readDevChainsFile(loadConfig().dataDir)?.faucetUrl;
    if (url === undefined) {
      throw new UsageError(
        "no dev chains are running for this data directory: start `tollgate serve` without TOLLGATE_CHAINS, or `tollgate dev-chains`",
      );
    }
    const accountId = option(args, "account", true);
    const chain = await requireChain(context.billing, option(args, "chain", true));
    const decimals = chain.asset?.decimals ?? 0;
    let amount: bigint;
    try {
      amount = parseDecimalAmount(option(args, "amount", true), decimals);
    } catch (error) {
      throw new UsageError(`--amount: ${(error as Error).message}`);
    }
    if (amount <= 0n) throw new UsageError("--amount must be more than zero");
    const { addresses } = await context.billing.getDepositAddresses({ accountId });
    const address = addresses.find((a) => a.chain?.id === chain.id)?.address;
    if (address === undefined) throw new UsageError(`${chain.id} has no deposit address on this gateway`);
    const txHash = await requestFaucet(url, chain.id, address, amount);
    if (context.json)
      return context.out(JSON.stringify({ chain: chain.id, address, amount: `${amount}`, txHash }));
    context.out(
      `Minted ${formatUnits(amount, decimals)} test ${chain.asset?.symbol ?? ""} to ${address} on ${chain.id} (${txHash}).\n` +
        "It is credited once the chain's finality rule is met (see `tollgate deposits`).",
    );
  },
};
