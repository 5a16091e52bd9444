import {
  readArray,
  readBoolean,
  readInteger,
  readObject,
  readString,
  rejectUnknownKeys,
} from "./json-reader.js";
import { formatUnits, ledgerDecimals, parseDecimalAmount } from "./money.js";

/** How a chain's deposits and settlements are secured. */
export type ChainFamily = "evm" | "solana";

/** When a deposit counts: a confirmation depth (EVM) or a commitment level (Solana). */
export type FinalityRule =
  | { readonly confirmations: number }
  | { readonly commitment: "finalized" | "confirmed" };

/** The dollar stablecoin a chain settles in. */
export interface AssetConfig {
  readonly symbol: string;
  /**
   * Onchain decimals: onchain amounts are integers in units of 10^-decimals. The ledger counts
   * this chain in units of 10^-min(decimals, 9) (`ledgerDecimals` in money.ts).
   */
  readonly decimals: number;
  /** ERC-20 contract (EVM) or SPL mint (Solana). */
  readonly address: string;
}

/**
 * What a withdrawal on a chain must respect, in the chain's ledger units: the least amount that
 * may be sent, and the network fee the account pays on top of it (its ledger debit is amount +
 * fee). The fee stands for what one transfer costs the treasury, which signs and pays for it.
 */
export interface WithdrawalTerms {
  readonly minimum: bigint;
  readonly fee: bigint;
}

/** One chain of the registry. */
export interface ChainConfig {
  /** The value of `x-gateway-billing-chain`, and the ledger's chain key. */
  readonly id: string;
  readonly family: ChainFamily;
  /** EIP-155 chain id (EVM only). */
  readonly chainId: number | undefined;
  /**
   * The chain as CAIP-2 names it (x402's `network`, a receipt's `network`): `eip155:<chainId>`
   * on EVM; on Solana `solana:` and its genesis hash's first 32 characters (mainnet-beta's by
   * default).
   */
  readonly network: string;
  readonly asset: AssetConfig;
  readonly rpcUrl: string;
  readonly finality: FinalityRule;
  /** A disabled chain takes no new holds; its balances stay readable and creditable. */
  readonly enabled: boolean;
  readonly withdrawal: WithdrawalTerms;
}

/** The configured chains and the default an account bills until it picks its own. */
export interface ChainRegistry {
  readonly chains: readonly ChainConfig[];
  readonly defaultChain: string;
  readonly byId: ReadonlyMap<string, ChainConfig>;
}

/**
 * The most onchain decimals a chain's asset may have. The ledger counts amounts in units of
 * 10^-min(decimals, 9), so every asset up to 18 decimals holds ~9.22 × 10^9 whole tokens per
 * int64 balance; settlement scales ledger units to onchain units exactly (see docs/billing.md).
 */
export const MAX_DECIMALS = 18;

/** The header value (and RPC value) meaning "the account's default chain". */
export const AUTO_CHAIN = "auto";

/**
 * The withdrawal terms of a chain whose entry names none, in whole tokens of its dollar
 * stablecoin. An EVM L2 transfer costs the treasury well under a cent of gas; $0.05 leaves room
 * for fee spikes. On Solana the signatures cost ~$0.002, but a withdrawal to a wallet without a
 * token account makes the treasury pay that account's rent (0.00203928 SOL), which the
 * recipient can reclaim by closing it: $0.50 covers it up to a SOL price of ~$245. The $1
 * minimum keeps the fee a small part of any withdrawal. See docs/chains.md ("Withdrawals").
 */
const DEFAULT_WITHDRAWAL = {
  evm: { minimum: "1", fee: "0.05" },
  solana: { minimum: "1", fee: "0.50" },
} as const satisfies Record<ChainFamily, Record<keyof WithdrawalTerms, string>>;

/** A chain family's default withdrawal terms, in ledger units of an asset with `assetDecimals`. */
export function defaultWithdrawalTerms(family: ChainFamily, assetDecimals: number): WithdrawalTerms {
  const decimals = ledgerDecimals(assetDecimals);
  const terms = DEFAULT_WITHDRAWAL[family];
  return {
    minimum: parseDecimalAmount(terms.minimum, decimals),
    fee: parseDecimalAmount(terms.fee, decimals),
  };
}

