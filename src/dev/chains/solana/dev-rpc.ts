/**
 * Solana JSON-RPC over the dev chain's {@link DevSvm}: the subset of methods that
 * @solana/web3.js 1.x's `Connection`, @solana/spl-token and the Solana adapter use, with the
 * result shapes and error codes of the real RPC (Agave). Anything else answers -32601.
 * Transport-free: `dev-chain.ts` puts it on HTTP.
 */

import { getBase58Decoder, getBase58Encoder } from "@solana/kit";
import { PublicKey } from "@solana/web3.js";
import {
  type Commitment,
  type DevBlock,
  type DevSvm,
  LAMPORTS_PER_SIGNATURE,
  type LandedTransaction,
  RENT_EPOCH_EXEMPT,
  RPC_ERROR,
  RpcError,
  type TransactionErrorJson,
} from "./dev-svm.js";

/** What the RPC needs beyond the chain itself. */
export interface DevRpcDeps {
  readonly chain: DevSvm;
  /** Sends `lamports` from the dev faucet to `to`; returns the signature (`requestAirdrop`). */
  readonly airdrop: (to: string, lamports: bigint) => string;
  /** Reported by `getVersion`. */
  readonly version: string;
}

type Handler = (params: readonly unknown[], deps: DevRpcDeps) => unknown;

const base58 = getBase58Decoder();
const fromBase58 = getBase58Encoder();
/** Agave answers at most this many signatures per getSignatureStatuses. */
const MAX_SIGNATURE_STATUSES = 256;
/** Agave's cap on a getBlocks range. */
const MAX_BLOCKS_RANGE = 500_000;

/** Runs one JSON-RPC method; throws {@link RpcError} with the RPC's code on failure. */
export function callDevRpc(method: string, params: unknown, deps: DevRpcDeps): unknown {
  const handler = Object.hasOwn(HANDLERS, method) ? HANDLERS[method] : undefined;
  if (handler === undefined) throw new RpcError(RPC_ERROR.methodNotFound, `Method not found: ${method}`);
  if (params !== undefined && params !== null && !Array.isArray(params)) {
    throw new RpcError(RPC_ERROR.invalidParams, "params must be an array");
  }
  return handler((params as unknown[] | undefined) ?? [], deps);
}

