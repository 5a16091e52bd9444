/**
 * The ledger of the Solana dev chain: litesvm (the real SVM with the real SPL Token, Associated
 * Token Account and Memo programs) wrapped in the few things litesvm leaves out and an RPC
 * client relies on — slots that advance, blocks that record every landed transaction with its
 * metadata, commitment levels that lag one another, blockhashes that expire, and signature
 * statuses. `dev-rpc.ts` serves it as Solana JSON-RPC; nothing here does I/O.
 *
 * The model (documented for operators in docs/chains.md (The Solana family)):
 * - One slot is open at a time; every transaction lands in it. The slot closes on a timer
 *   (`slotMs`) or when a caller advances it; every slot yields a block (possibly empty), so the
 *   block height equals the slot.
 * - `processed` is the open slot, `confirmed` trails it by `confirmedLag` (≥ 1, so a block is
 *   complete before anyone can read it) and `finalized` by `finalizedLag`.
 * - Each slot has its own blockhash; a transaction is accepted while its blockhash is at most
 *   `blockhashValidSlots` slots old (Solana's 150), later it is dropped — so "expired" is real.
 * - A transaction that fails in execution still lands (with its error, fee charged) as on
 *   Solana; one rejected before execution (unfunded fee payer, bad signature…) never lands.
 * - Account state is litesvm's single current state: reads answer as of `processed` whatever
 *   commitment is asked. Blocks, slots and signature statuses honour commitment.
 */
import { createHash, randomBytes } from "node:crypto";
import { address, getBase58Decoder, getTransactionDecoder, lamports } from "@solana/kit";
import { AccountLayout, MintLayout, TOKEN_2022_PROGRAM_ID, TOKEN_PROGRAM_ID } from "@solana/spl-token";
import { PublicKey, type TransactionVersion, VersionedTransaction } from "@solana/web3.js";
import { FailedTransactionMetadata, LiteSVM, type TransactionMetadata } from "litesvm";

/** A commitment level, as Solana RPC names it. */
export type Commitment = "processed" | "confirmed" | "finalized";

/** How the dev chain's slots and blockhashes behave. */
export interface DevSvmOptions {
  /** Milliseconds per slot on the timer; 0 leaves slots to {@link DevSvm.advanceSlots}. Default 400. */
  readonly slotMs?: number;
  /** Slots by which `confirmed` trails `processed` (≥ 1). Default 1. */
  readonly confirmedLag?: number;
  /** Slots by which `finalized` trails `processed` (≥ confirmedLag). Default 32. */
  readonly finalizedLag?: number;
  /** Slots a blockhash stays usable. Default 150, as on Solana. */
  readonly blockhashValidSlots?: number;
}

/** A JSON-RPC error as the Solana RPC reports it (code, message, optional data). */
export class RpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly data?: unknown,
  ) {
    super(message);
    this.name = "RpcError";
  }
}

/** Solana RPC's error codes that the dev chain uses. */
export const RPC_ERROR = {
  invalidParams: -32602,
  methodNotFound: -32601,
  invalidRequest: -32600,
  parse: -32700,
  /** sendTransaction preflight failure (simulation failed, blockhash not found, already processed). */
  preflightFailure: -32002,
  signatureVerification: -32003,
  blockNotAvailable: -32004,
} as const;

/** A transaction error in the RPC's JSON form: `"AccountNotFound"`, `{InstructionError: [0, {Custom: 1}]}`… */
export type TransactionErrorJson = string | Record<string, unknown>;

/** Per-token-account balance, as `preTokenBalances`/`postTokenBalances` report it. */
export interface TokenBalanceJson {
  readonly accountIndex: number;
  readonly mint: string;
  readonly owner: string;
  readonly programId: string;
  readonly uiTokenAmount: UiTokenAmount;
}

/** A token amount in the RPC's shape. */
export interface UiTokenAmount {
  readonly amount: string;
  readonly decimals: number;
  readonly uiAmount: number | null;
  readonly uiAmountString: string;
}

/** A landed transaction, with its `getBlock`/`getTransaction` JSON (encoding `json`) prepared once. */
export interface LandedTransaction {
  readonly signature: string;
  readonly slot: number;
  readonly err: TransactionErrorJson | null;
  readonly version: TransactionVersion;
  readonly transaction: Record<string, unknown>;
  readonly meta: Record<string, unknown>;
}

