import { type ChainRegistry, parseChainRegistry } from "./chain-registry.js";

/**
 * The shipped chain registry, in the same shape as a TOLLGATE_CHAINS file. Addresses are the
 * chains' canonical dollar stablecoins (Circle USDC on Base, Arbitrum and Solana; Paxos USDG on
 * Robinhood Chain, whose canonical stablecoin is not USDC). Confirmation depths are
 * conservative starting points for the deposit watcher; operators tune them in config. The
 * withdrawal terms are the families' defaults (see DEFAULT_WITHDRAWAL in chain-registry.ts),
 * written out so that a copy of this file shows where to change them.
 */
export const DEFAULT_CHAINS_JSON = {
  default_chain: "base",
  chains: [
    {
      id: "base",
      family: "evm",
      chain_id: 8453,
      asset: { symbol: "USDC", decimals: 6, address: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913" },
      rpc_url: "https://mainnet.base.org",
      finality: { confirmations: 20 },
      enabled: true,
      withdrawal_minimum: "1.00",
      withdrawal_fee: "0.05",
    },
    {
      id: "arbitrum",
      family: "evm",
      chain_id: 42161,
      asset: { symbol: "USDC", decimals: 6, address: "0xaf88d065e77c8cC2239327C5EDb3A432268e5831" },
      rpc_url: "https://arb1.arbitrum.io/rpc",
      finality: { confirmations: 20 },
      enabled: true,
      withdrawal_minimum: "1.00",
      withdrawal_fee: "0.05",
    },
    {
      id: "robinhood",
      family: "evm",
      chain_id: 4663,
      asset: { symbol: "USDG", decimals: 6, address: "0x5fc5360D0400a0Fd4f2af552ADD042D716F1d168" },
      rpc_url: "https://rpc.mainnet.chain.robinhood.com",
      finality: { confirmations: 20 },
      enabled: true,
      withdrawal_minimum: "1.00",
      withdrawal_fee: "0.05",
    },
    {
      id: "solana",
      family: "solana",
      asset: { symbol: "USDC", decimals: 6, address: "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v" },
      rpc_url: "https://api.mainnet-beta.solana.com",
      finality: { commitment: "finalized" },
      enabled: true,
      withdrawal_minimum: "1.00",
      withdrawal_fee: "0.50",
    },
  ],
} as const;

/** The shipped registry, validated like any config file. */
export function defaultChainRegistry(): ChainRegistry {
  return parseChainRegistry(DEFAULT_CHAINS_JSON);
}