/** Withdrawal terms as a registry entry writes them (decimal amounts of the asset). */
export function withdrawalTermsJson(chain: ChainConfig): {
  withdrawal_minimum: string;
  withdrawal_fee: string;
} {
  const decimals = ledgerDecimals(chain.asset.decimals);
  return {
    withdrawal_minimum: formatUnits(chain.withdrawal.minimum, decimals),
    withdrawal_fee: formatUnits(chain.withdrawal.fee, decimals),
  };
}

const CHAIN_ID = /^[a-z][a-z0-9-]{0,31}$/;
const EVM_ADDRESS = /^0x[0-9a-fA-F]{40}$/;
const SOLANA_ADDRESS = /^[1-9A-HJ-NP-Za-km-z]{32,44}$/;

/** Builds a registry from already-validated chains, checking the cross-chain rules. */
export function chainRegistry(chains: readonly ChainConfig[], defaultChain: string): ChainRegistry {
  const byId = new Map<string, ChainConfig>();
  for (const chain of chains) {
    if (byId.has(chain.id)) throw new Error(`chain id ${JSON.stringify(chain.id)} appears twice`);
    byId.set(chain.id, chain);
  }
  const fallback = byId.get(defaultChain);
  if (fallback === undefined)
    throw new Error(`default_chain ${JSON.stringify(defaultChain)} is not a configured chain`);
  if (!fallback.enabled) throw new Error(`default_chain ${JSON.stringify(defaultChain)} is disabled`);
  return { chains, defaultChain, byId };
}

/** The ids of the enabled chains, in registry order. */
export function enabledChainIds(registry: ChainRegistry): string[] {
  return registry.chains.filter((c) => c.enabled).map((c) => c.id);
}

/**
 * Parses and validates a chain registry file:
 * `{"default_chain": "base", "chains": [{"id", "family", "chain_id"?, "asset": {"symbol",
 * "decimals", "address"}, "rpc_url", "finality": {"confirmations"} | {"commitment"},
 * "enabled"?, "withdrawal_minimum"?, "withdrawal_fee"?}]}` (the last two decimal amounts of the
 * asset as strings, e.g. "0.05"; the family's defaults when absent). Throws an Error naming the offending entry. A top-level `faucet_url` (what
 * `tollgate dev-chains` adds to the file it writes) is allowed and ignored here, so that file
 * works as TOLLGATE_CHAINS as it is.
 */
export function parseChainRegistry(json: unknown): ChainRegistry {
  const root = readObject(json, "$");
  rejectUnknownKeys(root, ["default_chain", "chains", "faucet_url"], "$");
  const chains = readArray(root.chains, "$.chains").map((entry, i) => parseChain(entry, `$.chains[${i}]`));
  if (chains.length === 0) throw new Error("$.chains must list at least one chain");
  return chainRegistry(chains, readString(root, "default_chain", "$"));
}

