import { type ChildProcess, spawn } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import {
  type Address,
  createTestClient,
  createWalletClient,
  getAddress,
  getContractAddress,
  type Hash,
  http,
  keccak256,
  parseEther,
  publicActions,
  stringToHex,
} from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { testStablecoinAbi, testStablecoinBytecode } from "./test-stablecoin-artifact.js";
import { installX402Contracts } from "./x402-contracts.js";

/**
 * The dev chains' deployer: a fixed, public, dev-only key (never holds real value). Deploying the
 * test stablecoin as its first transaction puts the token at the same address on every dev chain
 * and across restarts.
 */
const DEPLOYER = privateKeyToAccount(keccak256(stringToHex("tollgate/dev-chains/deployer")));

/** Where the test stablecoin lives on every dev EVM chain (the deployer's nonce-0 CREATE address). */
export const DEV_TOKEN_ADDRESS: Address = getContractAddress({ from: DEPLOYER.address, nonce: 0n });

/** One local anvil chain with the test stablecoin, Permit2 and x402's proxies deployed. */
export interface EvmDevChain {
  /** The registry chain id it stands in for. */
  readonly id: string;
  /** Its EIP-155 chain id (the registry's). */
  readonly chainId: number;
  readonly rpcUrl: string;
  /** The test stablecoin (6 decimals, EIP-2612, EIP-3009). */
  readonly token: Address;
  /** Mints test stablecoin to `to` (the faucet); under automine, returns once the block is mined. */
  mintTo(to: string, amount: bigint): Promise<Hash>;
  /** Sets an address's native balance, so it can pay gas (the treasury). */
  fundGas(address: string, wei?: bigint): Promise<void>;
  /** Mines `blocks` empty-or-pending blocks (confirmation depth in tests). */
  mine(blocks?: number): Promise<void>;
  /** Switches automatic mining on or off (off: transactions wait for {@link mine}). */
  setAutomine(on: boolean): Promise<void>;
  /** Takes an `evm_snapshot`; {@link revert} to it simulates a reorg. */
  snapshot(): Promise<Hash>;
  revert(snapshotId: Hash): Promise<void>;
  /** Stops anvil (writing its state file, if it has one). */
  close(): Promise<void>;
}

/** How to start one dev EVM chain. */
export interface EvmDevChainOptions {
  readonly id: string;
  readonly chainId: number;
  readonly host?: string;
  /** 0 (the default) picks a free port. */
  readonly port?: number;
  /** Keep the chain's state in this file across restarts (anvil `--state`). */
  readonly statePath?: string;
  /** Start with automatic mining off (`--no-mining`); tests mine by hand. */
  readonly manualMining?: boolean;
  /** Mine a block this often (`--block-time`) instead of one per transaction. */
  readonly blockTimeSeconds?: number;
}

/** Starts one anvil per chain (in parallel), each with the test stablecoin deployed. */
export async function startEvmDevChains(chains: readonly EvmDevChainOptions[]): Promise<EvmDevChain[]> {
  const started = await Promise.allSettled(chains.map((c) => startEvmDevChain(c)));
  const failed = started.find((r) => r.status === "rejected");
  if (failed !== undefined) {
    await Promise.all(started.map((r) => (r.status === "fulfilled" ? r.value.close() : undefined)));
    throw (failed as PromiseRejectedResult).reason;
  }
  return started.map((r) => (r as PromiseFulfilledResult<EvmDevChain>).value);
}

/**
 * Starts anvil (the binary inside the `@foundry-rs/anvil` npm package) on loopback with the
 * registry chain's EIP-155 id, and deploys the test stablecoin at {@link DEV_TOKEN_ADDRESS}
 * unless its state file already has it.
 */
