import {
  type Address,
  bytesToHex,
  createPublicClient,
  decodeFunctionData,
  encodeFunctionData,
  getAddress,
  type Hex,
  http,
  isAddress,
  keccak256,
  maxUint256,
  type PublicClient,
  parseTransaction,
  stringToHex,
  TransactionReceiptNotFoundError,
  type Transport,
  webSocket,
} from "viem";
import { type PrivateKeyAccount, privateKeyToAccount } from "viem/accounts";
import type { ChainConfig } from "../../core/billing/chain-registry.js";
import type {
  ChainAdapter,
  ChainHealth,
  ObservedDeposit,
  PreparedTransfer,
  TransferOrder,
  TransferState,
} from "../../core/ports/chains.js";
import { depositSeed, treasurySeed } from "../keys.js";

/** What an EVM adapter needs beyond its registry entry. */
export interface EvmAdapterOptions {
  /** The server master secret every deposit and treasury key derives from. */
  readonly masterSecret: Uint8Array;
  /** Per-request RPC timeout; 10 s by default. */
  readonly timeoutMs?: number;
}

/** The slice of the ERC-20 + EIP-3009 ABI the gateway uses (USDC's FiatTokenV2 shape). */
export const eip3009Abi = [
  {
    type: "event",
    name: "Transfer",
    inputs: [
      { name: "from", type: "address", indexed: true },
      { name: "to", type: "address", indexed: true },
      { name: "value", type: "uint256", indexed: false },
    ],
  },
  {
    type: "function",
    name: "balanceOf",
    stateMutability: "view",
    inputs: [{ name: "account", type: "address" }],
    outputs: [{ name: "", type: "uint256" }],
  },
  {
    type: "function",
    name: "name",
    stateMutability: "view",
    inputs: [],
    outputs: [{ name: "", type: "string" }],
  },
  {
    type: "function",
    name: "version",
    stateMutability: "view",
    inputs: [],
    outputs: [{ name: "", type: "string" }],
  },
  {
    type: "function",
    name: "authorizationState",
    stateMutability: "view",
    inputs: [
      { name: "authorizer", type: "address" },
      { name: "nonce", type: "bytes32" },
    ],
    outputs: [{ name: "", type: "bool" }],
  },
  {
    type: "function",
    name: "transferWithAuthorization",
    stateMutability: "nonpayable",
    inputs: [
      { name: "from", type: "address" },
      { name: "to", type: "address" },
      { name: "value", type: "uint256" },
      { name: "validAfter", type: "uint256" },
      { name: "validBefore", type: "uint256" },
      { name: "nonce", type: "bytes32" },
      { name: "v", type: "uint8" },
      { name: "r", type: "bytes32" },
      { name: "s", type: "bytes32" },
    ],
    outputs: [],
  },
] as const;

const TRANSFER_WITH_AUTHORIZATION_TYPES = {
  TransferWithAuthorization: [
    { name: "from", type: "address" },
    { name: "to", type: "address" },
    { name: "value", type: "uint256" },
    { name: "validAfter", type: "uint256" },
    { name: "validBefore", type: "uint256" },
    { name: "nonce", type: "bytes32" },
  ],
} as const;

/**
 * The EIP-3009 nonce of a transfer order: keccak256 of its id. One order id can therefore
 * authorise one transfer onchain, ever, however often it is prepared.
 */
export function authorizationNonce(orderId: string): Hex {
  return keccak256(stringToHex(`tollgate/order/${orderId}`));
}

/**
 * The EVM chain adapter (viem): deposit addresses from HMAC-derived secp256k1 keys, deposits
 * from the token's Transfer logs, and transfers out of deposit addresses as EIP-3009
 * `transferWithAuthorization` calls signed by the deposit key and sent (and paid for) by the
 * treasury. One instance per EVM chain of the registry.
 */
/** Gas a `transferWithAuthorization` settlement may use, with margin (it uses about 60–90k). */
const SETTLEMENT_GAS = 120_000n;

