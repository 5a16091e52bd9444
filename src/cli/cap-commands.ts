import { create, toJson } from "@bufbuild/protobuf";
import { formatUnits, INT64_MAX, ledgerDecimals, parseDecimalAmount } from "../core/billing/money.js";
import {
  type Chain,
  ListSpendCapsResponseSchema,
  type SpendCap,
  SpendCapPeriod,
} from "../gen/tollgate/billing/v1/billing_pb.js";
import { type Command, type CommandContext, option, table, UsageError } from "./command.js";

/** The options that set a period's cap, and their periods. */
const PERIOD_OPTIONS = [
  ["daily", SpendCapPeriod.DAY],
  ["monthly", SpendCapPeriod.MONTH],
  ["lifetime", SpendCapPeriod.LIFETIME],
] as const;

const PERIOD_NAMES = new Map<SpendCapPeriod, string>(PERIOD_OPTIONS.map(([name, period]) => [period, name]));

/**
 * `tollgate key cap`: sets or clears (`none`) an account's or a key's daily, monthly and lifetime
 * caps on one chain, each an exact decimal amount of the chain's asset.
 */
export const capCommand: Command = {
  options: {
    account: { type: "string" },
    key: { type: "string" },
    chain: { type: "string" },
    daily: { type: "string" },
    monthly: { type: "string" },
    lifetime: { type: "string" },
  },
  positionals: 0,
  database: "writes",
  async run(args, context) {
    const accountId = option(args, "account", true);
    const keyId = option(args, "key");
    const chain = await chainInfo(context, option(args, "chain", true));
    const given = PERIOD_OPTIONS.filter(([name]) => option(args, name) !== "");
    if (given.length === 0) throw new UsageError("give at least one of --daily, --monthly, --lifetime");
    let caps: SpendCap[] = [];
    for (const [name, period] of given) {
      const amount = capAmount(name, option(args, name), chain);
      ({ caps } = await context.billing.setSpendCap({ accountId, keyId, chain: chain.id, period, amount }));
    }
    printCaps(context, accountId, caps, [chain]);
  },
};

/** `tollgate key caps`: an account's caps and what each period has spent. */
export const capsCommand: Command = {
  options: { account: { type: "string" } },
  positionals: 0,
  database: "reads",
  async run(args, context) {
    const accountId = option(args, "account", true);
    const { caps } = await context.billing.listSpendCaps({ accountId });
    printCaps(context, accountId, caps, (await context.billing.getPricing({})).chains);
  },
};

async function chainInfo(context: CommandContext, chainId: string): Promise<Chain> {
  const { chains } = await context.billing.getPricing({});
  const chain = chains.find((c) => c.id === chainId);
  if (chain === undefined) {
    throw new UsageError(
      `--chain must be one of ${chains.map((c) => c.id).join(", ")}; got ${JSON.stringify(chainId)}`,
    );
  }
  return chain;
}

/** A cap option's value in ledger units; `none` clears the cap (undefined). */
function capAmount(name: string, raw: string, chain: Chain): bigint | undefined {
  if (raw === "none") return undefined;
  const decimals = ledgerDecimals(chain.asset?.decimals ?? 0);
  let amount: bigint;
  try {
    amount = parseDecimalAmount(raw, decimals);
  } catch (error) {
    throw new UsageError(
      `--${name}: ${(error as Error).message}, or none to clear it (the ledger counts ${chain.id} to ${decimals} decimals)`,
    );
  }
  if (amount > INT64_MAX) throw new UsageError(`--${name} is beyond the ledger's int64 range`);
  return amount;
}

function printCaps(context: CommandContext, accountId: string, caps: SpendCap[], chains: readonly Chain[]) {
  if (context.json) {
    const response = create(ListSpendCapsResponseSchema, { accountId, caps });
    return context.out(JSON.stringify(toJson(ListSpendCapsResponseSchema, response)));
  }
  if (caps.length === 0) return context.out(`Account ${accountId} has no spend caps.`);
  const rows = caps.map((c) => {
    const asset = chains.find((chain) => chain.id === c.chain)?.asset;
    const fmt = (units: bigint) =>
      asset === undefined
        ? `${units}`
        : `${formatUnits(units, ledgerDecimals(asset.decimals))} ${asset.symbol}`;
    const resets = c.resetsAtMs === 0n ? "never" : new Date(Number(c.resetsAtMs)).toISOString();
    return [
      c.keyId === "" ? "(account)" : c.keyId,
      c.chain,
      PERIOD_NAMES.get(c.period) ?? "?",
      fmt(c.amount),
      fmt(c.spent),
      resets,
    ];
  });
  context.out(`Account ${accountId}\n\n${table(["KEY", "CHAIN", "PERIOD", "CAP", "SPENT", "RESETS"], rows)}`);
}