function parseChain(value: unknown, path: string): ChainConfig {
  const obj = readObject(value, path);
  rejectUnknownKeys(
    obj,
    [
      "id",
      "family",
      "chain_id",
      "asset",
      "rpc_url",
      "finality",
      "enabled",
      "withdrawal_minimum",
      "withdrawal_fee",
      "network",
    ],
    path,
  );
  const id = readString(obj, "id", path);
  if (!CHAIN_ID.test(id) || id === AUTO_CHAIN) {
    throw new Error(`${path}.id must be 1–32 of [a-z0-9-], start with a letter, and not be "auto"`);
  }
  const family = readString(obj, "family", path);
  if (family !== "evm" && family !== "solana") throw new Error(`${path}.family must be "evm" or "solana"`);
  const assetObj = readObject(obj.asset, `${path}.asset`);
  rejectUnknownKeys(assetObj, ["symbol", "decimals", "address"], `${path}.asset`);
  const asset: AssetConfig = {
    symbol: readString(assetObj, "symbol", `${path}.asset`),
    decimals: readInteger(assetObj, "decimals", `${path}.asset`, 0, MAX_DECIMALS),
    address: readString(assetObj, "address", `${path}.asset`),
  };
  if (!/^[A-Za-z0-9.]{1,16}$/.test(asset.symbol))
    throw new Error(`${path}.asset.symbol must be 1–16 letters or digits`);
  const addressOk = family === "evm" ? EVM_ADDRESS.test(asset.address) : SOLANA_ADDRESS.test(asset.address);
  if (!addressOk) {
    throw new Error(
      `${path}.asset.address is not a valid ${family === "evm" ? "0x… contract" : "base58 mint"} address`,
    );
  }
  const rpcUrl = readString(obj, "rpc_url", path);
  let protocol: string;
  try {
    protocol = new URL(rpcUrl).protocol;
  } catch {
    throw new Error(`${path}.rpc_url is not a URL`);
  }
  if (!["http:", "https:", "ws:", "wss:"].includes(protocol)) {
    throw new Error(`${path}.rpc_url must be an http(s):// or ws(s):// URL`);
  }
  const chainId =
    family === "evm" ? readInteger(obj, "chain_id", path, 1, Number.MAX_SAFE_INTEGER) : undefined;
  return {
    id,
    family,
    chainId,
    network: parseNetwork(obj, family, chainId, path),
    asset,
    rpcUrl,
    finality: parseFinality(obj.finality, family, `${path}.finality`),
    enabled: readBoolean(obj, "enabled", path, true),
    withdrawal: parseWithdrawalTerms(obj, family, asset.decimals, path),
  };
}

/** Solana mainnet-beta as CAIP-2 names it (its genesis hash, cut to 32 characters). */
export const SOLANA_MAINNET_NETWORK = "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp";
const CAIP2 = /^[-a-z0-9]{3,8}:[-_a-zA-Z0-9]{1,32}$/;

function parseNetwork(
  obj: Record<string, unknown>,
  family: ChainFamily,
  chainId: number | undefined,
  path: string,
): string {
  const derived = family === "evm" ? `eip155:${chainId}` : SOLANA_MAINNET_NETWORK;
  if (obj.network === undefined) return derived;
  const network = readString(obj, "network", path);
  if (!CAIP2.test(network)) throw new Error(`${path}.network must be a CAIP-2 chain id such as "${derived}"`);
  if (family === "evm" && network !== derived)
    throw new Error(`${path}.network must be "${derived}" (its chain_id), or be left out`);
  if (family === "solana" && !network.startsWith("solana:"))
    throw new Error(`${path}.network must start with "solana:"`);
  return network;
}

function parseWithdrawalTerms(
  obj: Record<string, unknown>,
  family: ChainFamily,
  assetDecimals: number,
  path: string,
): WithdrawalTerms {
  const defaults = defaultWithdrawalTerms(family, assetDecimals);
  const decimals = ledgerDecimals(assetDecimals);
  const amount = (key: string, fallback: bigint): bigint => {
    const value = obj[key];
    if (value === undefined) return fallback;
    try {
      if (typeof value !== "string") throw new RangeError("not a string");
      const units = parseDecimalAmount(value, decimals);
      // An int64 in the ledger, with room for amount + fee.
      if (units > 2n ** 62n) throw new RangeError("too large");
      return units;
    } catch {
      throw new Error(
        `${path}.${key} must be a decimal amount of the asset as a string, e.g. "0.05", ` +
          `with at most ${decimals} decimals`,
      );
    }
  };
  return {
    minimum: amount("withdrawal_minimum", defaults.minimum),
    fee: amount("withdrawal_fee", defaults.fee),
  };
}

function parseFinality(value: unknown, family: ChainFamily, path: string): FinalityRule {
  const obj = readObject(value, path);
  if (family === "evm") {
    rejectUnknownKeys(obj, ["confirmations"], path);
    return { confirmations: readInteger(obj, "confirmations", path, 0, 100_000) };
  }
  rejectUnknownKeys(obj, ["commitment"], path);
  const commitment = readString(obj, "commitment", path);
  if (commitment !== "finalized" && commitment !== "confirmed") {
    throw new Error(`${path}.commitment must be "finalized" or "confirmed"`);
  }
  return { commitment };
}
