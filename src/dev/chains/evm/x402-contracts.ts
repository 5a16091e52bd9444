/**
 * The contracts x402 payments need on an EVM chain, put on a dev chain: Permit2 and x402's two
 * Permit2 proxies, at the canonical addresses the `@x402/evm` package hard-codes. Without them an
 * `upto` settlement reports success with a real transaction hash while no tokens move.
 *
 * Provenance of x402-contracts-artifact.ts (no contract code ships in any npm package of x402, and
 * none ships Permit2's creation code):
 * - x402UptoPermit2Proxy: compiled with solc-js 0.8.28 (optimizer 200 runs, no CBOR metadata,
 *   evmVersion cancun; x402's foundry.toml) from coinbase/x402 `contracts/evm/src` and
 *   @openzeppelin/contracts 5.5.0. Deployed here through the CREATE2 deployer with x402's salt, it
 *   lands at the canonical address only if every byte is x402's: the deployment checks it.
 * - x402ExactPermit2Proxy: the init code x402 commits (`contracts/evm/script/data/`), checked the
 *   same way.
 * - Permit2: compiled with solc-js 0.8.17 (via-IR, 1,000,000 runs, no metadata hash) from the
 *   Permit2 sources in @uniswap/v4-periphery 1.0.3 (`lib/permit2/src`). Its canonical creation
 *   code is in no package, so its runtime code is placed with `anvil_setCode`, its two immutables
 *   (the chain id and the EIP-712 domain separator cached at construction) written for the dev
 *   chain; the deployment reads DOMAIN_SEPARATOR() back to check them.
 */
import {
  type Address,
  concat,
  encodeAbiParameters,
  getContractAddress,
  type Hex,
  keccak256,
  parseAbi,
  toHex,
} from "viem";
import {
  exactProxyInitCode,
  permit2Immutables,
  permit2Runtime,
  uptoProxyInitCode,
} from "./x402-contracts-artifact.js";

/** Uniswap's Permit2, at its address on every chain. */
export const PERMIT2_ADDRESS: Address = "0x000000000022D473030F116dDEE9F6B43aC78BA3";
/** x402's upto proxy (settles up to an authorised maximum through Permit2). */
export const UPTO_PROXY_ADDRESS: Address = "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002";
/** x402's exact proxy (a fixed amount through Permit2, for tokens without EIP-3009). */
export const EXACT_PROXY_ADDRESS: Address = "0x402085c248EeA27D92E8b30b2C58ed07f9E20001";
/** The deterministic CREATE2 deployer (Arachnid's), which anvil has from genesis. */
const CREATE2_DEPLOYER: Address = "0x4e59b44847b379578588920cA78FbF26c0B4956C";
const UPTO_SALT: Hex = "0x000000000000000000000000000000000000000000000000b000000001db633d";
const EXACT_SALT: Hex = "0x0000000000000000000000000000000000000000000000003000000007263b0e";

const PERMIT2_ABI = parseAbi(["function DOMAIN_SEPARATOR() view returns (bytes32)"]);
const PROXY_ABI = parseAbi(["function PERMIT2() view returns (address)"]);

/** What installing needs of the chain: anvil's test RPCs, one funded sender, and reads. */
export interface X402ChainAccess {
  readonly chainId: number;
  getCode(address: Address): Promise<Hex | undefined>;
  setCode(address: Address, bytecode: Hex): Promise<void>;
  /** Sends a transaction from a funded account and waits for its receipt. */
  send(to: Address, data: Hex): Promise<void>;
  readContract(
    address: Address,
    abi: typeof PERMIT2_ABI | typeof PROXY_ABI,
    functionName: string,
  ): Promise<unknown>;
}

/** Permit2's EIP-712 domain separator on `chainId` at its canonical address. */
export function permit2DomainSeparator(chainId: number): Hex {
  return keccak256(
    encodeAbiParameters(
      [{ type: "bytes32" }, { type: "bytes32" }, { type: "uint256" }, { type: "address" }],
      [
        keccak256(toHex("EIP712Domain(string name,uint256 chainId,address verifyingContract)")),
        keccak256(toHex("Permit2")),
        BigInt(chainId),
        PERMIT2_ADDRESS,
      ],
    ),
  );
}

/** Permit2's runtime code with its immutables written for `chainId`. */
export function permit2RuntimeFor(chainId: number): Hex {
  const write = (code: string, offset: number, word: Hex) =>
    code.slice(0, 2 + offset * 2) + word.slice(2) + code.slice(2 + (offset + 32) * 2);
  const withSeparator = write(
    permit2Runtime,
    permit2Immutables.domainSeparator,
    permit2DomainSeparator(chainId),
  );
  return write(withSeparator, permit2Immutables.chainId, toHex(BigInt(chainId), { size: 32 })) as Hex;
}

/**
 * Puts Permit2 and both proxies on the chain unless already there (a dev chain restarted from
 * its state file has them), and checks each: Permit2's domain separator, and each proxy at its
 * canonical address pointing at Permit2.
 */
export async function installX402Contracts(chain: X402ChainAccess): Promise<void> {
  if (!hasCode(await chain.getCode(PERMIT2_ADDRESS)))
    await chain.setCode(PERMIT2_ADDRESS, permit2RuntimeFor(chain.chainId));
  const separator = await chain.readContract(PERMIT2_ADDRESS, PERMIT2_ABI, "DOMAIN_SEPARATOR");
  if (separator !== permit2DomainSeparator(chain.chainId))
    throw new Error(`Permit2 on chain ${chain.chainId} has the domain separator ${separator}`);
  for (const [address, salt, initCode] of [
    [UPTO_PROXY_ADDRESS, UPTO_SALT, uptoProxyInitCode],
    [EXACT_PROXY_ADDRESS, EXACT_SALT, exactProxyInitCode],
  ] as const) {
    const expected = getContractAddress({
      opcode: "CREATE2",
      from: CREATE2_DEPLOYER,
      salt,
      bytecode: initCode,
    });
    if (expected !== address)
      throw new Error(`x402 proxy init code would land at ${expected}, not ${address}`);
    if (!hasCode(await chain.getCode(address))) await chain.send(CREATE2_DEPLOYER, concat([salt, initCode]));
    const permit2 = await chain.readContract(address, PROXY_ABI, "PERMIT2");
    if (permit2 !== PERMIT2_ADDRESS) throw new Error(`the x402 proxy at ${address} is not deployed`);
  }
}

function hasCode(code: Hex | undefined): boolean {
  return code !== undefined && code !== "0x";
}
