import { Code, type ConnectError } from "@connectrpc/connect";
import { reasonError } from "../errors.js";
import { type RateLimitDecision, refusalMetadata, retryAfterSeconds } from "../ports/rate-limits.js";
import type { ChainConfig } from "./chain-registry.js";
import { formatUnits, ledgerDecimals } from "./money.js";

/** This gateway has no chain adapter for `chain` (onchain features are off, or it has none). */
export const chainsUnavailable = (chain: string): ConnectError =>
  reasonError(
    Code.FailedPrecondition,
    "CHAINS_UNAVAILABLE",
    chain === ""
      ? "Onchain features are not running on this gateway (see docs/chains.md)."
      : `Chain ${chain} has no onchain adapter on this gateway (see docs/chains.md).`,
    { chain },
  );

/** `address` is not a well-formed address of the chain's family. */
export const invalidAddress = (field: string, chain: string, address: string): ConnectError =>
  reasonError(
    Code.InvalidArgument,
    "INVALID_ADDRESS",
    `${field} ${JSON.stringify(address)} is not a valid address on ${chain}` +
      " (EVM: 0x + 40 hex digits, with a correct checksum if mixed-case; not the zero address).",
    { field, chain },
  );

/** Ledger units of `chain` as a decimal amount of its asset, e.g. `1.050000 USDC`. */
function amountOn(chain: ChainConfig, units: bigint): string {
  return `${formatUnits(units, ledgerDecimals(chain.asset.decimals))} ${chain.asset.symbol}`;
}

/** The amount asked is below the chain's withdrawal minimum; nothing is written. */
export const withdrawalBelowMinimum = (chain: ChainConfig, amount: bigint): ConnectError =>
  reasonError(
    Code.InvalidArgument,
    "WITHDRAWAL_BELOW_MINIMUM",
    `amount: a withdrawal on ${chain.id} sends at least ${amountOn(chain, chain.withdrawal.minimum)}; ` +
      `${amountOn(chain, amount)} was asked.`,
    {
      field: "amount",
      chain: chain.id,
      minimum: chain.withdrawal.minimum.toString(),
      ledger_decimals: `${ledgerDecimals(chain.asset.decimals)}`,
    },
  );

/**
 * amount + the chain's withdrawal fee is more than may leave the account now (`withdrawable`:
 * spendable and backed by deposits). Says the most that can be sent instead.
 */
export const withdrawalInsufficient = (
  chain: ChainConfig,
  amount: bigint,
  withdrawable: bigint,
): ConnectError => {
  const { fee } = chain.withdrawal;
  const most = withdrawable - fee;
  return reasonError(
    Code.FailedPrecondition,
    "INSUFFICIENT_FUNDS",
    `Not enough to withdraw ${amountOn(chain, amount)} on ${chain.id}: with the ` +
      `${amountOn(chain, fee)} network fee, ${amountOn(chain, amount + fee)} would leave the balance, and ` +
      `${amountOn(chain, withdrawable)} may leave it now (funds that are spendable and backed by deposits; ` +
      "operator credit cannot be withdrawn). " +
      (most >= chain.withdrawal.minimum
        ? `At most ${amountOn(chain, most)} can be withdrawn.`
        : `That is less than the ${amountOn(chain, chain.withdrawal.minimum)} minimum plus the fee: nothing can be withdrawn now.`),
    {
      chain: chain.id,
      needed: (amount + fee).toString(),
      available: withdrawable.toString(),
      fee: fee.toString(),
      symbol: chain.asset.symbol,
      decimals: `${chain.asset.decimals}`,
      ledger_decimals: `${ledgerDecimals(chain.asset.decimals)}`,
    },
  );
};

/** The account made as many withdrawals in the last hour as the gateway allows; metadata says when to come back. */
export const withdrawalRateLimited = (decision: RateLimitDecision, now: number): ConnectError =>
  reasonError(
    Code.ResourceExhausted,
    "WITHDRAWAL_RATE_LIMITED",
    `This account may make at most ${decision.limit} withdrawals per hour and has made them; ` +
      `the next one may be made in ${retryAfterSeconds(decision)} s.`,
    refusalMetadata(decision, now),
  );