export function createEvmAdapter(chain: ChainConfig, options: EvmAdapterOptions): ChainAdapter {
  if (chain.family !== "evm" || chain.chainId === undefined) {
    throw new Error(`chain ${chain.id} is not an EVM chain`);
  }
  if (!("confirmations" in chain.finality)) throw new Error(`chain ${chain.id} needs a confirmation depth`);
  const chainId = chain.chainId;
  const confirmations = BigInt(chain.finality.confirmations);
  const token = getAddress(chain.asset.address);
  const timeout = options.timeoutMs ?? 10_000;
  const transport: Transport = /^wss?:/.test(chain.rpcUrl)
    ? webSocket(chain.rpcUrl, { timeout, retryCount: 1 })
    : http(chain.rpcUrl, { timeout, retryCount: 1 });
  const client: PublicClient = createPublicClient({ transport });
  const treasury = privateKeyToAccount(bytesToHex(treasurySeed(options.masterSecret, "evm")));
  const depositAccounts = new Map<string, PrivateKeyAccount>();
  // The EIP-712 domain needs the token's name and version; read once, lazily.
  let domain: Promise<{ name: string; version: string }> | undefined;

  const depositAccount = (accountId: string): PrivateKeyAccount => {
    let account = depositAccounts.get(accountId);
    if (account === undefined) {
      account = privateKeyToAccount(bytesToHex(depositSeed(options.masterSecret, "evm", accountId)));
      depositAccounts.set(accountId, account);
    }
    return account;
  };

  const tokenDomain = () => {
    domain ??= Promise.all([
      client.readContract({ address: token, abi: eip3009Abi, functionName: "name" }),
      client.readContract({ address: token, abi: eip3009Abi, functionName: "version" }).catch(() => "1"),
    ]).then(([name, version]) => ({ name, version }));
    domain.catch(() => {
      domain = undefined;
    });
    return domain;
  };

  const finalizedPosition = async (): Promise<bigint> => {
    const head = await client.getBlockNumber({ cacheTime: 0 });
    return head - confirmations;
  };

  const scanDeposits = async (
    from: bigint,
    to: bigint,
    recipients: ReadonlySet<string>,
  ): Promise<ObservedDeposit[]> => {
    if (to < from) return [];
    const wanted = new Set([...recipients].map((r) => r.toLowerCase()));
    // One query for every Transfer of the token in the range, filtered here: its cost follows
    // the token's traffic, not the number of deposit addresses (see docs/chains.md).
    const logs = await client.getContractEvents({
      address: token,
      abi: eip3009Abi,
      eventName: "Transfer",
      fromBlock: from,
      toBlock: to,
      strict: true,
    });
    const deposits: ObservedDeposit[] = [];
    for (const log of logs) {
      if (log.removed || log.transactionHash === null || log.blockNumber === null || log.logIndex === null)
        continue;
      if (!wanted.has(log.args.to.toLowerCase()) || log.args.value === 0n) continue;
      deposits.push({
        txHash: log.transactionHash,
        index: log.logIndex,
        position: log.blockNumber,
        from: getAddress(log.args.from),
        to: getAddress(log.args.to),
        amount: log.args.value,
      });
    }
    deposits.sort((a, b) =>
      a.position === b.position ? a.index - b.index : a.position < b.position ? -1 : 1,
    );
    return deposits;
  };

  const authorizationUsed = (from: Address, nonce: Hex) =>
    client.readContract({
      address: token,
      abi: eip3009Abi,
      functionName: "authorizationState",
      args: [from, nonce],
    });

  return {
    chain,

    depositAddress(accountId) {
      return depositAccount(accountId).address;
    },

    treasuryAddress() {
      return treasury.address;
    },

    isValidAddress(address) {
      // Strict: a mixed-case address must carry a correct EIP-55 checksum (a typo is refused).
      return isAddress(address, { strict: true }) && BigInt(address) !== 0n;
    },

    finalizedPosition,

    scanDeposits,

    async pendingDeposits(from, maxRange, recipients) {
      const head = await client.getBlockNumber({ cacheTime: 0 });
      const to = from + maxRange - 1n < head ? from + maxRange - 1n : head;
      return scanDeposits(from, to, recipients);
    },

    async prepareTransfer(order: TransferOrder): Promise<PreparedTransfer> {
      if (order.amount <= 0n) throw new Error("a transfer moves a positive amount");
      const owner = depositAccount(order.accountId);
      const to = getAddress(order.to);
      const nonce = authorizationNonce(order.id);
      const { name, version } = await tokenDomain();
      const message = {
        from: owner.address,
        to,
        value: order.amount,
        validAfter: 0n,
        // No expiry: the nonce, not a deadline, is what stops a second payment; after a crash the
        // worker asks transferState instead of racing a clock.
        validBefore: maxUint256,
        nonce,
      };
      const signature = await owner.signTypedData({
        domain: { name, version, chainId, verifyingContract: token },
        types: TRANSFER_WITH_AUTHORIZATION_TYPES,
        primaryType: "TransferWithAuthorization",
        message,
      });
      const r = `0x${signature.slice(2, 66)}` as Hex;
      const s = `0x${signature.slice(66, 130)}` as Hex;
      const v = Number.parseInt(signature.slice(130, 132), 16);
      const data = encodeFunctionData({
        abi: eip3009Abi,
        functionName: "transferWithAuthorization",
        args: [
          message.from,
          message.to,
          message.value,
          message.validAfter,
          message.validBefore,
          nonce,
          v,
          r,
          s,
        ],
      });
      const [txNonce, fees, gas] = await Promise.all([
        client.getTransactionCount({ address: treasury.address, blockTag: "pending" }),
        client.estimateFeesPerGas(),
        // Estimation also proves the authorisation would succeed now (balance, signature, nonce).
        client.estimateGas({ account: treasury.address, to: token, data }),
      ]);
      const raw = await treasury.signTransaction({
        type: "eip1559",
        chainId,
        nonce: txNonce,
        to: token,
        data,
        value: 0n,
        // Headroom over the estimate: storage refunds and warm/cold access can shift it slightly.
        gas: (gas * 12n) / 10n,
        maxFeePerGas: fees.maxFeePerGas,
        maxPriorityFeePerGas: fees.maxPriorityFeePerGas,
      });
      return { orderId: order.id, txHash: keccak256(raw), raw };
    },

    async broadcast(prepared) {
      try {
        await client.sendRawTransaction({ serializedTransaction: prepared.raw as Hex });
      } catch (error) {
        // Sending it again is harmless: a node that already has it, or has mined it, says so.
        const text = errorText(error);
        if (/already known|already imported|nonce too low|known transaction/i.test(text)) return;
        throw error;
      }
    },

    async transferState(prepared): Promise<TransferState> {
      const tx = parseTransaction(prepared.raw as Hex);
      const call = decodeFunctionData({ abi: eip3009Abi, data: tx.data ?? "0x" });
      if (call.functionName !== "transferWithAuthorization") throw new Error("not a prepared transfer");
      const [from, , , , , nonce] = call.args;
      try {
        const receipt = await client.getTransactionReceipt({ hash: prepared.txHash as Hex });
        if (receipt.status === "success") {
          return receipt.blockNumber <= (await finalizedPosition()) ? "confirmed" : "pending";
        }
        // Reverted: if the authorisation was used anyway, another sender delivered it (anyone may
        // submit a signed EIP-3009 authorisation), so the funds did move.
        return (await authorizationUsed(from, nonce)) ? "confirmed" : "failed";
      } catch (error) {
        if (!(error instanceof TransactionReceiptNotFoundError)) throw error;
      }
      const mined = await client.getTransactionCount({ address: treasury.address, blockTag: "latest" });
      if (tx.nonce === undefined || mined <= tx.nonce) return "pending";
      // The treasury's nonce moved past this transaction without it: it can never land.
      return (await authorizationUsed(from, nonce)) ? "confirmed" : "dropped";
    },

    async balanceOf(address) {
      return client.readContract({
        address: token,
        abi: eip3009Abi,
        functionName: "balanceOf",
        args: [getAddress(address)],
      });
    },

    async treasuryFees() {
      const [balance, gasPrice] = await Promise.all([
        client.getBalance({ address: treasury.address }),
        client.getGasPrice(),
      ]);
      return { balance, oneTransfer: gasPrice * SETTLEMENT_GAS, symbol: "ETH", decimals: 18 };
    },

    async health(): Promise<ChainHealth> {
      try {
        const head = await client.getBlockNumber({ cacheTime: 0 });
        return { reachable: true, head, error: undefined };
      } catch (error) {
        return { reachable: false, head: undefined, error: errorText(error).split("\n")[0] };
      }
    },

    async close() {
      if (transport === undefined) return;
      const ws = client.transport as { getRpcClient?: () => Promise<{ close(): void }> };
      if (typeof ws.getRpcClient === "function") (await ws.getRpcClient()).close();
    },
  };
}

function errorText(error: unknown): string {
  if (error instanceof Error) {
    const details = (error as { details?: string; shortMessage?: string }).details ?? "";
    return `${(error as { shortMessage?: string }).shortMessage ?? error.message} ${details}`;
  }
  return String(error);
}
