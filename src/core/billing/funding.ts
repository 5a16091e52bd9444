import { Code, type ServiceImpl } from "@connectrpc/connect";
import type { BillingService } from "../../gen/tollgate/billing/v1/billing_pb.js";
import { callerKey, scopedAccount } from "../caller.js";
import { invalidField, reasonError } from "../errors.js";
import type { ChainRegistry } from "./chain-registry.js";
import { ledgerDecimals, ledgerToOnchain } from "./money.js";
import type { ChainDirectory } from "./onchain-billing.js";

/** The dev chains' faucet: which chains it serves, and a mint of their test stablecoin. */
export interface DevFaucet {
  readonly chains: ReadonlySet<string>;
  /** Mints `onchainAmount` (the asset's smallest unit) to `address`; resolves to the transaction. */
  mint(chain: string, address: string, onchainAmount: bigint): Promise<string>;
}

/** The most one faucet call mints, in dollars: enough to try everything, not to drain anything. */
const MAX_DOLLARS = 1_000n;

const faucetUnavailable = (chain: string) =>
  reasonError(
    Code.FailedPrecondition,
    "FAUCET_UNAVAILABLE",
    `There is no dev chain behind ${JSON.stringify(chain)} on this gateway: fund it with a real deposit.`,
    { chain },
  );

/** What the faucet RPC needs: the dev chains' mint (absent outside dev mode) and the deposit addresses. */
export interface FaucetDeps {
  readonly faucet: DevFaucet | undefined;
  readonly chains: ChainRegistry;
  readonly directory: ChainDirectory | undefined;
}

const fundingUnavailable = (chain: string) =>
  reasonError(
    Code.FailedPrecondition,
    "FUNDING_TRANSACTION_UNAVAILABLE",
    `Wallets on ${JSON.stringify(chain)} send the transfer themselves: transfer the asset to the deposit address.`,
    { chain },
  );

/**
 * BillingService's wallet-funding RPCs: RequestTestFunds (the dashboard's faucet button on dev
 * chains) and PrepareFunding (a transfer for the user's own wallet to sign).
 */
export function createFundingMethods({
  faucet,
  chains,
  directory,
}: FaucetDeps): Pick<ServiceImpl<typeof BillingService>, "requestTestFunds" | "prepareFunding"> {
  return {
    async prepareFunding(req, ctx) {
      const accountId = scopedAccount(ctx.values.get(callerKey), req.accountId);
      const chain = chains.byId.get(req.chain);
      if (chain === undefined) throw invalidField("chain", `Unknown chain ${JSON.stringify(req.chain)}.`);
      if (directory === undefined || !directory.has(chain.id)) throw fundingUnavailable(chain.id);
      if (req.amount <= 0n) throw invalidField("amount", "amount must be positive.");
      if (!directory.isValidAddress(chain.id, req.fromAddress)) {
        throw invalidField(
          "from_address",
          `${JSON.stringify(req.fromAddress)} is not a wallet address on ${chain.id}.`,
        );
      }
      const transaction = await directory.fundingTransaction(
        chain.id,
        req.fromAddress,
        accountId,
        ledgerToOnchain(req.amount, chain.asset.decimals),
      );
      if (transaction === undefined) throw fundingUnavailable(chain.id);
      return { transaction, depositAddress: await directory.depositAddress(chain.id, accountId) };
    },

    // getDepositAddresses sets DepositAddress.test_funds from the same set (see core.ts).
    async requestTestFunds(req, ctx) {
      const accountId = scopedAccount(ctx.values.get(callerKey), req.accountId);
      const chain = chains.byId.get(req.chain);
      if (chain === undefined) throw invalidField("chain", `Unknown chain ${JSON.stringify(req.chain)}.`);
      if (
        faucet === undefined ||
        directory === undefined ||
        !faucet.chains.has(chain.id) ||
        !directory.has(chain.id)
      ) {
        throw faucetUnavailable(chain.id);
      }
      const max = MAX_DOLLARS * 10n ** BigInt(ledgerDecimals(chain.asset.decimals));
      if (req.amount <= 0n || req.amount > max) {
        throw invalidField(
          "amount",
          `amount must be positive and at most ${max} ledger units ($${MAX_DOLLARS}).`,
        );
      }
      const address = await directory.depositAddress(chain.id, accountId);
      const txHash = await faucet.mint(chain.id, address, ledgerToOnchain(req.amount, chain.asset.decimals));
      return { address, txHash };
    },
  };
}
