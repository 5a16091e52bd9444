import { x402Facilitator } from "@x402/core/facilitator";
import { type FacilitatorClient, HTTPFacilitatorClient } from "@x402/core/server";
import type { Network, SupportedResponse } from "@x402/core/types";
import { toFacilitatorEvmSigner } from "@x402/evm";
import { ExactEvmScheme } from "@x402/evm/exact/facilitator";
import { UptoEvmScheme } from "@x402/evm/upto/facilitator";
import {
  bytesToHex,
  createPublicClient,
  createWalletClient,
  defineChain,
  getAddress,
  http,
  nonceManager,
  publicActions,
} from "viem";
import { privateKeyToAccount } from "viem/accounts";
import type { ChainConfig, ChainRegistry } from "../../core/billing/chain-registry.js";
import type { X402Chain } from "../../core/billing/x402.js";
import { treasurySeed, x402FacilitatorSeed } from "../keys.js";
import { eip3009Abi } from "./evm-adapter.js";

/**
 * The x402 facilitator of the gateway's own chains (docs/x402.md): `@x402/core`'s
 * `x402Facilitator` with `@x402/evm`'s `exact` and `upto` mechanisms, signing and paying gas
 * with a key of its own derived from the master secret (`tollgate/evm/x402-facilitator`), so
 * its transactions never race the treasury's settlement nonces. Payments go to the treasury.
 * With `TOLLGATE_X402_FACILITATOR_URL` a remote facilitator verifies and settles instead.
 */

/** What x402 runs on: the facilitator and, per chain, where payments go and the token's domain. */
export interface X402Setup {
  readonly facilitator: FacilitatorClient;
  readonly chains: readonly X402Chain[];
  /** The local facilitator's signer (it pays the collections' gas); undefined for a remote one. */
  readonly signer: string | undefined;
}

/** How often a collection's receipt is polled for; an L2 block is a second or two, anvil's instant. */
const RECEIPT_POLL_MS = 250;

/**
 * x402 on every EVM chain of `registry` that runs (`only`, when given): through the local
 * facilitator, or through `facilitatorUrl`. Reads each token's EIP-712 name and version from its
 * contract (what payers sign over); a chain that cannot answer stops start-up.
 */
export async function setUpX402(
  registry: ChainRegistry,
  masterSecret: Uint8Array,
  options: { readonly only?: ReadonlySet<string> | undefined; readonly facilitatorUrl?: string | undefined },
): Promise<X402Setup> {
  const evm = registry.chains.filter(
    (c) => c.family === "evm" && c.enabled && (options.only === undefined || options.only.has(c.id)),
  );
  const payTo = privateKeyToAccount(bytesToHex(treasurySeed(masterSecret, "evm"))).address;
  const chains = await Promise.all(
    evm.map(async (chain) => ({ chain: chain.id, payTo, extra: await tokenDomain(chain) })),
  );
  if (options.facilitatorUrl !== undefined) {
    return {
      facilitator: new HTTPFacilitatorClient({ url: options.facilitatorUrl }),
      chains,
      signer: undefined,
    };
  }
  const signerAccount = privateKeyToAccount(bytesToHex(x402FacilitatorSeed(masterSecret)), { nonceManager });
  const facilitator = new x402Facilitator();
  for (const chain of evm) {
    const wallet = createWalletClient({
      account: signerAccount,
      chain: viemChain(chain),
      transport: http(chain.rpcUrl, { timeout: 10_000, retryCount: 1 }),
      pollingInterval: RECEIPT_POLL_MS,
    }).extend(publicActions);
    // viem's client is the signer x402 asks for; only its typed-data check's types differ.
    const signer = toFacilitatorEvmSigner({ ...wallet, address: signerAccount.address } as Parameters<
      typeof toFacilitatorEvmSigner
    >[0]);
    facilitator
      .register(chain.network as Network, new ExactEvmScheme(signer))
      .register(chain.network as Network, new UptoEvmScheme(signer));
  }
  return {
    facilitator: {
      verify: (payload, requirements) => facilitator.verify(payload, requirements),
      settle: (payload, requirements) => facilitator.settle(payload, requirements),
      // The local facilitator answers at once; the client interface returns a promise.
      getSupported: async () => facilitator.getSupported() as SupportedResponse,
    },
    chains,
    signer: signerAccount.address,
  };
}

/** The token's EIP-712 domain fields, as `exact` and `upto` offers carry them in `extra`. */
async function tokenDomain(chain: ChainConfig): Promise<{ name: string; version: string }> {
  const client = createPublicClient({ transport: http(chain.rpcUrl, { timeout: 10_000, retryCount: 1 }) });
  const token = getAddress(chain.asset.address);
  const [name, version] = await Promise.all([
    client.readContract({ address: token, abi: eip3009Abi, functionName: "name" }),
    client.readContract({ address: token, abi: eip3009Abi, functionName: "version" }).catch(() => "1"),
  ]);
  return { name, version };
}

function viemChain(chain: ChainConfig) {
  return defineChain({
    id: chain.chainId!,
    name: chain.id,
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    rpcUrls: { default: { http: [chain.rpcUrl] } },
  });
}
