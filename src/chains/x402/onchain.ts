import {
  getBase58Decoder,
  getBase64Encoder,
  getCompiledTransactionMessageDecoder,
  getTransactionDecoder,
  type KeyPairSigner,
} from "@solana/kit";
import { Connection } from "@solana/web3.js";
import { PERMIT2_ADDRESS } from "@x402/evm";
import {
  type Address,
  type Block,
  createPublicClient,
  getAddress,
  type Hash,
  type Hex,
  http,
  type Log,
  numberToHex,
  type PublicClient,
  parseAbiItem,
} from "viem";
import type { ChainConfig } from "../../core/billing/chain-registry.js";
import type { X402Offer, X402Onchain, X402OnchainState, X402PaymentPayload } from "../../core/ports/x402.js";
import { eip3009Abi } from "../evm/evm-adapter.js";

/**
 * Whether an x402 payment was collected, read from the chain itself: what the recovery pass
 * asks before it closes a payment whose collection was begun but never recorded
 * (docs/x402.md, "After a crash"). Nothing here writes or sends.
 *
 * - EVM `exact` over EIP-3009: the token's `authorizationState(from, nonce)`; a used one's
 *   `AuthorizationUsed(from, nonce)` log names the collecting transaction, whose `Transfer`s from
 *   the payer to `payTo` say what it moved. A cancelled one (`AuthorizationCanceled`) was not
 *   collected.
 * - EVM over Permit2 (`upto`, and `exact` over Permit2): Permit2's `nonceBitmap(owner, word)`;
 *   Permit2 logs no nonce, so a spent one's transaction is the `Transfer` from the payer to
 *   `payTo` whose transaction carries the payment's own signature (only the facilitator the
 *   witness names may settle it). A nonce the payer invalidated (`UnorderedNonceInvalidation`)
 *   was not collected.
 * - Solana `exact`: the transaction's id is its fee payer's signature, and the facilitator's
 *   fee-payer signature over the payer's message is deterministic (Ed25519; `@x402/svm`'s
 *   facilitator signs the message as the client built it, changing nothing), so it is signed
 *   again here with the facilitator's key and looked up with `getSignatureStatuses`. Not found
 *   and its blockhash expired: it can never land. Only with the local facilitator's key: a
 *   remote facilitator's signature cannot be computed, and such a payment is `unknown`.
 *
 * The search for a transaction is bounded by the payment's own validity: from the block at the
 * time the gateway took it (less a minute for clocks) to the block its authorisation expired in.
 */

/** What the lookups run on: the chains, and the local facilitator's Solana key when there is one. */
export interface X402OnchainOptions {
  readonly chains: readonly ChainConfig[];
  /** The local facilitator's Solana fee payer; undefined with a remote facilitator. */
  readonly svmFeePayer?: KeyPairSigner | undefined;
}

const RPC_TIMEOUT_MS = 10_000;
/** A log query spans at most this many blocks (public RPCs refuse wider ranges). */
const LOG_RANGE = 1_000n;
/** Clocks disagree: a collection is looked for from this long before the payment was taken. */
const CLOCK_SLACK_S = 60n;

const AUTHORIZATION_USED = parseAbiItem(
  "event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)",
);
const AUTHORIZATION_CANCELED = parseAbiItem(
  "event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce)",
);
const TRANSFER = parseAbiItem("event Transfer(address indexed from, address indexed to, uint256 value)");
const NONCE_INVALIDATION = parseAbiItem(
  "event UnorderedNonceInvalidation(address indexed owner, uint256 word, uint256 mask)",
);
const NONCE_BITMAP = [
  {
    type: "function",
    name: "nonceBitmap",
    stateMutability: "view",
    inputs: [
      { name: "owner", type: "address" },
      { name: "wordPos", type: "uint256" },
    ],
    outputs: [{ name: "", type: "uint256" }],
  },
] as const;

