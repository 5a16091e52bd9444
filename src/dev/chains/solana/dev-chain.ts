/**
 * The Solana dev chain: litesvm behind a local Solana JSON-RPC endpoint, so the gateway's real
 * @solana/web3.js `Connection` runs against it exactly as against a cluster, on one machine with
 * no internet. It holds one test SPL mint whose address never changes (its keypair comes from a
 * fixed seed) and a faucet that mints to an owner's associated token account and airdrops SOL.
 *
 * Scope (see docs/chains.md, The Solana family): HTTP JSON-RPC with the methods in `dev-rpc.ts`, and
 * websocket `signatureSubscribe`/`slotSubscribe` on the same port (`dev-ws.ts`); legacy and v0 transactions without
 * address lookup tables; `json` encoding for blocks and transactions; account reads answer the
 * newest state whatever commitment is asked. Slots, commitments and blockhash expiry: `dev-svm.ts`.
 * State lives in memory, and in a JSON file across restarts when `statePath` is given.
 */
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { dirname } from "node:path";
import {
  createAssociatedTokenAccountIdempotentInstruction,
  createInitializeMint2Instruction,
  createMintToCheckedInstruction,
  getAssociatedTokenAddressSync,
  MINT_SIZE,
  MintLayout,
  TOKEN_PROGRAM_ID,
} from "@solana/spl-token";
import { Keypair, PublicKey, SystemProgram, Transaction, type TransactionInstruction } from "@solana/web3.js";
import { signAndSerialize } from "../../../chains/solana/fast-sign.js";
import { memoInstruction } from "../../../chains/solana/memo.js";
import { callDevRpc, type DevRpcDeps } from "./dev-rpc.js";
import {
  type Commitment,
  DevSvm,
  type DevSvmOptions,
  type DevSvmState,
  RPC_ERROR,
  RpcError,
} from "./dev-svm.js";
import { attachDevWebsocket } from "./dev-ws.js";

/** How to run the Solana dev chain. Slot timing options: {@link DevSvmOptions}. */
export interface SolanaDevChainOptions extends DevSvmOptions {
  /** Default 127.0.0.1. */
  readonly host?: string;
  /** Default 0 (a free port). */
  readonly port?: number;
  /** Decimals of the test mint. Default 6, as USDC. */
  readonly decimals?: number;
  /**
   * A JSON file that keeps the chain across restarts (written within a second of each
   * transaction, every 5 s, and at close; read at start). In memory only when absent.
   */
  readonly statePath?: string;
  /**
   * Tops up a transaction's fee payer from the faucet (10 SOL, a visible transfer landing just
   * before it) when it holds less than 0.1 SOL, so a dev gateway's treasury never runs dry.
   * Default true; tests that need an unfunded fee payer turn it off.
   */
  readonly sponsorFeePayers?: boolean;
}

/** A running Solana dev chain. */
export interface SolanaDevChain {
  /** The JSON-RPC endpoint (`http://host:port`). */
  readonly rpcUrl: string;
  /**
   * Its websocket endpoint (`ws://host:port`, the same port): pass it as `wsEndpoint` to a
   * `Connection` that confirms transactions by subscription (web3.js would guess port + 1).
   */
  readonly wsUrl: string;
  /** The test SPL mint (the same address on every start). */
  readonly mint: string;
  /** The mint's decimals. */
  readonly decimals: number;
  /** The faucet: mint authority, and payer of the faucet's fees and airdrops. */
  readonly faucet: string;
  /** Mints `amount` (onchain units) to `owner`'s associated token account, creating it; returns the signature. */
  mintTo(owner: string, amount: bigint): Promise<string>;
  /** Opens `owner`'s associated token account for the test mint (the faucet pays its rent). */
  openTokenAccount(owner: string): Promise<string>;
  /** Sends `lamports` of SOL from the faucet to `address` (e.g. to fund a treasury's fees). */
  airdrop(address: string, lamports: bigint): Promise<string>;
  /** Closes the open slot `count` times (tests; the timer does it every `slotMs`). Returns the open slot. */
  advanceSlots(count: number): number;
  /** The newest slot at `commitment`. */
  slot(commitment: Commitment): number;
  /** Stops the server and the slot timer. */
  close(): Promise<void>;
}

