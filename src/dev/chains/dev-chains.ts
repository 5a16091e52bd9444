import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import {
  type ChainConfig,
  type ChainRegistry,
  chainRegistry,
  withdrawalTermsJson,
} from "../../core/billing/chain-registry.js";
import { DEV_CHAINS_FILE } from "./dev-chains-file.js";
import { type EvmDevChain, startEvmDevChains } from "./evm/dev-chain.js";
import type { SolanaDevChain } from "./solana/dev-chain.js";

/** Dev chains mine a block this often, so confirmations accrue without traffic. */
const DEV_BLOCK_SECONDS = 1;
/** The confirmation depth of dev EVM chains (at one block a second, a deposit is final in ~2 s). */
const DEV_CONFIRMATIONS = 2;

/** Local chains standing in for the registry's, and a faucet for their test stablecoin. */
export interface DevChains {
  /** The registry re-pointed at the local chains (RPC URLs, token addresses, dev finality). */
  readonly registry: ChainRegistry;
  /** The faucet's URL (loopback): POST {chain, address, amount} mints test stablecoin. */
  readonly faucetUrl: string;
  /** Mints `amount` (onchain units) of a chain's test stablecoin to `address`; resolves to the tx hash. */
  mint(chainId: string, address: string, amount: bigint): Promise<string>;
  /**
   * Gives `address` native currency for fees on a dev chain (the treasury pays every
   * settlement's gas): anvil's balance setter on EVM, a `requestAirdrop` of 100 SOL on Solana.
   */
  fundFees(chainId: string, address: string): Promise<void>;
  /**
   * Opens `owner`'s token account for a Solana dev chain's test mint (an x402 `exact` payment
   * transfers into the treasury's and cannot open it); nothing on an EVM chain.
   */
  openTokenAccount(chainId: string, owner: string): Promise<void>;
  /** The chains that run locally (a chain whose dev chain is missing is disabled and not run). */
  readonly running: ReadonlySet<string>;
  close(): Promise<void>;
}

/** How to start the dev chains. */
export interface DevChainsOptions {
  /** Keeps the chains' state here across restarts and writes {@link DEV_CHAINS_FILE}; none when absent. */
  readonly dataDir?: string;
  readonly host?: string;
  readonly log?: (line: string) => void;
}

/**
 * Starts a local chain for every chain of the registry: one anvil per EVM chain (its EIP-155
 * id, the test stablecoin at a fixed address, a block a second) and a Solana dev chain over
 * litesvm per Solana chain (loaded only when the registry has one: litesvm is a native module).
 * Serves a loopback faucet and, with a data directory, records everything in
 * {@link DEV_CHAINS_FILE}. Nothing here contacts anything but loopback.
 */