const HANDLERS: Record<string, Handler> = {
  getHealth: () => "ok",
  getVersion: (_p, { version }) => ({ "solana-core": version, "feature-set": 0 }),
  getGenesisHash: (_p, { chain }) => chain.block(0)!.blockhash,
  getFirstAvailableBlock: () => 0,
  getSlot: (p, { chain }) => chain.slotAt(commitmentOf(p[0])),
  getBlockHeight: (p, { chain }) => chain.slotAt(commitmentOf(p[0])),
  getEpochInfo: (p, { chain }) => {
    const slot = chain.slotAt(commitmentOf(p[0]));
    return {
      epoch: 0,
      slotIndex: slot,
      slotsInEpoch: 432_000,
      absoluteSlot: slot,
      blockHeight: slot,
      transactionCount: chain.transactionCount,
    };
  },
  getLatestBlockhash: (p, { chain }) => {
    const latest = chain.latestBlockhash(commitmentOf(p[0]));
    return withContext(chain, {
      blockhash: latest.blockhash,
      lastValidBlockHeight: latest.lastValidBlockHeight,
    });
  },
  isBlockhashValid: (p, { chain }) =>
    withContext(chain, chain.isBlockhashValid(stringParam(p[0], "blockhash"), commitmentOf(p[1]))),
  getMinimumBalanceForRentExemption: (p, { chain }) =>
    chain.rentExemptMinimum(integerParam(p[0], "data length")),
  getFeeForMessage: (p, { chain }) => {
    const bytes = Buffer.from(stringParam(p[0], "message"), "base64");
    // The first byte of a legacy message, or the one after the version prefix, counts the signers.
    const signers = (bytes[0] ?? 0) & 0x80 ? (bytes[1] ?? 0) : (bytes[0] ?? 0);
    return withContext(chain, signers * LAMPORTS_PER_SIGNATURE);
  },
  getBalance: (p, { chain }) => withContext(chain, chain.lamports(pubkeyParam(p[0]))),
  getAccountInfo: (p, { chain }) => withContext(chain, accountJson(chain, pubkeyParam(p[0]), p[1])),
  getMultipleAccounts: (p, { chain }) => {
    if (!Array.isArray(p[0]) || p[0].length > 100) {
      throw new RpcError(RPC_ERROR.invalidParams, "Invalid params: expected an array of at most 100 pubkeys");
    }
    return withContext(
      chain,
      p[0].map((key) => accountJson(chain, pubkeyParam(key), p[1])),
    );
  },
  getTokenAccountBalance: (p, { chain }) => {
    const amount = chain.tokenAmount(pubkeyParam(p[0]));
    if (amount === undefined) {
      throw new RpcError(RPC_ERROR.invalidParams, "Invalid param: not a Token account");
    }
    return withContext(chain, amount);
  },
  requestAirdrop: (p, deps) => {
    const lamports = integerParam(p[1], "lamports");
    return deps.airdrop(pubkeyParam(p[0]), BigInt(lamports));
  },
  sendTransaction: (p, { chain }) => {
    const config = configParam(p[1]);
    const wire = decodeWire(stringParam(p[0], "transaction"), config.encoding);
    if (config.skipPreflight !== true) {
      const failure = chain.simulate(wire);
      if (failure !== undefined) {
        throw new RpcError(
          RPC_ERROR.preflightFailure,
          `Transaction simulation failed: ${describe(failure.err)}`,
          {
            err: failure.err,
            logs: failure.logs,
            accounts: null,
            unitsConsumed: 0,
            returnData: null,
          },
        );
      }
    }
    const outcome = chain.submit(wire);
    // Like a real RPC node, a duplicate or an expired transaction is accepted and never lands.
    return outcome.kind === "landed" ? outcome.tx.signature : outcome.signature;
  },
  simulateTransaction: (p, { chain }) => {
    const config = configParam(p[1]);
    const wire = decodeWire(stringParam(p[0], "transaction"), config.encoding);
    // As on a real node: without sigVerify (its default) a transaction still missing a
    // signature (a fee payer's, say) is simulated as if signed.
    const failure = chain.simulate(wire, { sigVerify: config.sigVerify === true });
    return withContext(chain, {
      err: failure?.err ?? null,
      logs: failure?.logs ?? [],
      accounts: null,
      unitsConsumed: 0,
      returnData: null,
    });
  },
  getSignatureStatuses: (p, { chain }) => {
    if (!Array.isArray(p[0]) || p[0].length > MAX_SIGNATURE_STATUSES) {
      throw new RpcError(
        RPC_ERROR.invalidParams,
        `Invalid params: expected an array of at most ${MAX_SIGNATURE_STATUSES} signatures`,
      );
    }
    // Every landed transaction is kept, so history is always searched.
    return withContext(
      chain,
      p[0].map((sig) => {
        const tx = chain.transaction(stringParam(sig, "signature"));
        return tx === undefined ? null : signatureStatus(chain, tx);
      }),
    );
  },
  getBlocks: (p, { chain }) => {
    const start = integerParam(p[0], "start slot");
    const hasEnd = typeof p[1] === "number";
    const commitment = atLeastConfirmed(hasEnd ? p[2] : p[1]);
    const head = chain.slotAt(commitment);
    const end = Math.min(hasEnd ? integerParam(p[1], "end slot") : head, head);
    if (end - start > MAX_BLOCKS_RANGE) {
      throw new RpcError(RPC_ERROR.invalidParams, `Slot range too large; max ${MAX_BLOCKS_RANGE}`);
    }
    const slots: number[] = [];
    for (let slot = start; slot <= end; slot++) slots.push(slot);
    return slots;
  },
  getBlock: (p, { chain }) => {
    const slot = integerParam(p[0], "slot");
    const config = configParam(p[1]);
    const block = chain.block(slot);
    if (block === undefined || slot > chain.slotAt(atLeastConfirmed(p[1]))) {
      throw new RpcError(RPC_ERROR.blockNotAvailable, `Block not available for slot ${slot}`);
    }
    return blockJson(chain, block, config);
  },
  getBlockTime: (p, { chain }) => {
    const slot = integerParam(p[0], "slot");
    const block = chain.block(slot);
    if (block === undefined || slot > chain.slotAt("confirmed")) {
      throw new RpcError(RPC_ERROR.blockNotAvailable, `Block not available for slot ${slot}`);
    }
    return block.blockTime;
  },
  getTransaction: (p, { chain }) => {
    const config = configParam(p[1]);
    const tx = chain.transaction(stringParam(p[0], "signature"));
    if (tx === undefined || tx.slot > chain.slotAt(atLeastConfirmed(p[1]))) return null;
    checkVersion(tx, config.maxSupportedTransactionVersion);
    return {
      slot: tx.slot,
      blockTime: chain.block(tx.slot)!.blockTime,
      ...transactionJson(tx, config),
    };
  },
};