/** Fixed seeds: the same mint and faucet addresses on every start, so a registry can name them. */
const MINT_SEED = "tollgate/solana/dev-chain/mint";
const FAUCET_SEED = "tollgate/solana/dev-chain/faucet";
/** One million SOL for the faucet: fees and airdrops for any dev session. */
const FAUCET_LAMPORTS = 1_000_000n * 1_000_000_000n;
/** Fee payers below 0.1 SOL get 10 SOL from the faucet (see `sponsorFeePayers`). */
const SPONSOR_FLOOR = 100_000_000;
const SPONSOR_TOP_UP = 10_000_000_000n;
const SAVE_INTERVAL_MS = 5_000;
const MAX_BODY_BYTES = 5 * 1024 * 1024;
const U64_MAX = (1n << 64n) - 1n;

/** The dev chain's fixed test mint address (what `startSolanaDevChain` will use). */
export function solanaDevMintAddress(): string {
  return keypairFromLabel(MINT_SEED).publicKey.toBase58();
}

/** Starts a Solana dev chain listening on `host:port` (default 127.0.0.1, a free port). */
export async function startSolanaDevChain(options: SolanaDevChainOptions = {}): Promise<SolanaDevChain> {
  const decimals = options.decimals ?? 6;
  if (!Number.isInteger(decimals) || decimals < 0 || decimals > 9) {
    throw new Error("decimals must be an integer in 0..9 (an SPL mint's u8 decimals, as a stablecoin uses)");
  }
  const saved = options.statePath === undefined ? undefined : readState(options.statePath);
  const chain = new DevSvm(options, saved);
  const mintKey = keypairFromLabel(MINT_SEED);
  const faucet = keypairFromLabel(FAUCET_SEED);
  const mint = mintKey.publicKey;
  let faucetNonce = chain.transactionCount;
  const ataCache = new Map<string, PublicKey>();

  const send = (instructions: TransactionInstruction[], signers: Keypair[]): string => {
    const tx = new Transaction({
      feePayer: faucet.publicKey,
      ...chain.latestBlockhash("processed"),
    });
    // A memo makes every faucet transaction unique, so equal requests in one slot both land.
    tx.add(...instructions, memoInstruction(`tollgate dev faucet #${++faucetNonce}`));
    const outcome = chain.submit(signAndSerialize(tx, [faucet, ...signers]).wire);
    if (outcome.kind !== "landed") throw new Error(`dev chain: faucet transaction ${outcome.kind}`);
    if (outcome.tx.err !== null) {
      throw new Error(`dev chain: faucet transaction failed: ${JSON.stringify(outcome.tx.err)}`);
    }
    return outcome.tx.signature;
  };

  if (saved === undefined) {
    chain.fundFromGenesis(faucet.publicKey.toBase58(), FAUCET_LAMPORTS);
    send(
      [
        SystemProgram.createAccount({
          fromPubkey: faucet.publicKey,
          newAccountPubkey: mint,
          lamports: chain.rentExemptMinimum(MINT_SIZE),
          space: MINT_SIZE,
          programId: TOKEN_PROGRAM_ID,
        }),
        createInitializeMint2Instruction(mint, decimals, faucet.publicKey, null),
      ],
      [mintKey],
    );
  } else {
    const account = chain.account(mint.toBase58());
    const savedDecimals = account === undefined ? undefined : MintLayout.decode(account.data).decimals;
    if (savedDecimals !== decimals) {
      chain.stop();
      throw new Error(
        `dev chain state ${options.statePath}: its mint has ${savedDecimals ?? "no"} decimals, not ${decimals}; remove the file to start afresh`,
      );
    }
    // Saved while running (not at a clean shutdown): slots went on after the last save, and a
    // gateway may have seen them; resume past them so slots never repeat.
    if (!saved.clean && chain.slotMs > 0)
      chain.advanceSlots(Math.ceil((2 * SAVE_INTERVAL_MS) / chain.slotMs));
  }
  const saver = options.statePath === undefined ? undefined : startSaver(chain, options.statePath);

  const mintTo = (owner: string, amount: bigint): string => {
    const ownerKey = parsePublicKey(owner, "owner");
    if (amount <= 0n || amount > U64_MAX) throw new Error("amount must be in 1..2^64-1 onchain units");
    let ata = ataCache.get(owner);
    if (ata === undefined) {
      ata = getAssociatedTokenAddressSync(mint, ownerKey, true);
      ataCache.set(owner, ata);
    }
    return send(
      [
        createAssociatedTokenAccountIdempotentInstruction(faucet.publicKey, ata, ownerKey, mint),
        createMintToCheckedInstruction(mint, ata, faucet.publicKey, amount, decimals),
      ],
      [],
    );
  };
  const openTokenAccount = (owner: string): string => {
    const ownerKey = parsePublicKey(owner, "owner");
    const ata = getAssociatedTokenAddressSync(mint, ownerKey, true);
    return send(
      [createAssociatedTokenAccountIdempotentInstruction(faucet.publicKey, ata, ownerKey, mint)],
      [],
    );
  };
  const airdrop = (to: string, lamports: bigint): string => {
    const toKey = parsePublicKey(to, "address");
    if (lamports <= 0n || lamports > FAUCET_LAMPORTS / 10n) {
      throw new Error(`lamports must be in 1..${FAUCET_LAMPORTS / 10n}`);
    }
    return send([SystemProgram.transfer({ fromPubkey: faucet.publicKey, toPubkey: toKey, lamports })], []);
  };

  if (options.sponsorFeePayers ?? true) {
    const faucetAddress = faucet.publicKey.toBase58();
    chain.feePayerHook = (feePayer) => {
      if (feePayer !== faucetAddress && chain.lamports(feePayer) < SPONSOR_FLOOR)
        airdrop(feePayer, SPONSOR_TOP_UP);
    };
  }

  const deps: DevRpcDeps = {
    chain,
    version: "tollgate-dev-chain (litesvm 1.5)",
    airdrop: (to, lamports) => {
      try {
        return airdrop(to, lamports);
      } catch (cause) {
        throw new RpcError(RPC_ERROR.invalidParams, `airdrop failed: ${(cause as Error).message}`);
      }
    },
  };
  const server = createServer((req, res) => {
    handleHttp(req, res, deps).catch((cause: unknown) => {
      if (!res.headersSent) res.writeHead(500, { "content-type": "text/plain" });
      res.end(String(cause));
    });
  });
  const websocket = attachDevWebsocket(server, chain);
  const host = options.host ?? "127.0.0.1";
  try {
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(options.port ?? 0, host, () => {
        server.off("error", reject);
        resolve();
      });
    });
  } catch (cause) {
    chain.stop();
    saver?.stop();
    websocket.close();
    throw cause;
  }
  const { port } = server.address() as AddressInfo;
  const urlHost = host.includes(":") ? `[${host}]` : host;

  return {
    rpcUrl: `http://${urlHost}:${port}`,
    wsUrl: `ws://${urlHost}:${port}`,
    mint: mint.toBase58(),
    decimals,
    faucet: faucet.publicKey.toBase58(),
    mintTo: async (owner, amount) => mintTo(owner, amount),
    openTokenAccount: async (owner) => openTokenAccount(owner),
    airdrop: async (to, lamports) => airdrop(to, lamports),
    advanceSlots: (count) => chain.advanceSlots(count),
    slot: (commitment) => chain.slotAt(commitment),
    close: async () => {
      chain.stop();
      saver?.stop();
      websocket.close();
      if (options.statePath !== undefined) writeState(options.statePath, chain.toState(true));
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}

/** Reads a saved state, or undefined when there is none yet. */
function readState(path: string): DevSvmState | undefined {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (cause) {
    if ((cause as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw cause;
  }
  try {
    return JSON.parse(text) as DevSvmState;
  } catch {
    throw new Error(`dev chain state ${path} is not JSON; remove it to start afresh`);
  }
}

/** Writes atomically (a crash mid-write leaves the previous state). */
function writeState(path: string, state: DevSvmState): void {
  mkdirSync(dirname(path), { recursive: true });
  const temporary = `${path}.${process.pid}.tmp`;
  writeFileSync(temporary, JSON.stringify(state));
  renameSync(temporary, path);
}

/**
 * Saves the chain while it runs: within a second of a transaction landing, and every
 * {@link SAVE_INTERVAL_MS} while slots advance, so a killed process loses at most the last
 * second's transactions (none of them final yet) and resumes past every slot it reported.
 */
function startSaver(chain: DevSvm, path: string): { stop(): void } {
  let savedAt = chain.changeCount;
  let landedTimer: NodeJS.Timeout | undefined;
  const save = () => {
    landedTimer = undefined;
    if (chain.changeCount === savedAt) return;
    savedAt = chain.changeCount;
    writeState(path, chain.toState(false));
  };
  const periodic = setInterval(save, SAVE_INTERVAL_MS).unref();
  let transactions = chain.transactionCount;
  const stopListening = chain.onChange(() => {
    if (chain.transactionCount === transactions || landedTimer !== undefined) return;
    transactions = chain.transactionCount;
    landedTimer = setTimeout(save, 1_000).unref();
  });
  return {
    stop: () => {
      stopListening();
      clearInterval(periodic);
      if (landedTimer !== undefined) clearTimeout(landedTimer);
    },
  };
}

function keypairFromLabel(label: string): Keypair {
  return Keypair.fromSeed(createHash("sha256").update(label).digest());
}

function parsePublicKey(value: string, what: string): PublicKey {
  try {
    return new PublicKey(value);
  } catch {
    throw new Error(`${what} ${JSON.stringify(value)} is not a base58 Solana address`);
  }
}

async function handleHttp(req: IncomingMessage, res: ServerResponse, deps: DevRpcDeps): Promise<void> {
  if (req.method === "GET" && req.url === "/health") {
    res.writeHead(200, { "content-type": "text/plain" }).end("ok");
    return;
  }
  if (req.method !== "POST") {
    res.writeHead(405, { allow: "POST", "content-type": "text/plain" }).end("use POST for JSON-RPC");
    return;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) {
      res.writeHead(413, { "content-type": "text/plain" }).end("request body too large");
      req.destroy();
      return;
    }
    chunks.push(chunk as Buffer);
  }
  let body: unknown;
  try {
    body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  } catch {
    sendJson(res, rpcError(null, new RpcError(RPC_ERROR.parse, "Parse error")));
    return;
  }
  if (Array.isArray(body)) {
    if (body.length === 0) {
      sendJson(res, rpcError(null, new RpcError(RPC_ERROR.invalidRequest, "Invalid request: empty batch")));
      return;
    }
    sendJson(
      res,
      body.map((request) => answer(request, deps)),
    );
    return;
  }
  sendJson(res, answer(body, deps));
}

function answer(request: unknown, deps: DevRpcDeps): unknown {
  if (typeof request !== "object" || request === null) {
    return rpcError(null, new RpcError(RPC_ERROR.invalidRequest, "Invalid request"));
  }
  const { id = null, method, params } = request as { id?: unknown; method?: unknown; params?: unknown };
  if (typeof method !== "string")
    return rpcError(id, new RpcError(RPC_ERROR.invalidRequest, "Invalid request"));
  try {
    return { jsonrpc: "2.0", id, result: callDevRpc(method, params, deps) };
  } catch (cause) {
    if (cause instanceof RpcError) return rpcError(id, cause);
    return rpcError(id, new RpcError(-32603, `Internal error: ${(cause as Error).message ?? String(cause)}`));
  }
}

function rpcError(id: unknown, error: RpcError): unknown {
  return {
    jsonrpc: "2.0",
    id,
    error: {
      code: error.code,
      message: error.message,
      ...(error.data !== undefined ? { data: error.data } : {}),
    },
  };
}

function sendJson(res: ServerResponse, value: unknown): void {
  const text = JSON.stringify(value);
  res
    .writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text) })
    .end(text);
}