/** The x402 onchain lookups over `options.chains` (by CAIP-2 network). */
export function createX402Onchain(options: X402OnchainOptions): X402Onchain {
  const byNetwork = new Map(options.chains.map((chain) => [chain.network, chain]));
  const evm = new Map<string, PublicClient>();
  return {
    async collection(payment, offer, since) {
      const chain = byNetwork.get(offer.network);
      if (chain === undefined) return { kind: "unknown", reason: `no chain for network ${offer.network}` };
      if (chain.family === "solana") return await svmCollection(chain, options.svmFeePayer, payment, offer);
      let client = evm.get(chain.id);
      if (client === undefined) {
        client = createPublicClient({
          transport: http(chain.rpcUrl, { timeout: RPC_TIMEOUT_MS, retryCount: 1 }),
        });
        evm.set(chain.id, client);
      }
      return await evmCollection(client, payment, offer, since);
    },
  };
}

/** The signed fields the lookups read (the identity already refused any other shape). */
interface Eip3009Fields {
  readonly authorization: {
    readonly from: string;
    readonly to: string;
    readonly value: string;
    readonly validBefore: string;
    readonly nonce: string;
  };
}
interface Permit2Fields {
  readonly signature: string;
  readonly permit2Authorization: {
    readonly from: string;
    readonly nonce: string;
    readonly deadline: string;
    readonly permitted: { readonly token: string };
    readonly witness: { readonly to: string };
  };
}

async function evmCollection(
  client: PublicClient,
  payment: X402PaymentPayload,
  offer: X402Offer,
  since: number,
): Promise<X402OnchainState> {
  const fields = payment.payload;
  const latest = await client.getBlock({ blockTag: "latest" });
  const from = BigInt(Math.floor(since / 1000)) - CLOCK_SLACK_S;
  if ("permit2Authorization" in fields) {
    return await permit2Collection(client, fields as unknown as Permit2Fields, from, latest);
  }
  if ("authorization" in fields) {
    return await eip3009Collection(client, fields as unknown as Eip3009Fields, offer, from, latest);
  }
  return { kind: "unknown", reason: "the payment carries no EVM authorisation" };
}

async function eip3009Collection(
  client: PublicClient,
  { authorization }: Eip3009Fields,
  offer: X402Offer,
  from: bigint,
  latest: Block,
): Promise<X402OnchainState> {
  const token = getAddress(offer.asset);
  const payer = getAddress(authorization.from);
  const nonce = numberToHex(BigInt(authorization.nonce), { size: 32 });
  const validBefore = BigInt(authorization.validBefore);
  const spent = await client.readContract({
    address: token,
    abi: eip3009Abi,
    functionName: "authorizationState",
    args: [payer, nonce],
  });
  if (!spent) {
    // transferWithAuthorization needs block.timestamp < validBefore.
    return latest.timestamp >= validBefore
      ? { kind: "unused", reason: "its authorisation expired unused" }
      : { kind: "usable" };
  }
  const range = await blockRange(client, from, validBefore, latest);
  const args = { authorizer: payer, nonce };
  const [used] = await logsIn(range, (fromBlock, toBlock) =>
    client.getLogs({ address: token, event: AUTHORIZATION_USED, args, fromBlock, toBlock }),
  );
  if (used?.transactionHash != null) {
    const collected = await transferredIn(client, used.transactionHash, token, payer, offer.payTo);
    return collected > 0n
      ? { kind: "used", transaction: used.transactionHash, collected }
      : {
          kind: "unknown",
          reason: `its authorisation was used by ${used.transactionHash}, paying another address`,
        };
  }
  const [cancelled] = await logsIn(range, (fromBlock, toBlock) =>
    client.getLogs({ address: token, event: AUTHORIZATION_CANCELED, args, fromBlock, toBlock }),
  );
  if (cancelled !== undefined) return { kind: "unused", reason: "its payer cancelled the authorisation" };
  return { kind: "unknown", reason: "its authorisation is spent, but no AuthorizationUsed log was found" };
}

