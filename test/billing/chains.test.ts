import { ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { parseChainRegistry } from "../../src/core/billing/chain-registry.js";
import { selectChain } from "../../src/core/billing/chain-selection.js";
import { defaultChainRegistry } from "../../src/core/billing/default-chains.js";
import { errorInfo } from "../../src/core/errors.js";
import { chainsJson } from "./fixtures.js";

function failure(fn: () => unknown): ConnectError {
  try {
    fn();
  } catch (error) {
    if (error instanceof ConnectError) return error;
    throw error;
  }
  throw new Error("expected a ConnectError");
}

describe("chain registry", () => {
  it("ships base, arbitrum, robinhood (EVM) and solana, all 6-decimal dollars", () => {
    const registry = defaultChainRegistry();
    expect(registry.chains.map((c) => [c.id, c.family, c.asset.decimals, c.enabled])).toEqual([
      ["base", "evm", 6, true],
      ["arbitrum", "evm", 6, true],
      ["robinhood", "evm", 6, true],
      ["solana", "solana", 6, true],
    ]);
    expect(registry.byId.get("solana")!.finality).toEqual({ commitment: "finalized" });
    expect(registry.byId.get("base")!.finality).toEqual({ confirmations: 20 });
    expect(registry.defaultChain).toBe("base");
  });

  it("lets operators rename, re-point, disable, and use any decimals", () => {
    const json = chainsJson();
    json.chains[0] = { ...json.chains[0], id: "base-sepolia", rpc_url: "https://sepolia.base.org" };
    json.chains[1] = { ...json.chains[1], enabled: false };
    json.chains[2] = {
      ...json.chains[2],
      asset: { symbol: "DAI", decimals: 18, address: "0x50c5725949A6F0c72E6C4a641F24049A917DB0Cb" },
    };
    json.default_chain = "base-sepolia";
    const registry = parseChainRegistry(json);
    expect(registry.byId.get("base-sepolia")!.rpcUrl).toBe("https://sepolia.base.org");
    expect(registry.byId.get("arbitrum")!.enabled).toBe(false);
    expect(registry.byId.get("robinhood")!.asset.decimals).toBe(18);
  });

  it("names each chain as CAIP-2 does: eip155 by its chain id, Solana by its genesis (mainnet's unless set)", () => {
    const shipped = defaultChainRegistry();
    expect(shipped.chains.map((c) => c.network)).toEqual([
      "eip155:8453",
      "eip155:42161",
      "eip155:4663",
      "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp",
    ]);
    const json = chainsJson();
    (json.chains[3] as Record<string, unknown>).network = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";
    (json.chains[0] as Record<string, unknown>).network = "eip155:8453";
    const registry = parseChainRegistry(json);
    expect(registry.byId.get("solana")!.network).toBe("solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1");
    expect(registry.byId.get("base")!.network).toBe("eip155:8453");
  });

  it.each([
    [
      (j: ReturnType<typeof chainsJson>) => (j.default_chain = "nowhere"),
      /default_chain "nowhere" is not a configured chain/,
    ],
    [
      (j: ReturnType<typeof chainsJson>) => (j.chains[0]!.enabled = false),
      /default_chain "base" is disabled/,
    ],
    [(j: ReturnType<typeof chainsJson>) => (j.chains[1]!.id = "base"), /appears twice/],
    [(j: ReturnType<typeof chainsJson>) => (j.chains[1]!.id = "auto"), /chains\[1\]\.id/],
    [(j: ReturnType<typeof chainsJson>) => (j.chains[1]!.family = "bitcoin"), /chains\[1\]\.family/],
    [
      (j: ReturnType<typeof chainsJson>) => (j.chains[1]!.rpc_url = "nope"),
      /chains\[1\]\.rpc_url is not a URL/,
    ],
    [
      (j: ReturnType<typeof chainsJson>) => (j.chains[3]!.finality = { confirmations: 3 }),
      /unknown field "confirmations"/,
    ],
    [
      (j: ReturnType<typeof chainsJson>) =>
        (j.chains[0]!.asset = {
          symbol: "USDC",
          decimals: 19,
          address: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
        }),
      /decimals must be a whole number between 0 and 18/,
    ],
    [
      (j: ReturnType<typeof chainsJson>) =>
        (j.chains[3]!.asset = {
          symbol: "USDC",
          decimals: 6,
          address: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
        }),
      /chains\[3\]\.asset\.address is not a valid base58 mint/,
    ],
    [
      (j: ReturnType<typeof chainsJson>) => ((j.chains[0] as Record<string, unknown>).network = "eip155:1"),
      /chains\[0\]\.network must be "eip155:8453" \(its chain_id\), or be left out/,
    ],
    [
      (j: ReturnType<typeof chainsJson>) =>
        ((j.chains[3] as Record<string, unknown>).network = "solana mainnet"),
      /chains\[3\]\.network must be a CAIP-2 chain id/,
    ],
  ])("refuses a broken registry (%#)", (mutate, message) => {
    const json = chainsJson();
    mutate(json);
    expect(() => parseChainRegistry(json)).toThrow(message);
  });
});

describe("billing chain selection", () => {
  const registry = (() => {
    const json = chainsJson();
    json.chains[1] = { ...json.chains[1], enabled: false };
    return parseChainRegistry(json);
  })();

  it("auto, empty or absent bills the account's default, else the registry's", () => {
    for (const header of [undefined, "", "auto", " AUTO "]) {
      expect(selectChain(registry, header, undefined).id).toBe("base");
      expect(selectChain(registry, header, "solana").id).toBe("solana");
    }
  });

  it("an explicit enabled chain is used as named, whatever the default", () => {
    expect(selectChain(registry, "robinhood", "solana").id).toBe("robinhood");
    expect(selectChain(registry, "Solana", "base").id).toBe("solana");
  });

  it("an unknown or disabled chain is InvalidArgument naming the allowed values", () => {
    for (const header of ["ethereum", "arbitrum"]) {
      const error = failure(() => selectChain(registry, header, "base"));
      expect(errorInfo(error)).toMatchObject({
        reason: "CHAIN_UNKNOWN",
        metadata: { field: "x-gateway-billing-chain", value: header, allowed: "auto,base,robinhood,solana" },
      });
      expect(error.rawMessage).toContain("auto, base, robinhood, solana");
    }
  });

  it("a default chain the operator has since disabled fails instead of switching", () => {
    const error = failure(() => selectChain(registry, "auto", "arbitrum"));
    expect(errorInfo(error)).toMatchObject({
      reason: "DEFAULT_CHAIN_UNAVAILABLE",
      metadata: { chain: "arbitrum" },
    });
  });
});
