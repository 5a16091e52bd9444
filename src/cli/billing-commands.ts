import { toJson } from "@bufbuild/protobuf";
import { formatUnits, INT64_MAX, ledgerDecimals, parseDecimalAmount } from "../core/billing/money.js";
import {
  type Balance,
  CreditResponseSchema,
  GetBalancesResponseSchema,
} from "../gen/tollgate/billing/v1/billing_pb.js";
import { type Command, option, table, UsageError } from "./command.js";

function amountText(units: bigint, balance: Balance | undefined): string {
  const asset = balance?.chain?.asset;
  return asset === undefined
    ? `${units}`
    : `${formatUnits(units, ledgerDecimals(asset.decimals))} ${asset.symbol}`;
}

/** `tollgate credit`: a manual credit, parsed exactly from a decimal amount of the chain's asset. */
export const creditCommand: Command = {
  options: {
    account: { type: "string" },
    chain: { type: "string" },
    amount: { type: "string" },
    reason: { type: "string" },
    "credit-id": { type: "string" },
  },
  positionals: 0,
  database: "writes",
  async run(args, context) {
    const { billing } = context;
    const accountId = option(args, "account", true);
    const chainId = option(args, "chain", true);
    const amountRaw = option(args, "amount", true);
    const reason = option(args, "reason", true);
    // The asset's decimals decide the chain's ledger scale (min(decimals, 9)) and so how "12.50"
    // becomes ledger units: ask the core, not a guess.
    const { chains } = await billing.getPricing({});
    const chain = chains.find((c) => c.id === chainId);
    if (chain === undefined) {
      throw new UsageError(
        `--chain must be one of ${chains.map((c) => c.id).join(", ")}; got ${JSON.stringify(chainId)}`,
      );
    }
    const decimals = ledgerDecimals(chain.asset?.decimals ?? 0);
    let amount: bigint;
    try {
      amount = parseDecimalAmount(amountRaw, decimals);
    } catch (error) {
      throw new UsageError(
        `--amount: ${(error as Error).message} (the ledger counts ${chain.id} to ${decimals} decimals)`,
      );
    }
    if (amount <= 0n) throw new UsageError("--amount must be more than zero");
    if (amount > INT64_MAX) {
      throw new UsageError(
        `--amount is beyond the ledger's int64 range (${formatUnits(INT64_MAX, decimals)})`,
      );
    }
    const response = await billing.credit({
      accountId,
      chain: chain.id,
      amount,
      reason,
      creditId: option(args, "credit-id"),
    });
    if (context.json) return context.out(JSON.stringify(toJson(CreditResponseSchema, response)));
    context.out(
      `Credited ${amountText(amount, response.balance)} on ${chain.id} to ${accountId} (entry ${response.entryId}).\n` +
        `Available on ${chain.id}: ${amountText(response.balance?.available ?? 0n, response.balance)}.`,
    );
  },
};

/** `tollgate balance`: an account's funds on every chain. */
export const balanceCommand: Command = {
  options: { account: { type: "string" } },
  positionals: 0,
  database: "reads",
  async run(args, context) {
    const response = await context.billing.getBalances({ accountId: option(args, "account", true) });
    if (context.json) return context.out(JSON.stringify(toJson(GetBalancesResponseSchema, response)));
    const rows = response.balances.map((b) => {
      const asset = b.chain?.asset;
      const fmt = (units: bigint) =>
        asset === undefined ? `${units}` : formatUnits(units, ledgerDecimals(asset.decimals));
      return [
        `${b.chain?.id ?? "?"}${b.chain?.id === response.defaultChain ? " (default)" : ""}${b.chain?.enabled === false ? " (disabled)" : ""}`,
        asset?.symbol ?? "",
        fmt(b.available),
        fmt(b.debitsPending),
        fmt(b.creditsPosted),
        fmt(b.debitsPosted),
      ];
    });
    context.out(
      `Account ${response.accountId}\n\n` +
        table(["CHAIN", "ASSET", "AVAILABLE", "HELD", "CREDITED", "SPENT"], rows),
    );
  },
};