/** One slot's block. */
export interface DevBlock {
  readonly slot: number;
  readonly blockhash: string;
  readonly blockTime: number;
  readonly transactions: LandedTransaction[];
}

/** What happened to a submitted transaction. */
export type SubmitOutcome =
  | { readonly kind: "landed"; readonly tx: LandedTransaction; readonly logs: readonly string[] }
  /** Already landed before: nothing happens again. */
  | { readonly kind: "duplicate"; readonly signature: string }
  /** Not executed and never will be (expired or unknown blockhash, or rejected before execution). */
  | { readonly kind: "dropped"; readonly signature: string; readonly err: TransactionErrorJson };

/** What litesvm's built-in airdrop account starts with (enough for the dev faucet). */
const GENESIS_LAMPORTS = 10n ** 16n;

const STATE_FORMAT = "tollgate-solana-dev-chain/1";

/** A dev chain's saved state (JSON-ready). */
export interface DevSvmState {
  readonly format: string;
  /** Hex; blockhashes derive from it and the slot. */
  readonly salt: string;
  /** Base64 of litesvm's snapshot (accounts, sysvars, features). */
  readonly svm: string;
  /** The open slot when saved. */
  readonly head: number;
  /** Blocks that hold transactions. */
  readonly blocks: readonly DevBlock[];
  /** Unix ms. */
  readonly savedAt: number;
  /** Written at shutdown (true) or periodically while running (false). */
  readonly clean: boolean;
}

/** Solana's base fee per signature, which litesvm charges too. */
export const LAMPORTS_PER_SIGNATURE = 5000;

const base58 = getBase58Decoder();
const txDecoder = getTransactionDecoder();
const TOKEN_PROGRAMS = new Set([TOKEN_PROGRAM_ID.toBase58(), TOKEN_2022_PROGRAM_ID.toBase58()]);

/** The dev chain's state machine: litesvm plus slots, blocks, commitments and blockhash expiry. */
export class DevSvm {
  readonly svm: LiteSVM;
  readonly slotMs: number;
  readonly confirmedLag: number;
  readonly finalizedLag: number;
  readonly blockhashValidSlots: number;
  private readonly salt: Buffer;
  private readonly blocks: DevBlock[] = [];
  /** Counts changes, so a saver can tell whether anything happened since it last wrote. */
  private changes = 0;
  private readonly blockhashSlots = new Map<string, number>();
  private readonly landed = new Map<string, LandedTransaction>();
  private readonly mintDecimals = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private readonly listeners = new Set<() => void>();
  /** Called with each transaction's fee payer before it is simulated or executed (dev-chain.ts tops it up). */
  feePayerHook: ((feePayer: string) => void) | undefined;

  /** A fresh chain, or the one `state` (from {@link toState}) describes. */
  constructor(options: DevSvmOptions = {}, state?: DevSvmState) {
    this.slotMs = options.slotMs ?? 400;
    this.confirmedLag = options.confirmedLag ?? 1;
    this.finalizedLag = options.finalizedLag ?? 32;
    this.blockhashValidSlots = options.blockhashValidSlots ?? 150;
    if (!Number.isInteger(this.slotMs) || this.slotMs < 0) throw new Error("slotMs must be an integer ≥ 0");
    if (!Number.isInteger(this.confirmedLag) || this.confirmedLag < 1)
      throw new Error("confirmedLag must be an integer ≥ 1");
    if (!Number.isInteger(this.finalizedLag) || this.finalizedLag < this.confirmedLag)
      throw new Error("finalizedLag must be an integer ≥ confirmedLag");
    if (!Number.isInteger(this.blockhashValidSlots) || this.blockhashValidSlots < 1)
      throw new Error("blockhashValidSlots must be an integer ≥ 1");
    // The blockhash check and the duplicate-signature history are ours (per-slot blockhashes that
    // expire, and a duplicate never lands twice), so litesvm's single-blockhash check is off.
    if (state === undefined) {
      this.salt = randomBytes(16);
      this.svm = new LiteSVM()
        .withLamports(GENESIS_LAMPORTS)
        .withBlockhashCheck(false)
        .withTransactionHistory(0n);
      // Genesis history: slot 0 is finalized and the first open slot lies `finalizedLag` past it,
      // so nothing that lands from now on is final before its time.
      for (let slot = 0; slot <= this.finalizedLag; slot++) this.openSlot(slot);
    } else {
      if (state.format !== STATE_FORMAT)
        throw new Error(`unknown dev chain state format ${String(state.format)}`);
      this.salt = Buffer.from(state.salt, "hex");
      this.svm = LiteSVM.fromBytes(Buffer.from(state.svm, "base64"))
        .withBlockhashCheck(false)
        .withTransactionHistory(0n);
      const saved = new Map(state.blocks.map((block) => [block.slot, block]));
      let blockTime = state.blocks[0]?.blockTime ?? Math.floor(state.savedAt / 1000);
      for (let slot = 0; slot <= state.head; slot++) {
        const block = saved.get(slot);
        if (block === undefined) {
          this.openSlot(slot, blockTime);
          continue;
        }
        blockTime = block.blockTime;
        this.pushBlock(block);
        for (const tx of block.transactions) this.landed.set(tx.signature, tx);
      }
    }
    if (this.slotMs > 0) {
      this.timer = setInterval(() => this.advanceSlots(1), this.slotMs);
      this.timer.unref();
    }
  }

