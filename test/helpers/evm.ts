import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import {
  type Address,
  createTestClient,
  createWalletClient,
  getAddress,
  type Hash,
  http,
  parseEther,
  publicActions,
} from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { type ChainConfig, defaultWithdrawalTerms } from "../../src/core/billing/chain-registry.js";
import type { EvmDevChain } from "../../src/dev/chains/evm/dev-chain.js";
import {
  testStablecoinAbi,
  testStablecoinBytecode,
} from "../../src/dev/chains/evm/test-stablecoin-artifact.js";

/** A fixed 32-byte master secret for tests (never a real one). */
export const TEST_MASTER_SECRET = new Uint8Array(32).fill(7);

/** A registry entry pointing at a dev chain, with `confirmations` as its finality rule. */
export function devChainConfig(dev: EvmDevChain, confirmations: number): ChainConfig {
  return {
    id: dev.id,
    family: "evm",
    chainId: dev.chainId,
    network: `eip155:${dev.chainId}`,
    asset: { symbol: "USDC", decimals: 6, address: dev.token },
    rpcUrl: dev.rpcUrl,
    finality: { confirmations },
    enabled: true,
    withdrawal: defaultWithdrawalTerms("evm", 6),
  };
}

/**
 * Writes a `TOLLGATE_CHAINS` file naming one chain, `base`, on `dev`'s token, reached at `rpcUrl`
 * (the dev chain's own, or a proxy in front of it), final after one confirmation.
 */
export function writeChainsFile(path: string, dev: EvmDevChain, rpcUrl = dev.rpcUrl): void {
  const chain = devChainConfig(dev, 1);
  const entry = { id: "base", family: "evm", chain_id: 8453, asset: chain.asset, rpc_url: rpcUrl };
  writeFileSync(
    path,
    JSON.stringify({ default_chain: "base", chains: [{ ...entry, finality: { confirmations: 1 } }] }),
  );
}

/**
 * Deploys a second, unrelated instance of the test stablecoin from a random key: a token the
 * registry does not name, whose transfers must credit nothing.
 */
export async function deployOtherToken(dev: EvmDevChain): Promise<{
  address: Address;
  mintTo(to: string, amount: bigint): Promise<Hash>;
}> {
  const account = privateKeyToAccount(`0x${randomBytes(32).toString("hex")}`);
  const chain = {
    id: dev.chainId,
    name: dev.id,
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    rpcUrls: { default: { http: [dev.rpcUrl] } },
  };
  const test = createTestClient({ mode: "anvil", transport: http(dev.rpcUrl) }).extend(publicActions);
  await test.setBalance({ address: account.address, value: parseEther("10") });
  const wallet = createWalletClient({ account, chain, transport: http(dev.rpcUrl) });
  const hash = await wallet.deployContract({
    abi: testStablecoinAbi,
    bytecode: testStablecoinBytecode,
    args: ["Other USD", "OUSD"],
  });
  const receipt = await test.waitForTransactionReceipt({ hash, pollingInterval: 20 });
  const address = getAddress(receipt.contractAddress!);
  return {
    address,
    mintTo: (to, amount) =>
      wallet.writeContract({
        address,
        abi: testStablecoinAbi,
        functionName: "mint",
        args: [getAddress(to), amount],
      }),
  };
}
