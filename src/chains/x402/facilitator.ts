import { createKeyPairSignerFromPrivateKeyBytes } from "@solana/kit";
import { getAssociatedTokenAddressSync } from "@solana/spl-token";
import { Connection, PublicKey } from "@solana/web3.js";
import { x402Facilitator } from "@x402/core/facilitator";
import { type FacilitatorClient, HTTPFacilitatorClient } from "@x402/core/server";
import type { Network, SupportedResponse } from "@x402/core/types";
import { toFacilitatorEvmSigner } from "@x402/evm";
import { ExactEvmScheme } from "@x402/evm/exact/facilitator";
import { UptoEvmScheme } from "@x402/evm/upto/facilitator";
import { toFacilitatorSvmSigner } from "@x402/svm";
import { ExactSvmScheme } from "@x402/svm/exact/facilitator";
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
import type { Log } from "../../core/ports/log.js";
import type { X402Gateway, X402Onchain } from "../../core/ports/x402.js";
import { eip3009Abi } from "../evm/evm-adapter.js";
import { treasurySeed, x402FacilitatorSeed } from "../keys.js";
import { solanaTreasuryKeypair } from "../solana/keys.js";
import { createX402Gateway } from "./gateway.js";
import { createX402Onchain } from "./onchain.js";

/**
 * The x402 facilitator of the gateway's own chains (docs/x402.md): `@x402/core`'s
 * `x402Facilitator` with `@x402/evm`'s `exact` and `upto` mechanisms on every EVM chain and
 * `@x402/svm`'s `exact` on Solana, signing (and paying gas or fees) with keys of its own derived
 * from the master secret (`tollgate/<family>/x402-facilitator`), so its transactions never race
 * the treasury's settlements. Payments go to the treasury. With `TOLLGATE_X402_FACILITATOR_URL`
 * a remote facilitator verifies and settles instead.
 */

/** What x402 runs on: the core's x402 port over the facilitator and, per chain, where payments go and how. */
export interface X402Setup {
  /** The wire format and the facilitator, with each offered chain's schemes registered. */
  readonly gateway: X402Gateway;
  readonly chains: readonly X402Chain[];
  /** Whether a payment was collected, read from the chains (the recovery pass asks it). */
  readonly onchain: X402Onchain;
  /** The local facilitator's signer per chain (it pays the collections' gas); none for a remote one. */
  readonly signers: ReadonlyMap<string, string>;
}

/** What setting x402 up may need beyond the registry. */
export interface X402SetupOptions {
  /** Run only these chains (dev mode: those with a local chain); all when absent. */
  readonly only?: ReadonlySet<string> | undefined;
  readonly facilitatorUrl?: string | undefined;
  /**
   * Dev mode: opens the treasury's token account on a Solana dev chain (an `exact` payment
   * transfers into it and cannot create it). Elsewhere a chain whose treasury has no token
   * account yet is not offered, with a log line saying so.
   */
  readonly openTokenAccount?: ((chain: string, owner: string) => Promise<void>) | undefined;
  readonly log: Log;
}

/** How often a collection's receipt is polled for; an L2 block is a second or two, anvil's instant. */
const RECEIPT_POLL_MS = 250;
const RPC_TIMEOUT_MS = 10_000;

/**
 * x402 on every enabled chain of `registry` that runs (`only`, when given): through the local
 * facilitator, or through `facilitatorUrl`. Reads each EVM token's EIP-712 name and version from
 * its contract (what payers sign over); a chain that cannot answer stops start-up.
 */