interface RpcConfig {
  readonly commitment?: unknown;
  readonly encoding?: unknown;
  readonly skipPreflight?: unknown;
  readonly transactionDetails?: unknown;
  readonly rewards?: unknown;
  readonly maxSupportedTransactionVersion?: unknown;
  readonly dataSlice?: unknown;
  readonly sigVerify?: unknown;
}

function configParam(value: unknown): RpcConfig {
  if (value === undefined || value === null) return {};
  if (typeof value !== "object" || Array.isArray(value)) {
    throw new RpcError(RPC_ERROR.invalidParams, "Invalid params: configuration must be an object");
  }
  return value as RpcConfig;
}

/** The commitment a request asks for; Solana RPC defaults to `finalized`. */
function commitmentOf(configValue: unknown): Commitment {
  const commitment = configParam(configValue).commitment ?? "finalized";
  if (commitment === "processed" || commitment === "confirmed" || commitment === "finalized")
    return commitment;
  throw new RpcError(
    RPC_ERROR.invalidParams,
    `Invalid params: unknown commitment ${JSON.stringify(commitment)}`,
  );
}

function atLeastConfirmed(configValue: unknown): Commitment {
  const commitment = commitmentOf(configValue);
  if (commitment === "processed") {
    throw new RpcError(RPC_ERROR.invalidParams, "Method does not support commitment below `confirmed`");
  }
  return commitment;
}

function withContext(chain: DevSvm, value: unknown): unknown {
  return { context: { apiVersion: "2.2.0", slot: chain.processedSlot }, value };
}

function stringParam(value: unknown, what: string): string {
  if (typeof value !== "string")
    throw new RpcError(RPC_ERROR.invalidParams, `Invalid params: ${what} must be a string`);
  return value;
}

function integerParam(value: unknown, what: string): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
    throw new RpcError(RPC_ERROR.invalidParams, `Invalid params: ${what} must be a non-negative integer`);
  }
  return value;
}

function pubkeyParam(value: unknown): string {
  const text = stringParam(value, "pubkey");
  try {
    return new PublicKey(text).toBase58();
  } catch {
    throw new RpcError(RPC_ERROR.invalidParams, "Invalid param: Invalid");
  }
}

function decodeWire(encoded: string, encoding: unknown): Uint8Array {
  if (encoding === undefined || encoding === "base58") return fromBase58.encode(encoded) as Uint8Array;
  if (encoding === "base64") return Buffer.from(encoded, "base64");
  throw new RpcError(
    RPC_ERROR.invalidParams,
    `Invalid params: unsupported encoding ${JSON.stringify(encoding)}`,
  );
}