async function permit2Collection(
  client: PublicClient,
  { signature, permit2Authorization: auth }: Permit2Fields,
  from: bigint,
  latest: Block,
): Promise<X402OnchainState> {
  const owner = getAddress(auth.from);
  const token = getAddress(auth.permitted.token);
  const payTo = getAddress(auth.witness.to);
  const nonce = BigInt(auth.nonce);
  const deadline = BigInt(auth.deadline);
  const word = nonce >> 8n;
  const bit = 1n << (nonce & 0xffn);
  const bitmap = await client.readContract({
    address: PERMIT2_ADDRESS,
    abi: NONCE_BITMAP,
    functionName: "nonceBitmap",
    args: [owner, word],
  });
  if ((bitmap & bit) === 0n) {
    // Permit2 takes a permit while block.timestamp <= deadline.
    return latest.timestamp > deadline
      ? { kind: "unused", reason: "its permit expired unused" }
      : { kind: "usable" };
  }
  const range = await blockRange(client, from, deadline + 1n, latest);
  const transfers = await logsIn(range, (fromBlock, toBlock) =>
    client.getLogs({ address: token, event: TRANSFER, args: { from: owner, to: payTo }, fromBlock, toBlock }),
  );
  const signed = signature.toLowerCase().replace(/^0x/, "");
  const seen = new Set<Hash>();
  for (const transfer of transfers) {
    const hash = transfer.transactionHash;
    if (hash == null || seen.has(hash)) continue;
    seen.add(hash);
    const tx = await client.getTransaction({ hash });
    if (!tx.input.toLowerCase().includes(signed)) continue;
    const collected = transfers
      .filter((t) => t.transactionHash === hash)
      .reduce((sum, t) => sum + (t.args.value ?? 0n), 0n);
    return { kind: "used", transaction: hash, collected };
  }
  const invalidations = await logsIn(range, (fromBlock, toBlock) =>
    client.getLogs({
      address: PERMIT2_ADDRESS,
      event: NONCE_INVALIDATION,
      args: { owner },
      fromBlock,
      toBlock,
    }),
  );
  if (invalidations.some((log) => log.args.word === word && ((log.args.mask ?? 0n) & bit) !== 0n)) {
    return { kind: "unused", reason: "its payer invalidated the permit's nonce" };
  }
  return {
    kind: "unknown",
    reason: "its permit's nonce is spent, but no transfer carrying it to payTo was found",
  };
}

/** What `tx` moved of `token` from `payer` to `payTo`, read from its receipt's logs. */
async function transferredIn(
  client: PublicClient,
  hash: Hash,
  token: Address,
  payer: Address,
  payTo: string,
): Promise<bigint> {
  const receipt = await client.getTransactionReceipt({ hash });
  if (receipt.status !== "success") return 0n;
  const to = getAddress(payTo);
  let moved = 0n;
  for (const log of receipt.logs) {
    if (getAddress(log.address) !== token || log.topics[0] !== TRANSFER_TOPIC) continue;
    if (topicAddress(log.topics[1]) !== payer || topicAddress(log.topics[2]) !== to) continue;
    moved += BigInt(log.data);
  }
  return moved;
}

/** keccak256("Transfer(address,address,uint256)"). */
const TRANSFER_TOPIC = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef";

function topicAddress(topic: Hex | undefined): Address | undefined {
  return topic === undefined ? undefined : getAddress(`0x${topic.slice(-40)}`);
}

/** The blocks a collection can be in: from the first at or after `fromTime` to the first after `untilTime`. */
async function blockRange(
  client: PublicClient,
  fromTime: bigint,
  untilTime: bigint,
  latest: Block,
): Promise<{ readonly from: bigint; readonly to: bigint }> {
  const head = latest.number ?? 0n;
  const from = await firstBlockAt(client, fromTime, head, latest.timestamp);
  const to =
    latest.timestamp <= untilTime ? head : await firstBlockAt(client, untilTime + 1n, head, latest.timestamp);
  return { from, to };
}