export async function setUpX402(
  registry: ChainRegistry,
  masterSecret: Uint8Array,
  options: X402SetupOptions,
): Promise<X402Setup> {
  const running = registry.chains.filter(
    (c) => c.enabled && (options.only === undefined || options.only.has(c.id)),
  );
  const evmTreasury = privateKeyToAccount(bytesToHex(treasurySeed(masterSecret, "evm"))).address;
  const solanaTreasury = solanaTreasuryKeypair(masterSecret).publicKey.toBase58();
  const chains: X402Chain[] = [];
  for (const chain of running) {
    if (chain.family === "evm") {
      chains.push({
        chain: chain.id,
        payTo: evmTreasury,
        extra: await tokenDomain(chain),
        schemes: ["exact", "upto"],
      });
    } else if (await treasuryTokenAccount(chain, solanaTreasury, options)) {
      // Solana: `exact` only (x402's `upto` there needs its payment-channel program).
      chains.push({ chain: chain.id, payTo: solanaTreasury, extra: {}, schemes: ["exact"] });
    }
  }
  const offeredChains = running.filter((c) => chains.some((offered) => offered.chain === c.id));
  const networks = offeredChains.map((c) => ({ network: c.network, family: c.family }));
  if (options.facilitatorUrl !== undefined) {
    return {
      gateway: createX402Gateway(new HTTPFacilitatorClient({ url: options.facilitatorUrl }), networks),
      chains,
      // A remote facilitator's Solana fee payer signs with a key that is not here.
      onchain: createX402Onchain({ chains: offeredChains }),
      signers: new Map(),
    };
  }
  const facilitator = new x402Facilitator();
  const signers = new Map<string, string>();
  const offered = new Set(chains.map((c) => c.chain));
  const evmAccount = privateKeyToAccount(bytesToHex(x402FacilitatorSeed(masterSecret, "evm")), {
    nonceManager,
  });
  const svmSigner = await createKeyPairSignerFromPrivateKeyBytes(x402FacilitatorSeed(masterSecret, "solana"));
  for (const chain of running.filter((c) => offered.has(c.id))) {
    const network = chain.network as Network;
    if (chain.family === "evm") {
      const wallet = createWalletClient({
        account: evmAccount,
        chain: viemChain(chain),
        transport: http(chain.rpcUrl, { timeout: RPC_TIMEOUT_MS, retryCount: 1 }),
        pollingInterval: RECEIPT_POLL_MS,
      }).extend(publicActions);
      // viem's client is the signer x402 asks for; only its typed-data check's types differ.
      const signer = toFacilitatorEvmSigner({ ...wallet, address: evmAccount.address } as Parameters<
        typeof toFacilitatorEvmSigner
      >[0]);
      facilitator.register(network, new ExactEvmScheme(signer)).register(network, new UptoEvmScheme(signer));
      signers.set(chain.id, evmAccount.address);
    } else {
      const signer = toFacilitatorSvmSigner(svmSigner, { defaultRpcUrl: chain.rpcUrl });
      facilitator.register(network, new ExactSvmScheme(signer));
      signers.set(chain.id, svmSigner.address);
    }
  }
  const client: FacilitatorClient = {
    verify: (payload, requirements) => facilitator.verify(payload, requirements),
    settle: (payload, requirements) => facilitator.settle(payload, requirements),
    // The local facilitator answers at once; the client interface returns a promise.
    getSupported: async () => facilitator.getSupported() as SupportedResponse,
  };
  return {
    gateway: createX402Gateway(client, networks),
    chains,
    onchain: createX402Onchain({ chains: offeredChains, svmFeePayer: svmSigner }),
    signers,
  };
}

/** The token's EIP-712 domain fields, as `exact` and `upto` offers carry them in `extra`. */
async function tokenDomain(chain: ChainConfig): Promise<{ name: string; version: string }> {
  const client = createPublicClient({
    transport: http(chain.rpcUrl, { timeout: RPC_TIMEOUT_MS, retryCount: 1 }),
  });
  const token = getAddress(chain.asset.address);
  const [name, version] = await Promise.all([
    client.readContract({ address: token, abi: eip3009Abi, functionName: "name" }),
    client.readContract({ address: token, abi: eip3009Abi, functionName: "version" }).catch(() => "1"),
  ]);
  return { name, version };
}

/**
 * Whether the Solana treasury has its token account for the chain's mint (an `exact` payment
 * transfers into it and cannot open it): opened in dev mode, else the chain is not offered.
 */
async function treasuryTokenAccount(
  chain: ChainConfig,
  treasury: string,
  options: X402SetupOptions,
): Promise<boolean> {
  const account = getAssociatedTokenAddressSync(
    new PublicKey(chain.asset.address),
    new PublicKey(treasury),
    true,
  );
  const connection = new Connection(chain.rpcUrl, "confirmed");
  if ((await connection.getAccountInfo(account)) !== null) return true;
  if (options.openTokenAccount !== undefined) {
    await options.openTokenAccount(chain.id, treasury);
    return true;
  }
  options.log.warn(
    { chain: chain.id, treasury, tokenAccount: account.toBase58() },
    "x402 is not offered on this chain: the treasury has no token account for its mint yet",
  );
  return false;
}

function viemChain(chain: ChainConfig) {
  return defineChain({
    id: chain.chainId!,
    name: chain.id,
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    rpcUrls: { default: { http: [chain.rpcUrl] } },
  });
}