export async function startEvmDevChain(options: EvmDevChainOptions): Promise<EvmDevChain> {
  const host = options.host ?? "127.0.0.1";
  const args = [
    "--host",
    host,
    "--port",
    String(options.port ?? 0),
    "--chain-id",
    String(options.chainId),
    // No prefunded dev accounts: everything that needs gas is funded by name.
    "--accounts",
    "0",
  ];
  if (options.statePath !== undefined) args.push("--state", options.statePath, "--state-interval", "5");
  if (options.manualMining === true) args.push("--no-mining");
  else if (options.blockTimeSeconds !== undefined)
    args.push("--block-time", String(options.blockTimeSeconds));
  // anvil runs under a tiny shell that stops it when our end of its stdin closes — on close(),
  // and also when this process dies without cleaning up (kill -9), so no anvil is ever orphaned.
  const child = spawn(
    "/bin/sh",
    [
      "-c",
      'anvil="$1"; shift; "$anvil" "$@" <&- & pid=$!; read _; kill $pid; wait $pid',
      "sh",
      anvilBinary(),
      ...args,
    ],
    {
      stdio: ["pipe", "pipe", "pipe"],
    },
  );
  let rpcUrl: string;
  try {
    rpcUrl = await listening(child);
  } catch (error) {
    child.kill("SIGKILL");
    throw error;
  }
  const test = createTestClient({ mode: "anvil", transport: http(rpcUrl) }).extend(publicActions);
  const deployer = createWalletClient({ account: DEPLOYER, transport: http(rpcUrl) });
  const chain = {
    id: options.chainId,
    name: options.id,
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
  };
  const close = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    // Closing stdin makes the shell SIGTERM anvil (which writes its state file) and wait for it.
    child.stdin?.end();
    const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
    await exited;
    clearTimeout(timer);
  };
  try {
    const code = await test.getCode({ address: DEV_TOKEN_ADDRESS });
    if (code === undefined || code === "0x") {
      await test.setBalance({ address: DEPLOYER.address, value: parseEther("1000") });
      const hash = await deployer.deployContract({
        abi: testStablecoinAbi,
        bytecode: testStablecoinBytecode,
        args: ["Test USD", "TUSD"],
        chain,
      });
      if (options.manualMining === true || options.blockTimeSeconds !== undefined)
        await test.mine({ blocks: 1 });
      const receipt = await test.waitForTransactionReceipt({ hash, pollingInterval: 20 });
      if (
        receipt.contractAddress === null ||
        receipt.contractAddress === undefined ||
        getAddress(receipt.contractAddress) !== DEV_TOKEN_ADDRESS
      ) {
        throw new Error(`test stablecoin landed at ${receipt.contractAddress}, not ${DEV_TOKEN_ADDRESS}`);
      }
    }
    // What x402 payments need onchain: Permit2 and x402's proxies (src/dev/chains/evm/x402-contracts.ts).
    await installX402Contracts({
      chainId: options.chainId,
      getCode: (address) => test.getCode({ address }),
      setCode: (address, bytecode) => test.setCode({ address, bytecode }),
      async send(to, data) {
        await test.setBalance({ address: DEPLOYER.address, value: parseEther("1000") });
        const hash = await deployer.sendTransaction({ to, data, chain });
        if (options.manualMining === true || options.blockTimeSeconds !== undefined)
          await test.mine({ blocks: 1 });
        const receipt = await test.waitForTransactionReceipt({ hash, pollingInterval: 20 });
        if (receipt.status !== "success") throw new Error(`deploying to ${to} reverted`);
      },
      readContract: (address, abi, functionName) =>
        test.readContract({ address, abi, functionName } as Parameters<typeof test.readContract>[0]),
    });
  } catch (error) {
    await close();
    throw error;
  }
  // With one block per transaction, anvil mines a sent transaction asynchronously: a mint waits
  // for its block so the chain's head has moved when it returns (a test reading the head next saw
  // the old one, then the new one). Under manual or timed mining the caller mines.
  let automining = options.manualMining !== true && options.blockTimeSeconds === undefined;
  return {
    id: options.id,
    chainId: options.chainId,
    rpcUrl,
    token: DEV_TOKEN_ADDRESS,
    async mintTo(to, amount) {
      await test.setBalance({ address: DEPLOYER.address, value: parseEther("1000") });
      const hash = await deployer.writeContract({
        address: DEV_TOKEN_ADDRESS,
        abi: testStablecoinAbi,
        functionName: "mint",
        args: [getAddress(to), amount],
        chain,
      });
      if (automining) await test.waitForTransactionReceipt({ hash, pollingInterval: 20 });
      return hash;
    },
    async fundGas(address, wei = parseEther("1000")) {
      await test.setBalance({ address: getAddress(address), value: wei });
    },
    async mine(blocks = 1) {
      await test.mine({ blocks });
    },
    async setAutomine(on) {
      await test.setAutomine(on);
      automining = on && options.blockTimeSeconds === undefined;
    },
    snapshot: () => test.snapshot(),
    async revert(id) {
      await test.revert({ id });
    },
    close,
  };
}

/** The anvil binary shipped in this platform's `@foundry-rs/anvil-<os>-<arch>` package. */
export function anvilBinary(): string {
  const arch = process.arch === "x64" ? "amd64" : process.arch;
  const os = process.platform === "win32" ? "win32" : process.platform;
  const pkg = `@foundry-rs/anvil-${os}-${arch}`;
  const require = createRequire(import.meta.url);
  let dir: string;
  try {
    dir = dirname(require.resolve(`${pkg}/package.json`));
  } catch {
    throw new Error(`anvil is not installed for ${process.platform}/${process.arch} (npm package ${pkg})`);
  }
  return join(dir, "bin", process.platform === "win32" ? "anvil.exe" : "anvil");
}

function listening(child: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(
      () => reject(new Error(`anvil did not start in time: ${out.slice(-500)}`)),
      15_000,
    );
    const onData = (chunk: Buffer) => {
      out += chunk.toString();
      const match = /Listening on ([0-9.:a-zA-Z[\]]+)/.exec(out);
      if (match !== null) {
        clearTimeout(timer);
        child.stdout?.off("data", onData);
        // Keep draining so a chatty anvil never blocks on a full pipe.
        child.stdout?.resume();
        resolve(`http://${match[1]}`);
      }
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", (chunk: Buffer) => {
      out += chunk.toString();
    });
    child.once("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`anvil exited with ${code}: ${out.slice(-500)}`));
    });
  });
}
