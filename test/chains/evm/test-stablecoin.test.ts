import { randomBytes } from "node:crypto";
import {
  createPublicClient,
  createWalletClient,
  type Hex,
  http,
  maxUint256,
  parseEther,
  parseSignature,
  publicActions,
} from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type EvmDevChain, startEvmDevChain } from "../../../src/dev/chains/evm/dev-chain.js";
import { testStablecoinAbi } from "../../../src/dev/chains/evm/test-stablecoin-artifact.js";

// The dev chains' token is the real thing for the standards it claims: ERC-20 with 6 decimals,
// EIP-2612 permit and EIP-3009 authorisations, checked on anvil with viem's signers.

describe("test stablecoin on anvil", () => {
  let dev: EvmDevChain;
  const owner = privateKeyToAccount(`0x${randomBytes(32).toString("hex")}`);
  const spender = privateKeyToAccount(`0x${randomBytes(32).toString("hex")}`);
  const read = () => createPublicClient({ transport: http(dev.rpcUrl) });
  const chain = () => ({
    id: dev.chainId,
    name: "dev",
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    rpcUrls: { default: { http: [dev.rpcUrl] } },
  });
  const domain = () => ({
    name: "Test USD",
    version: "2",
    chainId: dev.chainId,
    verifyingContract: dev.token,
  });

  beforeAll(async () => {
    dev = await startEvmDevChain({ id: "arbitrum", chainId: 42161 });
    await dev.fundGas(spender.address, parseEther("1"));
    await dev.mintTo(owner.address, 5_000_000n);
  });
  afterAll(async () => {
    await dev?.close();
  });

  it("has 6 decimals and the EIP-712 domain it signs with", async () => {
    const c = read();
    expect(
      await c.readContract({ address: dev.token, abi: testStablecoinAbi, functionName: "decimals" }),
    ).toBe(6);
    expect(
      await c.readContract({ address: dev.token, abi: testStablecoinAbi, functionName: "version" }),
    ).toBe("2");
  });

  it("EIP-2612: a signed permit sets an allowance the spender can use; a replay is refused", async () => {
    const c = read();
    const nonce = await c.readContract({
      address: dev.token,
      abi: testStablecoinAbi,
      functionName: "nonces",
      args: [owner.address],
    });
    const deadline = maxUint256;
    const signature = await owner.signTypedData({
      domain: domain(),
      types: {
        Permit: [
          { name: "owner", type: "address" },
          { name: "spender", type: "address" },
          { name: "value", type: "uint256" },
          { name: "nonce", type: "uint256" },
          { name: "deadline", type: "uint256" },
        ],
      },
      primaryType: "Permit",
      message: { owner: owner.address, spender: spender.address, value: 1_500_000n, nonce, deadline },
    });
    const { r, s, v } = parseSignature(signature);
    const wallet = createWalletClient({
      account: spender,
      chain: chain(),
      transport: http(dev.rpcUrl),
    }).extend(publicActions);
    const args = [owner.address, spender.address, 1_500_000n, deadline, Number(v), r, s] as const;
    const hash = await wallet.writeContract({
      address: dev.token,
      abi: testStablecoinAbi,
      functionName: "permit",
      args,
    });
    expect((await wallet.waitForTransactionReceipt({ hash, pollingInterval: 20 })).status).toBe("success");
    expect(
      await c.readContract({
        address: dev.token,
        abi: testStablecoinAbi,
        functionName: "allowance",
        args: [owner.address, spender.address],
      }),
    ).toBe(1_500_000n);
    await expect(
      wallet.simulateContract({ address: dev.token, abi: testStablecoinAbi, functionName: "permit", args }),
    ).rejects.toThrow(/invalid signature/);
    const pull = await wallet.writeContract({
      address: dev.token,
      abi: testStablecoinAbi,
      functionName: "transferFrom",
      args: [owner.address, spender.address, 1_500_000n],
    });
    await wallet.waitForTransactionReceipt({ hash: pull, pollingInterval: 20 });
    expect(
      await c.readContract({
        address: dev.token,
        abi: testStablecoinAbi,
        functionName: "balanceOf",
        args: [spender.address],
      }),
    ).toBe(1_500_000n);
  });

  it("EIP-3009: receiveWithAuthorization only by the payee; cancelAuthorization spends the nonce", async () => {
    const c = read();
    const nonce = `0x${randomBytes(32).toString("hex")}` as Hex;
    const message = {
      from: owner.address,
      to: spender.address,
      value: 10n,
      validAfter: 0n,
      validBefore: maxUint256,
      nonce,
    };
    const signature = await owner.signTypedData({
      domain: domain(),
      types: {
        ReceiveWithAuthorization: [
          { name: "from", type: "address" },
          { name: "to", type: "address" },
          { name: "value", type: "uint256" },
          { name: "validAfter", type: "uint256" },
          { name: "validBefore", type: "uint256" },
          { name: "nonce", type: "bytes32" },
        ],
      },
      primaryType: "ReceiveWithAuthorization",
      message,
    });
    const { r, s, v } = parseSignature(signature);
    const args = [owner.address, spender.address, 10n, 0n, maxUint256, nonce, Number(v), r, s] as const;
    await expect(
      c.simulateContract({
        account: owner.address,
        address: dev.token,
        abi: testStablecoinAbi,
        functionName: "receiveWithAuthorization",
        args,
      }),
    ).rejects.toThrow(/caller must be the payee/);
    const wallet = createWalletClient({
      account: spender,
      chain: chain(),
      transport: http(dev.rpcUrl),
    }).extend(publicActions);
    const hash = await wallet.writeContract({
      address: dev.token,
      abi: testStablecoinAbi,
      functionName: "receiveWithAuthorization",
      args,
    });
    expect((await wallet.waitForTransactionReceipt({ hash, pollingInterval: 20 })).status).toBe("success");
    expect(
      await c.readContract({
        address: dev.token,
        abi: testStablecoinAbi,
        functionName: "authorizationState",
        args: [owner.address, nonce],
      }),
    ).toBe(true);

    const other = `0x${randomBytes(32).toString("hex")}` as Hex;
    const cancel = parseSignature(
      await owner.signTypedData({
        domain: domain(),
        types: {
          CancelAuthorization: [
            { name: "authorizer", type: "address" },
            { name: "nonce", type: "bytes32" },
          ],
        },
        primaryType: "CancelAuthorization",
        message: { authorizer: owner.address, nonce: other },
      }),
    );
    const cancelHash = await wallet.writeContract({
      address: dev.token,
      abi: testStablecoinAbi,
      functionName: "cancelAuthorization",
      args: [owner.address, other, Number(cancel.v), cancel.r, cancel.s],
    });
    await wallet.waitForTransactionReceipt({ hash: cancelHash, pollingInterval: 20 });
    expect(
      await c.readContract({
        address: dev.token,
        abi: testStablecoinAbi,
        functionName: "authorizationState",
        args: [owner.address, other],
      }),
    ).toBe(true);
  });
});
