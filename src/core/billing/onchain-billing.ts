import { accountNotFound, invalidField } from "../errors.js";
import { newId } from "../ids.js";
import {
  type BacklogRow,
  type DepositRow,
  emptyBacklog,
  type LedgerStore,
  type OnchainStore,
  type SettlementView,
  type TransferRow,
} from "../ports/ledger.js";
import type { RateLimiter } from "../ports/rate-limits.js";
import type { ChainBalance } from "./billing.js";
import { idConflict } from "./billing-errors.js";
import type { ChainConfig, ChainRegistry } from "./chain-registry.js";
import { configuredChain } from "./chain-selection.js";
import { withdrawalIdFor } from "./hold-ids.js";
import { INT64_MAX } from "./money.js";
import {
  chainsUnavailable,
  invalidAddress,
  withdrawalBelowMinimum,
  withdrawalInsufficient,
  withdrawalRateLimited,
} from "./onchain-errors.js";

/**
 * What the core asks of the chains runtime (`src/chains/`), without knowing any chain family:
 * which chains have an adapter, an account's deposit address on one, and whether an address is
 * well-formed there.
 */
export interface ChainDirectory {
  /** Whether `chainId` has an adapter on this gateway. */
  has(chainId: string): boolean;
  /** The account's deposit address on the chain; from now on the watcher credits it. */
  depositAddress(chainId: string, accountId: string): Promise<string>;
  isValidAddress(chainId: string, address: string): boolean;
  /** Where the chain's settlements go (and whose native balance pays the fees); undefined without an adapter. */
  treasuryAddress(chainId: string): string | undefined;
  /**
   * An unsigned transaction sending `amount` (onchain units) from the wallet `from` to the
   * account's deposit address, for that wallet to sign; undefined when the chain's wallets
   * build their own transfers (see ChainAdapter.fundingTransaction).
   */
  fundingTransaction(
    chainId: string,
    from: string,
    accountId: string,
    amount: bigint,
  ): Promise<Uint8Array | undefined>;
}

/** What onchain billing is built from. */
export interface OnchainBillingDeps {
  readonly ledger: LedgerStore;
  readonly onchain: OnchainStore;
  readonly chains: ChainRegistry;
  /** Undefined when this process runs without chain adapters. */
  readonly directory: ChainDirectory | undefined;
  readonly now: () => number;
  /**
   * Withdrawals per account per window (in this process's memory, or in Redis across hosts);
   * undefined: not limited.
   */
  readonly withdrawalLimit?: RateLimiter | undefined;
}

/** A withdrawal to make. */
export interface WithdrawInput {
  readonly accountId: string;
  readonly chain: string;
  /** Ledger units. */
  readonly amount: bigint;
  readonly to: string;
  /** Optional idempotency key; "" withdraws unconditionally. */
  readonly withdrawalId: string;
  /** Whether it counts against the account's withdrawal rate (key holders and sessions, not the operator). */
  readonly limited: boolean;
}

const MAX_WITHDRAWAL_ID = 200;

/**
 * The onchain side of billing, in-process: deposit addresses, deposits, withdrawals, the
 * settlement backlog and each call's settlement. Like {@link Billing}, it does no caller
 * checks; expected failures are ConnectErrors with a reason.
 */
export class OnchainBilling {
  constructor(private readonly deps: OnchainBillingDeps) {}

  /** The account's deposit address on every chain with an adapter, in registry order. */
  async depositAddresses(accountId: string): Promise<{ chain: ChainConfig; address: string }[]> {
    await this.requireAccount(accountId);
    const directory = this.requireDirectory("");
    return await Promise.all(
      this.deps.chains.chains
        .filter((c) => directory.has(c.id))
        .map(async (chain) => ({ chain, address: await directory.depositAddress(chain.id, accountId) })),
    );
  }

  /** Pending deposits, then the newest `limit` credited ones. */
  async deposits(accountId: string, limit: number): Promise<DepositRow[]> {
    await this.requireAccount(accountId);
    return this.deps.onchain.listDeposits(accountId, limit);
  }

