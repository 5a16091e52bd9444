/**
 * The chain port for a Solana chain of the registry, on @solana/web3.js 1.x (`Connection`, over
 * HTTP JSON-RPC only) and @solana/spl-token. The asset is a classic SPL Token mint
 * (`chain.asset.address`); finality is a commitment (`confirmed` or `finalized`).
 *
 * - Deposit address: the owner key derived from the master secret (keys.ts); deposits land in
 *   its associated token account, which is what the scan watches.
 * - Deposit scan: `getBlocks` + `getBlock` per slot at the chain's commitment, matching every
 *   token credit against a set of owners (deposit-scan.ts) — the cost grows with blocks, not
 *   with accounts (see docs/chains.md, The Solana family, for 100,000 accounts).
 * - Transfers: one transaction — create the destination's associated token account if missing
 *   (idempotent; the treasury pays the rent), `transferChecked` signed by the deposit key, and a
 *   memo `tollgate order <id> valid-through-height <h>` — with the treasury as fee payer, so a
 *   deposit owner never needs SOL. The memo makes each order's transaction unique and carries
 *   the block height after which its blockhash has expired, which is how `transferState` knows
 *   a transaction that never landed can no longer land (`dropped`).
 */

import { getBase58Decoder, getBase58Encoder } from "@solana/kit";
import {
  ACCOUNT_SIZE,
  createAssociatedTokenAccountIdempotentInstruction,
  createTransferCheckedInstruction,
  getAccount,
  getAssociatedTokenAddressSync,
  TOKEN_PROGRAM_ID,
  TokenAccountNotFoundError,
  TokenInvalidAccountOwnerError,
} from "@solana/spl-token";
import {
  type Commitment,
  Connection,
  type ConnectionConfig,
  type Keypair,
  PublicKey,
  type SignatureStatus,
  Transaction,
  type VersionedBlockResponse,
} from "@solana/web3.js";
import type { ChainConfig } from "../../core/billing/chain-registry.js";
import type {
  ChainAdapter,
  ChainHealth,
  ObservedDeposit,
  PreparedTransfer,
  TransferOrder,
  TransferState,
} from "../../core/ports/chains.js";
import { findDeposits, type ScannedInstruction, type ScannedTransaction } from "./deposit-scan.js";
import { signAndSerialize } from "./fast-sign.js";
import { solanaDepositKeypair, solanaTreasuryKeypair } from "./keys.js";
import { MEMO_PROGRAM_ID, memoInstruction } from "./memo.js";

/** Tuning for the Solana adapter (all optional). */
export interface SolanaAdapterOptions {
  /** The server's master secret (≥ 16 bytes): deposit and treasury keys derive from it. */
  readonly masterSecret: Uint8Array;
  /** Per-request RPC timeout. Default 10 s. */
  readonly rpcTimeoutMs?: number;
  /** Blocks fetched in parallel while scanning. Default 8. */
  readonly scanConcurrency?: number;
}

const fromBase58 = getBase58Encoder();
const toBase58 = getBase58Decoder();
const BASE58_ADDRESS = /^[1-9A-HJ-NP-Za-km-z]{32,44}$/;
const U64_MAX = (1n << 64n) - 1n;
/** Agave serves at most this many slots per getBlocks call. */
const MAX_BLOCKS_RANGE = 500_000;
const MEMO_PATTERN = /^tollgate order (\S+) valid-through-height (\d+)$/;
/** Derived deposit keys kept in memory; past this the cache starts over (a derivation is ~1 ms). */
const KEY_CACHE_LIMIT = 100_000;

