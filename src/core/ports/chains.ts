import type { ChainConfig } from "../billing/chain-registry.js";

/**
 * The chain port: everything the gateway asks of a blockchain, for one chain of the registry.
 * There is one adapter per configured chain — `src/chains/evm/` (viem) or `src/chains/solana/`
 * (@solana/web3.js 1.x) — and nothing outside `src/chains/` knows which family a chain is.
 *
 * Amounts here are onchain integers in the asset's smallest unit (10^-decimals); the ledger
 * counts in 10^-min(decimals, 9) units and `money.ts` converts between the two exactly.
 * Positions are block numbers (EVM) or slots (Solana).
 */
export interface ChainAdapter {
  /** The registry entry this adapter serves. */
  readonly chain: ChainConfig;

  /**
   * The account's deposit address on this chain, derived deterministically from the server's
   * master secret and the account id (never stored as a private key). Every chain of one family
   * gives an account the same address. Solana: the owner's address, not its token account.
   */
  depositAddress(accountId: string): string;

  /** The treasury's address: it receives settlements and pays every fee. */
  treasuryAddress(): string;

  /** Whether `address` is a well-formed address of this chain's family (for withdrawals). */
  isValidAddress(address: string): boolean;

  /**
   * The newest position that satisfies the chain's finality rule now (the head less the
   * confirmation depth, or the `finalized` commitment's slot).
   */
  finalizedPosition(): Promise<bigint>;

  /**
   * Transfers of this chain's asset (only its contract or mint) whose recipient is one of
   * `recipients` (deposit addresses as {@link depositAddress} returns them), in positions
   * `from`..`to` inclusive, in chain order. Reverted or failed transactions are not returned.
   */
  scanDeposits(from: bigint, to: bigint, recipients: ReadonlySet<string>): Promise<ObservedDeposit[]>;

  /**
   * The same transfers above the finality line: from position `from` up to the newest the chain
   * shows (EVM: the head; Solana: the `confirmed` slot), at most `maxRange` positions. Deposits on
   * their way, listed so a caller sees them coming; they may still be reorged away and are never
   * credited from here.
   */
  pendingDeposits(
    from: bigint,
    maxRange: bigint,
    recipients: ReadonlySet<string>,
  ): Promise<ObservedDeposit[]>;

  /**
   * Builds and signs a transfer of `order.amount` from the account's deposit address to
   * `order.to`, authorised by the deposit key, with the treasury paying the fee (EVM: an
   * EIP-3009 `transferWithAuthorization` sent by the treasury; Solana: `transferChecked` with
   * the treasury as fee payer). Nothing is sent. The caller records the result durably before
   * it calls {@link broadcast}, so that after a crash it can ask {@link transferState} instead
   * of paying again.
   */
  prepareTransfer(order: TransferOrder): Promise<PreparedTransfer>;

  /** Sends a prepared transfer. Sending the same one again is harmless. */
  broadcast(prepared: PreparedTransfer): Promise<void>;

  /**
   * Where a prepared transfer stands. `confirmed`: it landed and moved the funds (at the
   * chain's finality rule). `failed`: it landed but reverted, so nothing moved. `dropped`: it is
   * not onchain and can no longer land (its nonce was consumed otherwise, or its blockhash
   * expired). Only after `failed` or `dropped` may the order be prepared anew.
   */
  transferState(prepared: PreparedTransfer): Promise<TransferState>;

  /**
   * An unsigned transaction, serialized in the chain's wire format, that sends `amount` (onchain
   * units) of the asset from `from` — a user's own wallet — to the account's deposit address,
   * for that wallet to sign and send; the sender pays the fee. It is how the dashboard funds an
   * account from a wallet that will not assemble a token transfer itself (Solana wallets sign
   * transactions, they do not build them). Optional: EVM wallets send an ERC-20 `transfer` built
   * from the contract address alone, so EVM adapters leave it out.
   */
  fundingTransaction?(from: string, accountId: string, amount: bigint): Promise<Uint8Array>;

  /** The asset balance of an address, in onchain units (reconciliation and tests). */
  balanceOf(address: string): Promise<bigint>;

  /** Whether the RPC answers, and the head it reports. */
  health(): Promise<ChainHealth>;

  /**
   * The treasury's native balance (it pays every transfer's fee) and what one transfer can cost
   * it now (EVM: gas price × the gas a settlement uses; Solana: the signatures' fees plus the rent
   * of a token account a withdrawal may create).
   */
  treasuryFees(): Promise<TreasuryFees>;

  /** Releases connections and timers. */
  close(): Promise<void>;
}

/** One transfer of the asset to a deposit address, as seen onchain. */
export interface ObservedDeposit {
  /** Transaction hash (EVM) or signature (Solana). */
  readonly txHash: string;
  /** Log index (EVM) or instruction index (Solana) within the transaction. */
  readonly index: number;
  /** Block number or slot. */
  readonly position: bigint;
  readonly from: string;
  /** The deposit address credited (the owner on Solana, not the token account). */
  readonly to: string;
  /** Onchain units. */
  readonly amount: bigint;
}

/** A transfer out of an account's deposit address: a settlement or a withdrawal. */
export interface TransferOrder {
  /**
   * The outbox row's id, unique forever. EVM derives the EIP-3009 nonce from it, so the same
   * order can never be paid twice onchain.
   */
  readonly id: string;
  /** Whose deposit key signs. */
  readonly accountId: string;
  /** The treasury (settlement) or the address the account named (withdrawal). */
  readonly to: string;
  /** Onchain units, > 0. */
  readonly amount: bigint;
}

/** A signed, not necessarily sent, transfer: store it before broadcasting. */
export interface PreparedTransfer {
  readonly orderId: string;
  /** The transaction hash or signature it will have onchain. */
  readonly txHash: string;
  /** The signed transaction, serialised (hex for EVM, base64 for Solana). */
  readonly raw: string;
}

export type TransferState = "pending" | "confirmed" | "failed" | "dropped";

export interface TreasuryFees {
  /** In the native currency's smallest unit (wei, lamports). */
  readonly balance: bigint;
  readonly oneTransfer: bigint;
  readonly symbol: string;
  readonly decimals: number;
}

export interface ChainHealth {
  readonly reachable: boolean;
  /** The newest position the RPC reports, when reachable. */
  readonly head: bigint | undefined;
  readonly error: string | undefined;
}