  /** Calls `listener` after every slot change and every landed transaction; returns its removal. */
  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Stops the slot timer. */
  stop(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** The open slot (`processed`). */
  get processedSlot(): number {
    return this.blocks.length - 1;
  }

  /** The newest slot at `commitment`. */
  slotAt(commitment: Commitment): number {
    const head = this.processedSlot;
    if (commitment === "processed") return head;
    return Math.max(0, head - (commitment === "confirmed" ? this.confirmedLag : this.finalizedLag));
  }

  /** Closes the open slot and opens the next, `count` times; returns the new open slot. */
  advanceSlots(count: number): number {
    if (!Number.isInteger(count) || count < 0) throw new Error("count must be an integer ≥ 0");
    for (let i = 0; i < count; i++) this.openSlot(this.processedSlot + 1);
    const clock = this.svm.getClock();
    clock.slot = BigInt(this.processedSlot);
    clock.unixTimestamp = BigInt(Math.floor(Date.now() / 1000));
    this.svm.setClock(clock);
    this.changed();
    return this.processedSlot;
  }

  /** The block of `slot`, when it exists. */
  block(slot: number): DevBlock | undefined {
    return this.blocks[slot];
  }

  /** The blockhash transactions should use now, and the last block height it is valid at. */
  latestBlockhash(commitment: Commitment): { blockhash: string; lastValidBlockHeight: number; slot: number } {
    const slot = this.slotAt(commitment);
    const block = this.blocks[slot]!;
    return { blockhash: block.blockhash, lastValidBlockHeight: slot + this.blockhashValidSlots, slot };
  }

  /** Whether a transaction using `blockhash` would still be accepted, judged at `commitment`. */
  isBlockhashValid(blockhash: string, commitment: Commitment): boolean {
    const slot = this.blockhashSlots.get(blockhash);
    const at = this.slotAt(commitment);
    return slot !== undefined && slot <= at && slot + this.blockhashValidSlots >= at;
  }

  /** A landed transaction by signature. */
  transaction(signature: string): LandedTransaction | undefined {
    return this.landed.get(signature);
  }

  /** Number of landed transactions. */
  get transactionCount(): number {
    return this.landed.size;
  }

  /**
   * Runs the transaction without committing anything: undefined when it would succeed, else why
   * not. Signatures are checked only with `sigVerify` (the RPC's `simulateTransaction` default is
   * not to; `sendTransaction`'s preflight does).
   */
  simulate(
    wire: Uint8Array,
    { sigVerify = true }: { readonly sigVerify?: boolean } = {},
  ): { err: TransactionErrorJson; logs: string[] } | undefined {
    const parsed = parseTransaction(wire);
    this.feePayerHook?.(parsed.tx.message.staticAccountKeys[0]!.toBase58());
    if (this.landed.has(parsed.signature)) return { err: "AlreadyProcessed", logs: [] };
    if (!this.isBlockhashValid(parsed.tx.message.recentBlockhash, "processed")) {
      return { err: "BlockhashNotFound", logs: [] };
    }
    if (!sigVerify) this.svm.withSigverify(false);
    let result: ReturnType<LiteSVM["simulateTransaction"]>;
    try {
      result = this.svm.simulateTransaction(txDecoder.decode(wire));
    } finally {
      if (!sigVerify) this.svm.withSigverify(true);
    }
    if (!isFailure(result)) return undefined;
    return { err: transactionErrorJson(result.err()), logs: result.meta().logs() };
  }

  /**
   * Executes a signed transaction in the open slot. Throws {@link RpcError} only for bytes that
   * are not a transaction, unsupported features, or a bad signature (the RPC refuses those
   * before forwarding); otherwise reports whether it landed.
   */
  submit(wire: Uint8Array): SubmitOutcome {
    const { tx, signature } = parseTransaction(wire);
    this.feePayerHook?.(tx.message.staticAccountKeys[0]!.toBase58());
    if (this.landed.has(signature)) return { kind: "duplicate", signature };
    if (!this.isBlockhashValid(tx.message.recentBlockhash, "processed")) {
      return { kind: "dropped", signature, err: "BlockhashNotFound" };
    }
    const keys = tx.message.staticAccountKeys.map((k) => k.toBase58());
    const feePayer = keys[0]!;
    // Programs are never token accounts, and reading one copies its whole executable.
    const programs = new Set(tx.message.compiledInstructions.map((ix) => ix.programIdIndex));
    const pre = this.snapshot(keys, programs);
    const result = this.svm.sendTransaction(txDecoder.decode(wire));
    let meta: TransactionMetadata;
    let err: TransactionErrorJson | null = null;
    if (isFailure(result)) {
      err = transactionErrorJson(result.err());
      if (err === "SignatureFailure") {
        throw new RpcError(RPC_ERROR.signatureVerification, "Transaction signature verification failure");
      }
      // Solana commits a failed transaction (and charges its fee) only when it got as far as
      // execution; litesvm charges the fee exactly then, so the fee payer's balance tells.
      if (this.lamports(feePayer) >= pre.balances[0]!) return { kind: "dropped", signature, err };
      meta = result.meta();
    } else {
      meta = result;
    }
    const landedTx = this.record(tx, signature, err, meta, pre, this.snapshot(keys, programs), keys);
    return { kind: "landed", tx: landedTx, logs: meta.logs() };
  }

  /** Lamports held by `account` (0 when it does not exist). */
  lamports(account: string): number {
    const native = nativeSvm(this.svm);
    if (native !== undefined) return Number(native.getBalance(new PublicKey(account).toBytes()) ?? 0n);
    return Number(this.svm.getBalance(address(account)) ?? 0n);
  }

  /** The raw account, when it exists. */
  account(
    account: string,
  ): { lamports: number; data: Uint8Array; owner: string; executable: boolean; space: number } | undefined {
    const native = nativeSvm(this.svm);
    if (native !== undefined) {
      const raw = native.getAccount(new PublicKey(account).toBytes());
      if (raw === null) return undefined;
      const data = raw.data();
      return {
        lamports: Number(raw.lamports()),
        data,
        owner: new PublicKey(raw.owner()).toBase58(),
        executable: raw.executable(),
        space: data.length,
      };
    }
    const found = this.svm.getAccount(address(account));
    if (!found.exists) return undefined;
    return {
      lamports: Number(found.lamports),
      data: found.data,
      owner: found.programAddress,
      executable: found.executable,
      space: found.data.length,
    };
  }

  /** The token amount of an SPL token account, or undefined when `account` is not one. */
  tokenAmount(account: string): UiTokenAmount | undefined {
    const found = this.account(account);
    if (found === undefined || !isTokenAccount(found.owner, found.data)) return undefined;
    const decoded = AccountLayout.decode(found.data.subarray(0, AccountLayout.span));
    return uiTokenAmount(decoded.amount, this.decimalsOf(decoded.mint.toBase58()));
  }

  /** The rent-exempt minimum for `dataLength` bytes. */
  rentExemptMinimum(dataLength: number): number {
    return Number(this.svm.minimumBalanceForRentExemption(BigInt(dataLength)));
  }

  /** Credits lamports from litesvm's built-in airdrop account (used once, to fund the dev faucet). */
  fundFromGenesis(account: string, amount: bigint): void {
    const result = this.svm.airdrop(address(account), lamports(amount));
    if (result === null || isFailure(result)) throw new Error(`genesis airdrop to ${account} failed`);
  }

  /** How many changes (slots, transactions) the chain has seen; grows with every one. */
  get changeCount(): number {
    return this.changes;
  }

  /**
   * Everything needed to resume this chain in another process: litesvm's snapshot, the blocks
   * that hold transactions (empty ones are re-derived), the head slot and the blockhash salt.
   */
  toState(clean: boolean): DevSvmState {
    return {
      format: STATE_FORMAT,
      salt: this.salt.toString("hex"),
      svm: Buffer.from(this.svm.toBytes()).toString("base64"),
      head: this.processedSlot,
      blocks: this.blocks.filter((block) => block.transactions.length > 0),
      savedAt: Date.now(),
      clean,
    };
  }

  private changed(): void {
    this.changes++;
    for (const listener of this.listeners) listener();
  }

  private openSlot(slot: number, blockTime = Math.floor(Date.now() / 1000)): void {
    const blockhash = new PublicKey(
      createHash("sha256").update(this.salt).update(`slot:${slot}`).digest(),
    ).toBase58();
    this.pushBlock({ slot, blockhash, blockTime, transactions: [] });
  }

  private pushBlock(block: DevBlock): void {
    this.blocks.push(block);
    this.blockhashSlots.set(block.blockhash, block.slot);
    // Blockhashes far past expiry can never be judged valid again: forget them.
    const stale = this.blocks[block.slot - this.blockhashValidSlots - this.finalizedLag - 1];
    if (stale !== undefined) this.blockhashSlots.delete(stale.blockhash);
  }

  private decimalsOf(mint: string): number {
    let decimals = this.mintDecimals.get(mint);
    if (decimals === undefined) {
      const found = this.account(mint);
      if (found === undefined || found.data.length < MintLayout.span) return 0;
      decimals = MintLayout.decode(found.data.subarray(0, MintLayout.span)).decimals;
      this.mintDecimals.set(mint, decimals);
    }
    return decimals;
  }

  /** Lamports and token balances of a transaction's accounts (one account read each). */
  private snapshot(
    keys: readonly string[],
    programs: ReadonlySet<number>,
  ): { balances: number[]; tokenBalances: TokenBalanceJson[] } {
    const balances: number[] = [];
    const tokenBalances: TokenBalanceJson[] = [];
    keys.forEach((key, accountIndex) => {
      if (programs.has(accountIndex)) {
        balances.push(this.lamports(key));
        return;
      }
      const found = this.account(key);
      balances.push(found?.lamports ?? 0);
      if (found === undefined || !isTokenAccount(found.owner, found.data)) return;
      const decoded = AccountLayout.decode(found.data.subarray(0, AccountLayout.span));
      const mint = decoded.mint.toBase58();
      tokenBalances.push({
        accountIndex,
        mint,
        owner: decoded.owner.toBase58(),
        programId: found.owner,
        uiTokenAmount: uiTokenAmount(decoded.amount, this.decimalsOf(mint)),
      });
    });
    return { balances, tokenBalances };
  }

  private record(
    tx: VersionedTransaction,
    signature: string,
    err: TransactionErrorJson | null,
    meta: TransactionMetadata,
    pre: { balances: number[]; tokenBalances: TokenBalanceJson[] },
    post: { balances: number[]; tokenBalances: TokenBalanceJson[] },
    keys: string[],
  ): LandedTransaction {
    const message = tx.message;
    const inner = meta
      .innerInstructions()
      .map((list, index) => ({
        index,
        instructions: list.map((entry) => {
          const ix = entry.instruction();
          return {
            programIdIndex: ix.programIdIndex(),
            accounts: [...ix.accounts()],
            data: base58.decode(ix.data()),
            stackHeight: entry.stackHeight(),
          };
        }),
      }))
      .filter((entry) => entry.instructions.length > 0);
    const landed: LandedTransaction = {
      signature,
      slot: this.processedSlot,
      err,
      version: tx.version,
      transaction: {
        signatures: tx.signatures.map((s) => base58.decode(s)),
        message: {
          accountKeys: keys,
          header: message.header,
          recentBlockhash: message.recentBlockhash,
          instructions: message.compiledInstructions.map((ix) => ({
            programIdIndex: ix.programIdIndex,
            accounts: ix.accountKeyIndexes,
            data: base58.decode(ix.data),
            stackHeight: null,
          })),
          ...(tx.version === 0 ? { addressTableLookups: [] } : {}),
        },
      },
      meta: {
        err,
        status: err === null ? { Ok: null } : { Err: err },
        fee: LAMPORTS_PER_SIGNATURE * message.header.numRequiredSignatures,
        preBalances: pre.balances,
        postBalances: post.balances,
        innerInstructions: inner,
        logMessages: meta.logs(),
        preTokenBalances: pre.tokenBalances,
        postTokenBalances: post.tokenBalances,
        rewards: [],
        loadedAddresses: { writable: [], readonly: [] },
        computeUnitsConsumed: Number(meta.computeUnitsConsumed()),
      },
    };
    this.blocks[this.processedSlot]!.transactions.push(landed);
    this.landed.set(signature, landed);
    this.changed();
    return landed;
  }
}

/** The part of litesvm's native binding that reads accounts by raw 32-byte address. */
interface NativeSvm {
  getAccount(
    address: Uint8Array,
  ): { lamports(): bigint; data(): Uint8Array; owner(): Uint8Array; executable(): boolean } | null;
  getBalance(address: Uint8Array): bigint | null;
}

/**
 * litesvm's native binding, when this litesvm build exposes it (1.5.0 does, as `inner`). The
 * public `getAccount`/`getBalance` take base58 strings and convert them with @solana/kit's
 * BigInt-based codec, ~20× slower than the read itself — most of the dev chain's CPU per
 * transaction. The public API remains the fallback.
 */
function nativeSvm(svm: LiteSVM): NativeSvm | undefined {
  const inner = (svm as unknown as { inner?: Partial<NativeSvm> }).inner;
  return typeof inner?.getAccount === "function" && typeof inner.getBalance === "function"
    ? (inner as NativeSvm)
    : undefined;
}

function parseTransaction(wire: Uint8Array): { tx: VersionedTransaction; signature: string } {
  let tx: VersionedTransaction;
  try {
    tx = VersionedTransaction.deserialize(wire);
  } catch (cause) {
    throw new RpcError(RPC_ERROR.invalidParams, `failed to deserialize transaction: ${String(cause)}`);
  }
  if (tx.message.addressTableLookups.length > 0) {
    throw new RpcError(RPC_ERROR.invalidParams, "address lookup tables are not supported by the dev chain");
  }
  const first = tx.signatures[0];
  if (first === undefined) throw new RpcError(RPC_ERROR.invalidParams, "transaction has no signatures");
  return { tx, signature: base58.decode(first) };
}

function isFailure(result: unknown): result is FailedTransactionMetadata {
  return result instanceof FailedTransactionMetadata;
}

function isTokenAccount(owner: string, data: Uint8Array): boolean {
  if (!TOKEN_PROGRAMS.has(owner) || data.length < AccountLayout.span) return false;
  // Token-2022 accounts with extensions carry an account-type byte (2 = Account) after the base layout.
  return data.length === AccountLayout.span || data[AccountLayout.span] === 2;
}

function uiTokenAmount(amount: bigint, decimals: number): UiTokenAmount {
  const digits = amount.toString().padStart(decimals + 1, "0");
  const whole = digits.slice(0, digits.length - decimals);
  const fraction = digits.slice(digits.length - decimals).replace(/0+$/, "");
  const uiAmountString = fraction === "" ? whole : `${whole}.${fraction}`;
  return { amount: amount.toString(), decimals, uiAmount: Number(uiAmountString), uiAmountString };
}

/** Indexed by litesvm's `TransactionErrorFieldless` values (Agave's names). */
const TRANSACTION_ERRORS = [
  "AccountInUse",
  "AccountLoadedTwice",
  "AccountNotFound",
  "ProgramAccountNotFound",
  "InsufficientFundsForFee",
  "InvalidAccountForFee",
  "AlreadyProcessed",
  "BlockhashNotFound",
  "CallChainTooDeep",
  "MissingSignatureForFee",
  "InvalidAccountIndex",
  "SignatureFailure",
  "InvalidProgramForExecution",
  "SanitizeFailure",
  "ClusterMaintenance",
  "AccountBorrowOutstanding",
  "WouldExceedMaxBlockCostLimit",
  "UnsupportedVersion",
  "InvalidWritableAccount",
  "WouldExceedMaxAccountCostLimit",
  "WouldExceedAccountDataBlockLimit",
  "TooManyAccountLocks",
  "AddressLookupTableNotFound",
  "InvalidAddressLookupTableOwner",
  "InvalidAddressLookupTableData",
  "InvalidAddressLookupTableIndex",
  "InvalidRentPayingAccount",
  "WouldExceedMaxVoteCostLimit",
  "WouldExceedAccountDataTotalLimit",
  "MaxLoadedAccountsDataSizeExceeded",
  "ResanitizationNeeded",
  "InvalidLoadedAccountsDataSizeLimit",
  "UnbalancedTransaction",
  "ProgramCacheHitMaxLimit",
  "CommitCancelled",
];

/** Indexed by litesvm's `InstructionErrorFieldless` values (Agave's names). */
const INSTRUCTION_ERRORS = [
  "GenericError",
  "InvalidArgument",
  "InvalidInstructionData",
  "InvalidAccountData",
  "AccountDataTooSmall",
  "InsufficientFunds",
  "IncorrectProgramId",
  "MissingRequiredSignature",
  "AccountAlreadyInitialized",
  "UninitializedAccount",
  "UnbalancedInstruction",
  "ModifiedProgramId",
  "ExternalAccountLamportSpend",
  "ExternalAccountDataModified",
  "ReadonlyLamportChange",
  "ReadonlyDataModified",
  "DuplicateAccountIndex",
  "ExecutableModified",
  "RentEpochModified",
  "NotEnoughAccountKeys",
  "AccountDataSizeChanged",
  "AccountNotExecutable",
  "AccountBorrowFailed",
  "AccountBorrowOutstanding",
  "DuplicateAccountOutOfSync",
  "InvalidError",
  "ExecutableDataModified",
  "ExecutableLamportChange",
  "ExecutableAccountNotRentExempt",
  "UnsupportedProgramId",
  "CallDepth",
  "MissingAccount",
  "ReentrancyNotAllowed",
  "MaxSeedLengthExceeded",
  "InvalidSeeds",
  "InvalidRealloc",
  "ComputationalBudgetExceeded",
  "PrivilegeEscalation",
  "ProgramEnvironmentSetupFailure",
  "ProgramFailedToComplete",
  "ProgramFailedToCompile",
  "Immutable",
  "IncorrectAuthority",
  "AccountNotRentExempt",
  "InvalidAccountOwner",
  "ArithmeticOverflow",
  "UnsupportedSysvar",
  "IllegalOwner",
  "MaxAccountsDataAllocationsExceeded",
  "MaxAccountsExceeded",
  "MaxInstructionTraceLengthExceeded",
  "BuiltinProgramsMustConsumeComputeUnits",
  "BorshIoError",
];

/** litesvm's error objects → the RPC's JSON form (as Agave serialises `TransactionError`). */
export function transactionErrorJson(err: unknown): TransactionErrorJson {
  if (typeof err === "number") return TRANSACTION_ERRORS[err] ?? `TransactionError(${err})`;
  if (typeof err !== "object" || err === null) return String(err);
  const e = err as { index?: number; accountIndex?: number; err?: () => unknown };
  const kind = err.constructor.name;
  if (typeof e.err === "function" && e.index !== undefined) {
    return { InstructionError: [e.index, instructionErrorJson(e.err())] };
  }
  if (e.accountIndex !== undefined) {
    const name = kind.includes("Restricted")
      ? "ProgramExecutionTemporarilyRestricted"
      : "InsufficientFundsForRent";
    return { [name]: { account_index: e.accountIndex } };
  }
  if (e.index !== undefined) return { DuplicateInstruction: e.index };
  return String(err);
}

function instructionErrorJson(err: unknown): unknown {
  if (typeof err === "number") return INSTRUCTION_ERRORS[err] ?? `InstructionError(${err})`;
  const e = err as { code?: number; msg?: string };
  if (e.code !== undefined) return { Custom: e.code };
  if (e.msg !== undefined) return { BorshIoError: e.msg };
  return String(err);
}

/** The `rentEpoch` of a rent-exempt account: u64::MAX, which JSON (like Agave's output) carries as a float. */
export const RENT_EPOCH_EXEMPT = Number(2n ** 64n - 1n);
