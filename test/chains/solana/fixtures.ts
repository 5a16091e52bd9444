import { randomBytes } from "node:crypto";
import { Connection, PublicKey } from "@solana/web3.js";
import { createSolanaAdapter } from "../../../src/chains/solana/solana-adapter.js";
import { type ChainConfig, defaultWithdrawalTerms } from "../../../src/core/billing/chain-registry.js";
import type { ChainAdapter } from "../../../src/core/ports/chains.js";
import { type SolanaDevChain, startSolanaDevChain } from "../../../src/dev/chains/solana/dev-chain.js";

/** A dev chain, a registry entry for it, an adapter on it (treasury funded with SOL), and a raw Connection. */
export interface SolanaFixture {
  readonly dev: SolanaDevChain;
  readonly chain: ChainConfig;
  readonly masterSecret: Uint8Array;
  readonly adapter: ChainAdapter;
  readonly connection: Connection;
  readonly mint: PublicKey;
  /** Advances slots until `finalized` reaches the current processed slot. */
  finalize(): void;
  close(): Promise<void>;
}

/** The registry entry a Solana dev chain would have. */
export function solanaChainConfig(
  dev: SolanaDevChain,
  commitment: "finalized" | "confirmed" = "finalized",
): ChainConfig {
  return {
    id: "solana-dev",
    family: "solana",
    chainId: undefined,
    network: "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1",
    asset: { symbol: "USDC", decimals: dev.decimals, address: dev.mint },
    rpcUrl: dev.rpcUrl,
    finality: { commitment },
    enabled: true,
    withdrawal: defaultWithdrawalTerms("solana", dev.decimals),
  };
}

/** Starts a manual-slot dev chain (confirmed lags 1, finalized 4) with an adapter on it. */
export async function startSolanaFixture(
  options: {
    blockhashValidSlots?: number;
    commitment?: "finalized" | "confirmed";
    rpcTimeoutMs?: number;
  } = {},
): Promise<SolanaFixture> {
  const finalizedLag = 4;
  const dev = await startSolanaDevChain({
    slotMs: 0,
    confirmedLag: 1,
    finalizedLag,
    blockhashValidSlots: options.blockhashValidSlots ?? 150,
  });
  const chain = solanaChainConfig(dev, options.commitment);
  const masterSecret = randomBytes(32);
  // The chain shares this process and two busy cores with other test files: allow slow answers.
  const adapter = createSolanaAdapter(chain, { masterSecret, rpcTimeoutMs: options.rpcTimeoutMs ?? 30_000 });
  await dev.airdrop(adapter.treasuryAddress(), 10_000_000_000n);
  return {
    dev,
    chain,
    masterSecret,
    adapter,
    connection: new Connection(dev.rpcUrl, "confirmed"),
    mint: new PublicKey(dev.mint),
    finalize: () => {
      dev.advanceSlots(finalizedLag);
    },
    close: async () => {
      await adapter.close();
      await dev.close();
    },
  };
}