/** Creates the chain port for one Solana chain of the registry. */
export function createSolanaAdapter(chain: ChainConfig, options: SolanaAdapterOptions): ChainAdapter {
  if (chain.family !== "solana") throw new Error(`chain ${chain.id} is not a Solana chain`);
  if (!("commitment" in chain.finality)) throw new Error(`chain ${chain.id}: finality must be a commitment`);
  if (options.masterSecret.length < 16) throw new Error("the master secret must be at least 16 bytes");
  const protocol = new URL(chain.rpcUrl).protocol;
  if (protocol !== "http:" && protocol !== "https:") {
    throw new Error(
      `chain ${chain.id}: a Solana rpc_url must be http(s):// (the adapter uses JSON-RPC over HTTP)`,
    );
  }
  const commitment: Commitment = chain.finality.commitment;
  const masterSecret = Uint8Array.from(options.masterSecret);
  const mint = new PublicKey(chain.asset.address);
  const mintAddress = mint.toBase58();
  const decimals = chain.asset.decimals;
  const treasury = solanaTreasuryKeypair(masterSecret);
  const timeoutMs = options.rpcTimeoutMs ?? 10_000;
  const scanConcurrency = options.scanConcurrency ?? 8;

  const timedFetch = (input: string | URL, init?: RequestInit) =>
    fetch(input, { ...init, signal: AbortSignal.timeout(timeoutMs) });
  const config: ConnectionConfig = {
    commitment,
    // The worker has its own backoff; web3.js's 429 retry loop would hide an outage from it.
    disableRetryOnRateLimit: true,
    httpAgent: false,
    fetch: timedFetch as unknown as ConnectionConfig["fetch"],
  };
  const connection = new Connection(chain.rpcUrl, config);

  const depositKeys = new Map<string, Keypair>();
  const depositKey = (accountId: string): Keypair => {
    let key = depositKeys.get(accountId);
    if (key === undefined) {
      if (depositKeys.size >= KEY_CACHE_LIMIT) depositKeys.clear();
      key = solanaDepositKeypair(masterSecret, accountId);
      depositKeys.set(accountId, key);
    }
    return key;
  };
  // Deriving an associated token address searches for a program address (~1–3 ms): cache it.
  const ataCache = new Map<string, PublicKey>();
  const tokenAccountOf = (owner: PublicKey): PublicKey => {
    const key = owner.toBase58();
    let ata = ataCache.get(key);
    if (ata === undefined) {
      if (ataCache.size >= KEY_CACHE_LIMIT) ataCache.clear();
      ata = getAssociatedTokenAddressSync(mint, owner, true);
      ataCache.set(key, ata);
    }
    return ata;
  };
  const isDepositAccount = (owner: string, tokenAccount: string): boolean =>
    tokenAccountOf(new PublicKey(owner)).toBase58() === tokenAccount;

  const statusOf = async (signature: string): Promise<SignatureStatus | null> => {
    const { value } = await connection.getSignatureStatuses([signature], { searchTransactionHistory: true });
    return value[0] ?? null;
  };
  const final = (status: SignatureStatus): boolean =>
    status.confirmationStatus === "finalized" ||
    (commitment === "confirmed" && status.confirmationStatus === "confirmed");
  const landedState = (status: SignatureStatus): TransferState => {
    if (!final(status)) return "pending";
    return status.err === null ? "confirmed" : "failed";
  };

  const isValidAddress = (address: string): boolean => {
    if (!BASE58_ADDRESS.test(address)) return false;
    try {
      // Off-curve addresses (program-derived, or someone's token account pasted by mistake)
      // cannot sign, and funds sent to their associated token account would be stuck.
      return PublicKey.isOnCurve(new PublicKey(address).toBytes());
    } catch {
      return false;
    }
  };

  /** Deposits in slots `from`..`to` as the `level` commitment shows them. */
  const scanSlots = async (
    from: bigint,
    to: bigint,
    recipients: ReadonlySet<string>,
    level: "confirmed" | "finalized",
  ): Promise<ObservedDeposit[]> => {
    const rule = {
      mint: mintAddress,
      tokenProgram: TOKEN_PROGRAM_ID.toBase58(),
      recipients,
      isDepositAccount,
    };
    const deposits: ObservedDeposit[] = [];
    for (let start = from; start <= to; start += BigInt(MAX_BLOCKS_RANGE)) {
      const end = minBigint(to, start + BigInt(MAX_BLOCKS_RANGE) - 1n);
      const slots = await connection.getBlocks(Number(start), Number(end), level);
      const blocks = await mapConcurrent(slots, scanConcurrency, (slot) =>
        connection.getBlock(slot, {
          commitment: level,
          maxSupportedTransactionVersion: 0,
          transactionDetails: "full",
          rewards: false,
        }),
      );
      blocks.forEach((block, i) => {
        // getBlocks lists only produced blocks, so a missing one is an RPC fault, not an empty
        // slot: failing keeps the caller's cursor where it was instead of skipping deposits.
        if (block === null)
          throw new Error(`chain ${chain.id}: the RPC returned no block for slot ${slots[i]}`);
        deposits.push(...findDeposits(BigInt(slots[i]!), scannedTransactions(block), rule));
      });
    }
    return deposits;
  };

  return {
    chain,

    depositAddress: (accountId) => depositKey(accountId).publicKey.toBase58(),

    treasuryAddress: () => treasury.publicKey.toBase58(),

    isValidAddress,

    finalizedPosition: async () => BigInt(await connection.getSlot(commitment)),

    async scanDeposits(from, to, recipients) {
      if (to < from || recipients.size === 0) return [];
      // getBlocks silently stops at the commitment's newest slot; a caller whose cursor then
      // moved to `to` would skip the slots in between, so refuse instead.
      const finalized = BigInt(await connection.getSlot(commitment));
      if (to > finalized) {
        throw new Error(
          `chain ${chain.id}: cannot scan to slot ${to}, past the ${commitment} slot ${finalized}`,
        );
      }
      return scanSlots(from, to, recipients, commitment as "confirmed" | "finalized");
    },

    async pendingDeposits(from, maxRange, recipients) {
      // Blocks are served from `confirmed` at the earliest: below it a slot may still be skipped.
      if (recipients.size === 0 || commitment === "confirmed") return [];
      const confirmed = BigInt(await connection.getSlot("confirmed"));
      const to = from + maxRange - 1n < confirmed ? from + maxRange - 1n : confirmed;
      if (to < from) return [];
      return scanSlots(from, to, recipients, "confirmed");
    },

    async prepareTransfer(order: TransferOrder): Promise<PreparedTransfer> {
      if (order.amount <= 0n || order.amount > U64_MAX) {
        throw new Error(`order ${order.id}: amount must be in 1..2^64-1 onchain units`);
      }
      if (!isValidAddress(order.to))
        throw new Error(`order ${order.id}: ${order.to} is not a valid Solana address`);
      if (/\s/.test(order.id) || order.id.length === 0)
        throw new Error(`order id ${JSON.stringify(order.id)} is invalid`);
      const owner = depositKey(order.accountId);
      const toOwner = new PublicKey(order.to);
      // A transfer to itself would succeed onchain and move nothing while the ledger debits.
      if (toOwner.equals(owner.publicKey)) {
        throw new Error(`order ${order.id}: ${order.to} is the account's own deposit address`);
      }
      const destination = tokenAccountOf(toOwner);
      const { blockhash, lastValidBlockHeight } = await connection.getLatestBlockhash("confirmed");
      const tx = new Transaction({ feePayer: treasury.publicKey, blockhash, lastValidBlockHeight });
      tx.add(
        createAssociatedTokenAccountIdempotentInstruction(treasury.publicKey, destination, toOwner, mint),
        createTransferCheckedInstruction(
          tokenAccountOf(owner.publicKey),
          mint,
          destination,
          owner.publicKey,
          order.amount,
          decimals,
        ),
        memoInstruction(`tollgate order ${order.id} valid-through-height ${lastValidBlockHeight}`),
      );
      const { wire, signature } = signAndSerialize(tx, [treasury, owner]);
      return { orderId: order.id, txHash: toBase58.decode(signature), raw: wire.toString("base64") };
    },

    async broadcast(prepared) {
      const raw = Buffer.from(prepared.raw, "base64");
      try {
        await connection.sendRawTransaction(raw, { skipPreflight: false, preflightCommitment: "confirmed" });
      } catch (cause) {
        // A transaction that already landed fails preflight ("already processed"): that is the
        // harmless re-send the port promises. Anything else is the caller's to retry.
        const landed = await statusOf(prepared.txHash).catch(() => null);
        if (landed !== null) return;
        throw new Error(`chain ${chain.id}: broadcast of ${prepared.txHash} failed: ${errorMessage(cause)}`, {
          cause,
        });
      }
    },

    async transferState(prepared) {
      const status = await statusOf(prepared.txHash);
      if (status !== null) return landedState(status);
      const { validThroughHeight } = readPrepared(prepared);
      const height = await connection.getBlockHeight("finalized");
      if (height <= validThroughHeight) return "pending";
      // Expired as of the finalized block height: no fork can include it any more. Ask once
      // more, in case it landed between the two questions.
      const again = await statusOf(prepared.txHash);
      return again === null ? "dropped" : landedState(again);
    },

    async fundingTransaction(from, accountId, amount) {
      if (!isValidAddress(from)) throw new Error(`${from} is not a Solana wallet address`);
      if (amount <= 0n || amount > U64_MAX) throw new Error("the amount must be positive and fit in u64");
      const sender = new PublicKey(from);
      const owner = depositKey(accountId).publicKey;
      const destination = tokenAccountOf(owner);
      const { blockhash, lastValidBlockHeight } = await connection.getLatestBlockhash(commitment);
      // The sender pays the fee and, the first time, the deposit token account's rent.
      const transaction = new Transaction({ feePayer: sender, blockhash, lastValidBlockHeight }).add(
        createAssociatedTokenAccountIdempotentInstruction(sender, destination, owner, mint),
        createTransferCheckedInstruction(tokenAccountOf(sender), mint, destination, sender, amount, decimals),
      );
      return transaction.serialize({ requireAllSignatures: false, verifySignatures: false });
    },

    async balanceOf(address) {
      let owner: PublicKey;
      try {
        owner = new PublicKey(address);
      } catch {
        throw new Error(`${address} is not a Solana address`);
      }
      try {
        const account = await getAccount(connection, tokenAccountOf(owner), commitment);
        return account.amount;
      } catch (cause) {
        if (cause instanceof TokenAccountNotFoundError || cause instanceof TokenInvalidAccountOwnerError)
          return 0n;
        throw cause;
      }
    },

    async treasuryFees() {
      const [balance, rent] = await Promise.all([
        connection.getBalance(treasury.publicKey, "confirmed"),
        connection.getMinimumBalanceForRentExemption(ACCOUNT_SIZE),
      ]);
      // Two signatures at 5,000 lamports, and a withdrawal may create the recipient's token account.
      return { balance: BigInt(balance), oneTransfer: 10_000n + BigInt(rent), symbol: "SOL", decimals: 9 };
    },

    async health(): Promise<ChainHealth> {
      try {
        const head = await connection.getSlot("processed");
        return { reachable: true, head: BigInt(head), error: undefined };
      } catch (cause) {
        return { reachable: false, head: undefined, error: errorMessage(cause) };
      }
    },

    async close() {
      depositKeys.clear();
      ataCache.clear();
    },
  };
}