export async function startDevChains(
  registry: ChainRegistry,
  options: DevChainsOptions = {},
): Promise<DevChains> {
  const host = options.host ?? "127.0.0.1";
  const stateDir = options.dataDir === undefined ? undefined : join(options.dataDir, "dev-chains");
  if (stateDir !== undefined) mkdirSync(stateDir, { recursive: true });
  const evmChains = registry.chains.filter((c) => c.family === "evm");
  const evm = await startEvmDevChains(
    evmChains.map((c) => ({
      id: c.id,
      chainId: c.chainId!,
      host,
      blockTimeSeconds: DEV_BLOCK_SECONDS,
      statePath: stateDir === undefined ? undefined : join(stateDir, `${c.id}.json`),
    })),
  );
  const evmById = new Map<string, EvmDevChain>(evm.map((d) => [d.id, d]));
  const solana = new Map<string, SolanaDevChain>();
  const closeAll = async () => {
    await Promise.all([...evm.map((d) => d.close()), ...[...solana.values()].map((s) => s.close())]);
  };
  const chains: ChainConfig[] = [];
  try {
    for (const chain of registry.chains) {
      const dev = evmById.get(chain.id);
      if (dev !== undefined) {
        chains.push({
          ...chain,
          rpcUrl: dev.rpcUrl,
          asset: { ...chain.asset, decimals: 6, address: dev.token },
          finality: { confirmations: DEV_CONFIRMATIONS },
        });
        continue;
      }
      const { startSolanaDevChain } = await import("./solana/dev-chain.js");
      const started = await startSolanaDevChain({
        host,
        decimals: chain.asset.decimals,
        statePath: stateDir === undefined ? undefined : join(stateDir, `${chain.id}.json`),
      });
      solana.set(chain.id, started);
      chains.push({
        ...chain,
        // The dev SVM is no public cluster, and never calls itself mainnet: it takes devnet's
        // CAIP-2 name (a test network, worth nothing), which x402's Solana client knows, as the
        // dev EVM chains keep their real chain ids.
        network: DEV_SOLANA_NETWORK,
        rpcUrl: started.rpcUrl,
        asset: { ...chain.asset, address: started.mint },
        finality: { commitment: "confirmed" },
      });
    }
  } catch (error) {
    await closeAll();
    throw error;
  }
  let defaultChain = registry.defaultChain;
  if (!chains.find((c) => c.id === defaultChain)?.enabled) defaultChain = chains.find((c) => c.enabled)!.id;
  const devRegistry = chainRegistry(chains, defaultChain);

  const mint = async (chainId: string, address: string, amount: bigint): Promise<string> => {
    const dev = evmById.get(chainId);
    if (dev !== undefined) return dev.mintTo(address, amount);
    const sol = solana.get(chainId);
    if (sol !== undefined) return sol.mintTo(address, amount);
    throw new Error(`no dev chain ${JSON.stringify(chainId)}`);
  };
  const faucet = await startFaucet(host, mint);
  const faucetUrl = `http://${host}:${(faucet.address() as AddressInfo).port}`;
  if (options.dataDir !== undefined) {
    writeFileSync(
      join(options.dataDir, DEV_CHAINS_FILE),
      `${JSON.stringify({ faucet_url: faucetUrl, ...registryJson(devRegistry) }, null, 2)}\n`,
    );
  }
  return {
    registry: devRegistry,
    faucetUrl,
    mint,
    async fundFees(chainId, address) {
      const dev = evmById.get(chainId);
      if (dev !== undefined) return dev.fundGas(address);
      const sol = solana.get(chainId);
      if (sol !== undefined) await sol.airdrop(address, 100_000_000_000n);
    },
    async openTokenAccount(chainId, owner) {
      await solana.get(chainId)?.openTokenAccount(owner);
    },
    running: new Set([...evmById.keys(), ...solana.keys()]),
    async close() {
      // The file advertises running chains and their faucet: it goes when they go.
      if (options.dataDir !== undefined) rmSync(join(options.dataDir, DEV_CHAINS_FILE), { force: true });
      await new Promise<void>((resolve) => faucet.close(() => resolve()));
      await closeAll();
    },
  };
}

/** What the dev Solana chain is called in CAIP-2 (receipts, x402): Solana devnet's name. */
export const DEV_SOLANA_NETWORK = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";

/** A registry in TOLLGATE_CHAINS format. */
function registryJson(registry: ChainRegistry): Record<string, unknown> {
  return {
    default_chain: registry.defaultChain,
    chains: registry.chains.map((c) => ({
      id: c.id,
      family: c.family,
      ...(c.chainId === undefined ? {} : { chain_id: c.chainId }),
      ...(c.family === "solana" ? { network: c.network } : {}),
      asset: { ...c.asset },
      rpc_url: c.rpcUrl,
      finality: { ...c.finality },
      enabled: c.enabled,
      ...withdrawalTermsJson(c),
    })),
  };
}

function startFaucet(
  host: string,
  mint: (chain: string, address: string, amount: bigint) => Promise<string>,
): Promise<Server> {
  const server = createServer((req, res) => {
    const send = (status: number, body: Record<string, string>) => {
      res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
    };
    if (req.method !== "POST" || req.url !== "/mint") return send(404, { error: "POST /mint" });
    let text = "";
    req.setEncoding("utf8");
    req.on("data", (chunk: string) => {
      text += chunk;
    });
    req.on("end", () => {
      let chain: string;
      let address: string;
      let amount: bigint;
      try {
        const body = JSON.parse(text) as { chain?: unknown; address?: unknown; amount?: unknown };
        if (
          typeof body.chain !== "string" ||
          typeof body.address !== "string" ||
          typeof body.amount !== "string"
        ) {
          throw new Error("expected {chain, address, amount} strings");
        }
        if (!/^[1-9]\d{0,30}$/.test(body.amount)) throw new Error("amount must be a positive whole number");
        ({ chain, address } = body as { chain: string; address: string });
        amount = BigInt(body.amount);
      } catch (error) {
        return send(400, { error: (error as Error).message });
      }
      mint(chain, address, amount).then(
        (txHash) => send(200, { tx_hash: txHash }),
        (error: unknown) =>
          send(400, { error: error instanceof Error ? error.message.split("\n")[0]! : String(error) }),
      );
    });
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, host, () => resolve(server));
  });
}