function describe(err: TransactionErrorJson): string {
  if (err === "AlreadyProcessed") return "This transaction has already been processed";
  if (err === "BlockhashNotFound") return "Blockhash not found";
  return typeof err === "string" ? err : JSON.stringify(err);
}

function accountJson(chain: DevSvm, key: string, configValue: unknown): unknown {
  const account = chain.account(key);
  if (account === undefined) return null;
  const config = configParam(configValue);
  let data = account.data;
  const slice = config.dataSlice as { offset?: unknown; length?: unknown } | undefined;
  if (slice !== undefined) {
    const offset = integerParam(slice.offset, "dataSlice.offset");
    data = data.subarray(offset, offset + integerParam(slice.length, "dataSlice.length"));
  }
  // Parsed encodings fall back to base64, as Agave does for data it cannot parse.
  const encoded =
    config.encoding === "base58" || config.encoding === "binary"
      ? [base58.decode(data), "base58"]
      : [Buffer.from(data).toString("base64"), "base64"];
  return {
    data: encoded,
    executable: account.executable,
    lamports: account.lamports,
    owner: account.owner,
    rentEpoch: RENT_EPOCH_EXEMPT,
    space: account.space,
  };
}

function signatureStatus(chain: DevSvm, tx: LandedTransaction): unknown {
  const confirmationStatus: Commitment =
    tx.slot <= chain.slotAt("finalized")
      ? "finalized"
      : tx.slot <= chain.slotAt("confirmed")
        ? "confirmed"
        : "processed";
  return {
    slot: tx.slot,
    confirmations: confirmationStatus === "finalized" ? null : chain.processedSlot - tx.slot,
    err: tx.err,
    status: tx.err === null ? { Ok: null } : { Err: tx.err },
    confirmationStatus,
  };
}

function checkVersion(tx: LandedTransaction, maxSupported: unknown): void {
  if (tx.version !== "legacy" && (typeof maxSupported !== "number" || maxSupported < tx.version)) {
    throw new RpcError(
      -32015,
      `Transaction version (${tx.version}) is not supported by the requesting client. Please try the request again with the following configuration parameter: "maxSupportedTransactionVersion": ${tx.version}`,
    );
  }
}

function transactionJson(tx: LandedTransaction, config: RpcConfig): Record<string, unknown> {
  const encoding = config.encoding ?? "json";
  if (encoding !== "json") {
    throw new RpcError(RPC_ERROR.invalidParams, `Invalid params: the dev chain serves encoding "json" only`);
  }
  return {
    transaction: tx.transaction,
    meta: tx.meta,
    ...(config.maxSupportedTransactionVersion !== undefined ? { version: tx.version } : {}),
  };
}

function blockJson(chain: DevSvm, block: DevBlock, config: RpcConfig): unknown {
  const details = config.transactionDetails ?? "full";
  const header = {
    blockhash: block.blockhash,
    previousBlockhash:
      block.slot === 0 ? "11111111111111111111111111111111" : chain.block(block.slot - 1)!.blockhash,
    parentSlot: Math.max(0, block.slot - 1),
    blockTime: block.blockTime,
    blockHeight: block.slot,
    ...(config.rewards === false ? {} : { rewards: [] }),
  };
  switch (details) {
    case "none":
      return header;
    case "signatures":
      return { ...header, signatures: block.transactions.map((tx) => tx.signature) };
    case "full":
      for (const tx of block.transactions) checkVersion(tx, config.maxSupportedTransactionVersion);
      return { ...header, transactions: block.transactions.map((tx) => transactionJson(tx, config)) };
    default:
      throw new RpcError(
        RPC_ERROR.invalidParams,
        `Invalid params: transactionDetails ${JSON.stringify(details)} is not served by the dev chain`,
      );
  }
}