function readPrepared(prepared: PreparedTransfer): { validThroughHeight: number } {
  const tx = Transaction.from(Buffer.from(prepared.raw, "base64"));
  for (const ix of tx.instructions) {
    if (!ix.programId.equals(MEMO_PROGRAM_ID)) continue;
    const match = MEMO_PATTERN.exec(ix.data.toString("utf8"));
    if (match !== null && match[1] === prepared.orderId) return { validThroughHeight: Number(match[2]) };
  }
  throw new Error(
    `prepared transfer ${prepared.txHash} is not one this adapter prepared for order ${prepared.orderId}`,
  );
}

function scannedTransactions(block: VersionedBlockResponse): ScannedTransaction[] {
  return block.transactions.map(({ transaction, meta }) => {
    const message = transaction.message;
    const lookups = meta?.loadedAddresses;
    const keys =
      message.version === 0 && lookups !== undefined
        ? message.getAccountKeys({ accountKeysFromLookups: lookups })
        : message.getAccountKeys();
    const accountKeys = keys
      .keySegments()
      .flat()
      .map((k) => k.toBase58());
    const inner = new Map<number, ScannedInstruction[]>();
    for (const entry of meta?.innerInstructions ?? []) {
      inner.set(
        entry.index,
        entry.instructions.map((ix) => ({
          programIdIndex: ix.programIdIndex,
          accounts: ix.accounts,
          data: fromBase58.encode(ix.data) as Uint8Array,
        })),
      );
    }
    return {
      signature: transaction.signatures[0]!,
      accountKeys,
      instructions: message.compiledInstructions.map((ix) => ({
        programIdIndex: ix.programIdIndex,
        accounts: ix.accountKeyIndexes,
        data: ix.data,
      })),
      innerInstructions: inner,
      preTokenBalances: meta?.preTokenBalances ?? [],
      postTokenBalances: meta?.postTokenBalances ?? [],
      // No metadata means the RPC cannot vouch for the outcome: treat it as not a deposit.
      failed: meta === null || meta.err !== null,
    };
  });
}

async function mapConcurrent<T, R>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<R>,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}

function minBigint(a: bigint, b: bigint): bigint {
  return a < b ? a : b;
}

function errorMessage(cause: unknown): string {
  return cause instanceof Error ? cause.message : String(cause);
}