/** The first block whose timestamp is at least `time` (a binary search over the chain's blocks). */
async function firstBlockAt(
  client: PublicClient,
  time: bigint,
  head: bigint,
  headTime: bigint,
): Promise<bigint> {
  if (headTime < time) return head;
  let low = 0n;
  let high = head;
  while (low < high) {
    const middle = (low + high) / 2n;
    const block = await client.getBlock({ blockNumber: middle });
    if (block.timestamp >= time) high = middle;
    else low = middle + 1n;
  }
  return low;
}

/** `query` over `range` in windows of {@link LOG_RANGE} blocks, the logs in order. */
async function logsIn<L extends Log>(
  range: { readonly from: bigint; readonly to: bigint },
  query: (fromBlock: bigint, toBlock: bigint) => Promise<L[]>,
): Promise<L[]> {
  const logs: L[] = [];
  for (let start = range.from; start <= range.to; start += LOG_RANGE) {
    const end = start + LOG_RANGE - 1n < range.to ? start + LOG_RANGE - 1n : range.to;
    logs.push(...(await query(start, end)));
  }
  return logs;
}

/** A Solana `exact` payment's transaction, by the signature the facilitator gives it as fee payer. */
async function svmCollection(
  chain: ChainConfig,
  feePayer: KeyPairSigner | undefined,
  payment: X402PaymentPayload,
  offer: X402Offer,
): Promise<X402OnchainState> {
  const wire = payment.payload.transaction;
  if (typeof wire !== "string") return { kind: "unknown", reason: "the payment carries no transaction" };
  const transaction = getTransactionDecoder().decode(getBase64Encoder().encode(wire));
  const message = getCompiledTransactionMessageDecoder().decode(transaction.messageBytes);
  const payerOfFees = message.staticAccounts[0];
  if (feePayer === undefined || payerOfFees !== feePayer.address) {
    return {
      kind: "unknown",
      reason:
        "its transaction's id is its fee payer's signature, which only the local facilitator can compute",
    };
  }
  const content = new Uint8Array(transaction.messageBytes);
  const [signed] = await feePayer.signMessages([{ content, signatures: {} }]);
  const signature = getBase58Decoder().decode(signed![feePayer.address]!);
  const connection = new Connection(chain.rpcUrl, "confirmed");
  const { value } = await connection.getSignatureStatuses([signature], { searchTransactionHistory: true });
  const status = value[0];
  if (status === null || status === undefined) {
    const blockhash = message.lifetimeToken;
    const live = await connection.isBlockhashValid(blockhash, { commitment: "processed" });
    return live.value
      ? { kind: "usable" }
      : { kind: "unused", reason: "its transaction never landed, and its blockhash expired" };
  }
  if (status.err !== null) {
    // A transaction that landed and failed cannot land again: its signature is taken.
    return { kind: "unused", reason: `its transaction ${signature} failed onchain` };
  }
  if (status.confirmationStatus === "processed") return { kind: "usable" };
  const landed = await connection.getTransaction(signature, {
    commitment: "confirmed",
    maxSupportedTransactionVersion: 0,
  });
  const collected = tokenMoved(landed?.meta, offer.asset, offer.payTo);
  return collected > 0n
    ? { kind: "used", transaction: signature, collected }
    : { kind: "unknown", reason: `its transaction ${signature} landed without paying ${offer.payTo}` };
}

interface TokenBalance {
  readonly accountIndex: number;
  readonly mint: string;
  readonly owner?: string | undefined;
  readonly uiTokenAmount: { readonly amount: string };
}

/** What the transaction added to `owner`'s token accounts for `mint`, from its balances before and after. */
function tokenMoved(
  meta:
    | {
        readonly preTokenBalances?: TokenBalance[] | null;
        readonly postTokenBalances?: TokenBalance[] | null;
      }
    | null
    | undefined,
  mint: string,
  owner: string,
): bigint {
  const sum = (balances: TokenBalance[] | null | undefined) =>
    (balances ?? [])
      .filter((b) => b.mint === mint && b.owner === owner)
      .reduce((total, b) => total + BigInt(b.uiTokenAmount.amount), 0n);
  return sum(meta?.postTokenBalances) - sum(meta?.preTokenBalances);
}
