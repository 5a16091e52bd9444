/**
 * What paying with x402 costs a caller per call, against a keyed call of the same request, on
 * `tollgate dev` and its dev chains (anvil mines each transaction at once, so the figures are the
 * gateway's and x402's own work plus one local RPC round trip per step — on a real L2 add the
 * block time to every collection). Calls run one at a time, each timed from the first request
 * to the last byte: keyed non-streaming; x402 `upto` non-streaming (402, sign, retry, verify,
 * call, collect, PAYMENT-RESPONSE); x402 `upto` streaming (collected after the stream ends, so
 * not in its time); x402 `exact` image (collected before the image is handed over) beside a
 * keyed image.
 *
 * Usage: node dist/bench/x402-call.js [CALLS]   (needs `npm run build`: it starts dist/src/cli/main.js)
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { x402Client } from "@x402/core/client";
import type { Network } from "@x402/core/types";
import { toClientEvmSigner } from "@x402/evm";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { UptoEvmScheme } from "@x402/evm/upto/client";
import { wrapFetchWithPayment } from "@x402/fetch";
import {
  createPublicClient,
  createTestClient,
  createWalletClient,
  getAddress,
  http,
  maxUint256,
  parseAbi,
  parseEther,
} from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { readDevChainsFile, requestFaucet } from "../src/dev/chains/dev-chains-file.js";
import { PERMIT2_ADDRESS } from "../src/dev/chains/evm/x402-contracts.js";

const CLI = join(import.meta.dirname, "../src/cli/main.js");
const NETWORK = "eip155:8453" as Network;
const BALANCE_OF = parseAbi(["function balanceOf(address) view returns (uint256)"]);

async function main(calls: number): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "tollgate-x402-bench-"));
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TOLLGATE_DATA_DIR: dataDir,
    TOLLGATE_PORT: "0",
    TOLLGATE_CORE_PORT: "0",
    TOLLGATE_DEV_CHAINS: "on",
  };
  const child = spawn(process.execPath, [CLI, "dev"], { env: { ...env, TOLLGATE_METRICS_PORT: "off" } });
  try {
    const facade = await new Promise<string>((resolve, reject) => {
      let out = "";
      child.stdout.on("data", (chunk) => {
        out += chunk;
        const match = /tollgate ready: facade (\S+)/.exec(out);
        if (match) resolve(match[1]!);
      });
      child.on("exit", (code) => reject(new Error(`gateway exited with ${code}`)));
    });
    const cli = async (args: string[]) =>
      await new Promise<string>((resolve) => {
        const run = spawn(process.execPath, [CLI, ...args, "--json"], { env });
        let out = "";
        run.stdout.on("data", (chunk) => {
          out += chunk;
        });
        run.on("exit", () => resolve(out));
      });
    const account = JSON.parse(await cli(["account", "create"])) as { id: string };
    const key = JSON.parse(await cli(["key", "create", "--account", account.id])) as { secret: string };
    await cli(["credit", "--account", account.id, "--chain", "base", "--amount", "100", "--reason", "bench"]);
    const dev = readDevChainsFile(dataDir)!;
    const chain = dev.registry.byId.get("base")!;
    const payer = privateKeyToAccount(generatePrivateKey());
    await requestFaucet(dev.faucetUrl, "base", payer.address, 100_000_000n);
    const rpc = createPublicClient({ transport: http(chain.rpcUrl) });
    const token = getAddress(chain.asset.address);
    // The mint lands with the dev chain's next block.
    while (
      (await rpc.readContract({
        address: token,
        abi: BALANCE_OF,
        functionName: "balanceOf",
        args: [payer.address],
      })) === 0n
    ) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    // A payer making calls back to back approves Permit2 once (docs/x402.md): without it each
    // upto payment carries an EIP-2612 permit whose nonce races the previous stream's collection.
    await createTestClient({ mode: "anvil", transport: http(chain.rpcUrl) }).setBalance({
      address: payer.address,
      value: parseEther("1"),
    });
    const approval = await createWalletClient({
      account: payer,
      transport: http(chain.rpcUrl),
    }).writeContract({
      chain: null,
      address: token,
      abi: parseAbi(["function approve(address, uint256) returns (bool)"]),
      functionName: "approve",
      args: [PERMIT2_ADDRESS, maxUint256],
    });
    await rpc.waitForTransactionReceipt({ hash: approval, pollingInterval: 100 });
    const signer = toClientEvmSigner(payer, rpc);
    const client = new x402Client()
      .register(NETWORK, new ExactEvmScheme(signer))
      .register(NETWORK, new UptoEvmScheme(signer, { rpcUrl: chain.rpcUrl }))
      .setSpendControls({ allowedAssets: [{ network: NETWORK, asset: getAddress(chain.asset.address) }] });
    const paid = wrapFetchWithPayment(fetch, client);
    const text = (stream: boolean) =>
      JSON.stringify({
        model: "claude-haiku-4-5",
        max_tokens: 64,
        stream,
        messages: [{ role: "user", content: "hi" }],
      });
    const image = JSON.stringify({ model: "image-2", prompt: "a harbour" });
    const keyed = { "content-type": "application/json", "x-api-key": key.secret };
    const plain = { "content-type": "application/json" };
    const cases: [string, () => Promise<Response>][] = [
      [
        "keyed text",
        () => fetch(`${facade}/v1/messages`, { method: "POST", headers: keyed, body: text(false) }),
      ],
      [
        "x402 upto text",
        () => paid(`${facade}/v1/messages`, { method: "POST", headers: plain, body: text(false) }),
      ],
      [
        "keyed stream",
        () => fetch(`${facade}/v1/messages`, { method: "POST", headers: keyed, body: text(true) }),
      ],
      [
        "x402 upto stream",
        () => paid(`${facade}/v1/messages`, { method: "POST", headers: plain, body: text(true) }),
      ],
      [
        "keyed image",
        () => fetch(`${facade}/v1/images/generations`, { method: "POST", headers: keyed, body: image }),
      ],
      [
        "x402 exact image",
        () => paid(`${facade}/v1/images/generations`, { method: "POST", headers: plain, body: image }),
      ],
    ];
    for (const [name, call] of cases) {
      const times: number[] = [];
      for (let i = 0; i < calls + 3; i++) {
        const start = performance.now();
        const response = await call();
        if (response.status === 200) await response.arrayBuffer();
        if (response.status !== 200) throw new Error(`${name}: ${response.status} ${await response.text()}`);
        if (i >= 3) times.push(performance.now() - start);
      }
      times.sort((a, b) => a - b);
      const at = (q: number) => times[Math.min(times.length - 1, Math.floor(q * times.length))]!.toFixed(1);
      console.log(`${name.padEnd(18)} p50 ${at(0.5)} ms  p90 ${at(0.9)} ms  (${calls} calls, one at a time)`);
    }
  } finally {
    child.kill("SIGTERM");
    await new Promise((resolve) => child.once("exit", resolve));
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main(Number(process.argv[2] ?? "40"));