  /**
   * Debits the account amount + the chain's withdrawal fee and queues the onchain transfer of
   * the amount, in one transaction; nothing is written when the chain, address or amount is
   * refused, or the account is over its withdrawal rate. A retry of an existing withdrawal id
   * skips the minimum and the rate (it withdraws nothing new) and answers the first withdrawal.
   */
  async withdraw(input: WithdrawInput): Promise<{ transfer: TransferRow; balance: ChainBalance }> {
    const chain = configuredChain(this.deps.chains, input.chain);
    const directory = this.requireDirectory(chain.id);
    const { fee } = chain.withdrawal;
    if (input.amount <= 0n || input.amount > INT64_MAX - fee) {
      throw invalidField("amount", "amount must be a positive whole number of the chain's ledger units.");
    }
    const to = input.to.trim();
    if (!directory.isValidAddress(chain.id, to)) throw invalidAddress("to_address", chain.id, to);
    const key = input.withdrawalId.trim();
    if (key.length > MAX_WITHDRAWAL_ID) {
      throw invalidField("withdrawal_id", `withdrawal_id must be at most ${MAX_WITHDRAWAL_ID} characters.`);
    }
    await this.requireAccount(input.accountId);
    const id = key === "" ? newId("wd") : withdrawalIdFor(input.accountId, key);
    const retry = key !== "" && (await this.deps.onchain.transfer(id)) !== undefined;
    if (!retry) {
      if (input.amount < chain.withdrawal.minimum) throw withdrawalBelowMinimum(chain, input.amount);
      if (input.limited) await this.admit(input.accountId);
    }
    // The deposit address must be known before money leaves it (the worker signs with its key).
    await directory.depositAddress(chain.id, input.accountId);
    const result = await this.deps.onchain.withdraw({
      id,
      accountId: input.accountId,
      chain: chain.id,
      to,
      amount: input.amount,
      fee,
      now: this.deps.now(),
    });
    switch (result.kind) {
      case "written":
      case "existing":
        return {
          transfer: result.transfer,
          balance: { chain, row: await this.deps.ledger.balance(input.accountId, chain.id) },
        };
      case "conflict":
        throw idConflict(`withdrawal_id ${JSON.stringify(key)}`);
      case "insufficient":
        throw withdrawalInsufficient(chain, input.amount, result.available);
    }
  }

  /** Counts one withdrawal of the account against its rate, or refuses it. */
  private async admit(accountId: string): Promise<void> {
    const limit = this.deps.withdrawalLimit;
    if (limit === undefined) return;
    const decision = await limit.consume(accountId);
    if (!decision.allowed) throw withdrawalRateLimited(decision, this.deps.now());
  }

  /** The account's withdrawals, newest first, with seq below `beforeSeq`. */
  async withdrawals(accountId: string, beforeSeq: bigint, limit: number): Promise<TransferRow[]> {
    await this.requireAccount(accountId);
    return this.deps.onchain.listTransfers(accountId, "withdrawal", beforeSeq, limit);
  }

  /**
   * The settlement pipeline of every chain that has one or an adapter on this gateway, with the
   * chain's treasury address.
   */
  async backlog(): Promise<(BacklogRow & { readonly treasuryAddress: string })[]> {
    const rows = new Map((await this.deps.onchain.backlog()).map((row) => [row.chain, row]));
    const directory = this.deps.directory;
    for (const chain of this.deps.chains.chains) {
      if (!rows.has(chain.id) && directory?.has(chain.id)) rows.set(chain.id, emptyBacklog(chain.id));
    }
    return [...rows.values()]
      .sort((a, b) => a.chain.localeCompare(b.chain))
      .map((row) => ({ ...row, treasuryAddress: directory?.treasuryAddress(row.chain) ?? "" }));
  }

  /** The settlements of these calls. */
  settlements(holdIds: readonly string[]): Promise<Map<string, SettlementView>> {
    return this.deps.ledger.settlements(holdIds);
  }

  private requireDirectory(chainId: string): ChainDirectory {
    const directory = this.deps.directory;
    if (directory === undefined || (chainId !== "" && !directory.has(chainId)))
      throw chainsUnavailable(chainId);
    return directory;
  }

  private async requireAccount(accountId: string): Promise<void> {
    if (!(await this.deps.ledger.accountExists(accountId))) throw accountNotFound(accountId);
  }
}
