import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { type ChainRegistry, parseChainRegistry } from "../../core/billing/chain-registry.js";

// What other processes need to know about running dev chains, without loading the chain
// libraries (the CLI starts fast when it does not touch a chain).

/**
 * The master secret of dev mode: a fixed, PUBLIC value (anyone can re-derive every key from it),
 * so dev deposit addresses stay the same across restarts. Never use it with real money: outside
 * dev mode the gateway refuses to start without TOLLGATE_MASTER_SECRET.
 */
export const DEV_MASTER_SECRET: Uint8Array = new Uint8Array(
  createHash("sha256")
    .update("tollgate DEV master secret - public, dev chains only, never real money")
    .digest(),
);

/** The file, in the data directory, describing running dev chains (a TOLLGATE_CHAINS file plus the faucet URL). */
export const DEV_CHAINS_FILE = "dev-chains.json";

/** The dev chains described by `dataDir`'s {@link DEV_CHAINS_FILE}, if one is there. */
export function readDevChainsFile(
  dataDir: string,
): { registry: ChainRegistry; faucetUrl: string } | undefined {
  const path = join(dataDir, DEV_CHAINS_FILE);
  if (!existsSync(path)) return undefined;
  const { faucet_url: faucetUrl, ...rest } = JSON.parse(readFileSync(path, "utf8")) as Record<
    string,
    unknown
  >;
  return { registry: parseChainRegistry(rest), faucetUrl: String(faucetUrl) };
}

/** Asks a running dev chains' faucet to mint; resolves to the transaction hash or signature. */
export async function requestFaucet(
  faucetUrl: string,
  chain: string,
  address: string,
  amount: bigint,
): Promise<string> {
  let response: Response;
  try {
    response = await fetch(`${faucetUrl}/mint`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ chain, address, amount: amount.toString() }),
    });
  } catch {
    throw new Error(
      `the dev chains' faucet at ${faucetUrl} does not answer: is \`tollgate serve\` (dev mode) or \`tollgate dev-chains\` running on this data directory?`,
    );
  }
  const body = (await response.json()) as { tx_hash?: string; error?: string };
  if (!response.ok || body.tx_hash === undefined)
    throw new Error(`faucet: ${body.error ?? response.statusText}`);
  return body.tx_hash;
}
