import type { ChainConfig } from "../core/billing/chain-registry.js";
import type { ChainAdapter } from "../core/ports/chains.js";
import { createEvmAdapter } from "./evm/evm-adapter.js";

/** What every adapter is built with. */
export interface AdapterOptions {
  readonly masterSecret: Uint8Array;
}

/**
 * The Solana adapter's module, loaded only when a Solana chain is configured. A computed
 * specifier keeps @solana/web3.js out of processes that serve EVM chains only.
 */
const SOLANA_ADAPTER_MODULE = "./solana/solana-adapter.js";

/**
 * Builds the adapter of one registry chain, by family: the only place that maps a family to
 * its implementation. Throws when the family's adapter is not part of this build.
 */
export async function createChainAdapter(chain: ChainConfig, options: AdapterOptions): Promise<ChainAdapter> {
  switch (chain.family) {
    case "evm":
      return createEvmAdapter(chain, { masterSecret: options.masterSecret });
    case "solana": {
      let module: { createSolanaAdapter?: (chain: ChainConfig, options: AdapterOptions) => ChainAdapter };
      try {
        module = await import(SOLANA_ADAPTER_MODULE);
      } catch (error) {
        throw new Error(`the Solana adapter is not available in this build: ${(error as Error).message}`);
      }
      if (typeof module.createSolanaAdapter !== "function") {
        throw new Error("the Solana adapter module does not export createSolanaAdapter");
      }
      return module.createSolanaAdapter(chain, { masterSecret: options.masterSecret });
    }
  }
}
