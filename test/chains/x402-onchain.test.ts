import { randomBytes } from "node:crypto";
import { generateKeyPairSigner } from "@solana/kit";
import { x402Client } from "@x402/core/client";
import { decodePaymentRequiredHeader, encodePaymentSignatureHeader } from "@x402/core/http";
import type { Network, PaymentPayload } from "@x402/core/types";
import { toClientEvmSigner } from "@x402/evm";
import { ExactEvmScheme as ExactClient } from "@x402/evm/exact/client";
import { UptoEvmScheme as UptoClient } from "@x402/evm/upto/client";
import { toClientSvmSigner } from "@x402/svm";
import { ExactSvmScheme as ExactSvmClient } from "@x402/svm/exact/client";
import {
  createPublicClient,
  createTestClient,
  createWalletClient,
  type Hex,
  http,
  parseSignature,
} from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { setUpX402, type X402Setup } from "../../src/chains/x402/facilitator.js";
import { createX402Onchain } from "../../src/chains/x402/onchain.js";
import { createPaymentSignatureCheck } from "../../src/chains/x402/payment-signature.js";
import { chainRegistry } from "../../src/core/billing/chain-registry.js";
import { silentLog } from "../../src/core/ports/log.js";
import type { X402Offer, X402PaymentPayload } from "../../src/core/ports/x402.js";
import { type EvmDevChain, startEvmDevChain } from "../../src/dev/chains/evm/dev-chain.js";
import { type SolanaDevChain, startSolanaDevChain } from "../../src/dev/chains/solana/dev-chain.js";
import { devChainConfig } from "../helpers/evm.js";
import { solanaChainConfig } from "./solana/fixtures.js";

// The chains' answer to "was this x402 payment collected?" (src/chains/x402/onchain.ts): what the
// recovery pass asks before it ends a payment whose collection was begun but never recorded. Real
// payments, signed by x402's clients and collected by the gateway's own facilitator on the dev
// chains: used (with the collecting transaction and what it moved), still usable, or unused for
// good (expired, cancelled, a blockhash gone), for EIP-3009, Permit2 and Solana. And the local
// check x402's door makes before it lets a keyless call send a large body: the payment is signed
// by the payer it names (src/chains/x402/payment-signature.ts).

const EVM = "eip155:8453";
const SOLANA = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";
/** Offers expire quickly here, so that an unused one can be seen expiring. */
const TIMEOUT_S = 60;

let evm: EvmDevChain;
let svm: SolanaDevChain;
let setup: X402Setup;
const payer = privateKeyToAccount(generatePrivateKey());

beforeAll(async () => {
  evm = await startEvmDevChain({ id: "base", chainId: 8453 });
  // Manual slots: a blockhash expires when the test says so.
  svm = await startSolanaDevChain({ slotMs: 0, confirmedLag: 1, finalizedLag: 1, blockhashValidSlots: 20 });
  const registry = chainRegistry(
    [devChainConfig(evm, 1), { ...solanaChainConfig(svm, "confirmed"), id: "solana" }],
    "base",
  );
  setup = await setUpX402(registry, randomBytes(32), {
    openTokenAccount: async (_chain, owner) => void (await svm.openTokenAccount(owner)),
    log: silentLog,
  });
  for (const [chain, signer] of setup.signers) {
    if (chain === "base") await evm.fundGas(signer);
    else await svm.airdrop(signer, 10_000_000_000n);
  }
  await evm.mintTo(payer.address, 10_000_000n);
  await setup.gateway.initialize();
}, 60_000);

afterAll(async () => {
  await evm?.close();
  await svm?.close();
});

/** The offer the gateway makes for `scheme` on `network`, of `amount`. */
async function offer(scheme: "exact" | "upto", network: string, amount: bigint): Promise<X402Offer> {
  const chain = setup.chains.find((c) => (network === EVM ? c.chain === "base" : c.chain === "solana"))!;
  const template = await setup.gateway.offer({
    scheme,
    network,
    payTo: chain.payTo,
    asset: network === EVM ? evm.token : svm.mint,
    extra: chain.extra,
    maxTimeoutSeconds: TIMEOUT_S,
  });
  return { ...template!, amount: `${amount}` };
}

/** A payment for `accepted`, signed by `client` as x402's fetch wrapper would sign it. */
async function sign(client: x402Client, accepted: X402Offer): Promise<X402PaymentPayload> {
  const header = setup.gateway.paymentRequiredHeader({
    error: "",
    resource: { url: "http://gateway.test/x402/v1/messages", description: "", mimeType: "application/json" },
    accepts: [accepted],
    sponsorGas: accepted.scheme === "upto",
  });
  return (await client.createPaymentPayload(
    decodePaymentRequiredHeader(header),
  )) as unknown as X402PaymentPayload;
}

const evmClient = () => {
  const signer = toClientEvmSigner(payer, createPublicClient({ transport: http(evm.rpcUrl) }));
  return new x402Client()
    .register(EVM as Network, new ExactClient(signer))
    .register(EVM as Network, new UptoClient(signer, { rpcUrl: evm.rpcUrl }))
    .setSpendControls({ allowedAssets: [{ network: EVM as Network, asset: evm.token }] });
};

/** Moves the EVM chain's clock past every offer made so far, and mines a block there. */
async function pastTheOffers(): Promise<void> {
  const test = createTestClient({ mode: "anvil", transport: http(evm.rpcUrl) });
  await test.increaseTime({ seconds: TIMEOUT_S * 2 });
  await evm.mine(1);
}

describe("whether an x402 payment was collected, read from the chain", () => {
  it("EIP-3009 (exact): usable until collected, then used with its transaction and amount; a pending collection is still usable", async () => {
    const accepted = await offer("exact", EVM, 39_000n);
    const payment = await sign(evmClient(), accepted);
    const since = Date.now();
    expect(await setup.onchain.collection(payment, accepted, since)).toEqual({ kind: "usable" });
    // Sent but not mined: nothing took the authorisation yet, and the collection can still land.
    await evm.setAutomine(false);
    const settling = setup.gateway.settle(payment, accepted, undefined);
    try {
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(await setup.onchain.collection(payment, accepted, since)).toEqual({ kind: "usable" });
    } finally {
      await evm.setAutomine(true);
      await evm.mine(1);
    }
    const settled = await settling;
    expect(settled.success).toBe(true);
    expect(await setup.onchain.collection(payment, accepted, since)).toEqual({
      kind: "used",
      transaction: settled.transaction,
      collected: 39_000n,
    });
  }, 60_000);

  it("Permit2 (upto): used with the collecting transaction and the amount it collected, not the authorised one", async () => {
    const accepted = await offer("upto", EVM, 500_000n);
    const payment = await sign(evmClient(), accepted);
    const since = Date.now();
    expect(await setup.onchain.collection(payment, accepted, since)).toEqual({ kind: "usable" });
    const settled = await setup.gateway.settle(payment, accepted, 123_456n);
    expect(settled.success, JSON.stringify(settled)).toBe(true);
    expect(await setup.onchain.collection(payment, accepted, since)).toEqual({
      kind: "used",
      transaction: settled.transaction,
      collected: 123_456n,
    });
    // Collecting it again is refused (its nonce is spent): the chain still names the first.
    const again = await setup.gateway.settle(payment, accepted, 123_456n).catch(() => undefined);
    expect(again?.success ?? false).toBe(false);
    expect(await setup.onchain.collection(payment, accepted, since)).toMatchObject({
      kind: "used",
      transaction: settled.transaction,
    });
  }, 60_000);

  it("EIP-3009 cancelled by its payer, and EIP-3009 and Permit2 past their validity, are unused for good", async () => {
    const client = evmClient();
    const exact = await offer("exact", EVM, 39_000n);
    const cancelled = await sign(client, exact);
    const expired = await sign(client, exact);
    const upto = await offer("upto", EVM, 500_000n);
    const permit = await sign(client, upto);
    const since = Date.now();
    const { authorization } = cancelled.payload as { authorization: { from: Hex; nonce: Hex } };
    const signature = await payer.signTypedData({
      domain: {
        name: exact.extra.name as string,
        version: exact.extra.version as string,
        chainId: 8453,
        verifyingContract: evm.token,
      },
      types: {
        CancelAuthorization: [
          { name: "authorizer", type: "address" },
          { name: "nonce", type: "bytes32" },
        ],
      },
      primaryType: "CancelAuthorization",
      message: { authorizer: authorization.from, nonce: authorization.nonce },
    });
    const { v, r, s } = parseSignature(signature);
    await evm.fundGas(payer.address);
    await createWalletClient({ account: payer, transport: http(evm.rpcUrl) }).writeContract({
      chain: null,
      address: evm.token,
      abi: CANCEL_ABI,
      functionName: "cancelAuthorization",
      args: [authorization.from, authorization.nonce, Number(v), r, s],
    });
    await evm.mine(1);
    expect(await setup.onchain.collection(cancelled, exact, since)).toEqual({
      kind: "unused",
      reason: "its payer cancelled the authorisation",
    });
    expect(await setup.onchain.collection(expired, exact, since)).toEqual({ kind: "usable" });
    expect(await setup.onchain.collection(permit, upto, since)).toEqual({ kind: "usable" });
    await pastTheOffers();
    expect(await setup.onchain.collection(expired, exact, since)).toMatchObject({ kind: "unused" });
    expect(await setup.onchain.collection(permit, upto, since)).toMatchObject({ kind: "unused" });
  }, 60_000);

  it("Solana (exact): the transaction the facilitator sent is found by its fee payer's signature, computed again; one never sent is unused once its blockhash expired", async () => {
    const solanaPayer = await generateKeyPairSigner();
    await svm.mintTo(solanaPayer.address, 1_000_000n);
    const client = new x402Client()
      .register(SOLANA as Network, new ExactSvmClient(toClientSvmSigner(solanaPayer), { rpcUrl: svm.rpcUrl }))
      .setSpendControls({ allowedAssets: [{ network: SOLANA as Network, asset: svm.mint }] });
    const accepted = await offer("exact", SOLANA, 39_000n);
    const paid = await sign(client, accepted);
    const unsent = await sign(client, accepted);
    const since = Date.now();
    expect(await setup.onchain.collection(paid, accepted, since)).toEqual({ kind: "usable" });
    const settling = setup.gateway.settle(paid, accepted, undefined);
    // The dev chain's slots advance by hand: confirm what was sent.
    const settled = await (async () => {
      for (;;) {
        svm.advanceSlots(1);
        const done = await Promise.race([settling, new Promise((r) => setTimeout(() => r(undefined), 50))]);
        if (done !== undefined) return done as Awaited<typeof settling>;
      }
    })();
    expect(settled.success, JSON.stringify(settled)).toBe(true);
    expect(await setup.onchain.collection(paid, accepted, since)).toEqual({
      kind: "used",
      transaction: settled.transaction,
      collected: 39_000n,
    });
    // Without the facilitator's key (a remote facilitator), the transaction cannot be named.
    const remote = createX402Onchain({ chains: [{ ...solanaChainConfig(svm, "confirmed"), id: "solana" }] });
    expect(await remote.collection(paid, accepted, since)).toMatchObject({ kind: "unknown" });
    expect(await setup.onchain.collection(unsent, accepted, since)).toEqual({ kind: "usable" });
    svm.advanceSlots(30);
    expect(await setup.onchain.collection(unsent, accepted, since)).toEqual({
      kind: "unused",
      reason: "its transaction never landed, and its blockhash expired",
    });
  }, 60_000);
});

const CANCEL_ABI = [
  {
    type: "function",
    name: "cancelAuthorization",
    stateMutability: "nonpayable",
    inputs: [
      { name: "authorizer", type: "address" },
      { name: "nonce", type: "bytes32" },
      { name: "v", type: "uint8" },
      { name: "r", type: "bytes32" },
      { name: "s", type: "bytes32" },
    ],
    outputs: [],
  },
] as const;

// Another address than `address`: its last hex digit changed, whatever it was (a random payer's
// address ends in "0" one time in 16, so replacing it with "0" would sometimes change nothing).
const otherAddress = (address: string): string => address.slice(0, -1) + (address.endsWith("0") ? "1" : "0");

describe("whether an x402 payment is signed by the payer it names, checked locally (no RPC)", () => {
  const header = (payment: unknown) => encodePaymentSignatureHeader(payment as PaymentPayload);
  const chains = () => [devChainConfig(evm, 1), { ...solanaChainConfig(svm, "confirmed"), id: "solana" }];

  it("lifts nothing for junk, a tampered payment, another chain's or token's, or one past its validity; lifts a genuine one of each kind", async () => {
    const signed = createPaymentSignatureCheck(chains());
    const exact = await sign(evmClient(), await offer("exact", EVM, 39_000n));
    const upto = await sign(evmClient(), await offer("upto", EVM, 500_000n));
    const solanaPayer = await generateKeyPairSigner();
    await svm.mintTo(solanaPayer.address, 1_000_000n);
    const solana = await sign(
      new x402Client()
        .register(
          SOLANA as Network,
          new ExactSvmClient(toClientSvmSigner(solanaPayer), { rpcUrl: svm.rpcUrl }),
        )
        .setSpendControls({ allowedAssets: [{ network: SOLANA as Network, asset: svm.mint }] }),
      await offer("exact", SOLANA, 39_000n),
    );
    for (const genuine of [exact, upto, solana]) expect(await signed(header(genuine))).toBe(true);

    const junk = [
      "",
      "not base64 at all",
      Buffer.from('{"x402Version":2,"payload":{}}').toString("base64"),
      Buffer.from(JSON.stringify({ ...exact, x402Version: 1 })).toString("base64"),
      Buffer.from("x".repeat(20_000)).toString("base64"),
    ];
    for (const value of junk) expect(await signed(value)).toBe(false);
    const auth = (exact.payload as { authorization: Record<string, string> }).authorization;
    const permit = (upto.payload as { permit2Authorization: Record<string, unknown> }).permit2Authorization;
    const tampered = [
      // More than was signed.
      { ...exact, payload: { ...exact.payload, authorization: { ...auth, value: "39000000" } } },
      // Another payer than the signer.
      {
        ...exact,
        payload: { ...exact.payload, authorization: { ...auth, from: otherAddress(payer.address) } },
      },
      { ...upto, payload: { ...upto.payload, permit2Authorization: { ...permit, nonce: "1" } } },
      // Another chain, another token.
      { ...exact, accepted: { ...exact.accepted, network: "eip155:1" } },
      { ...exact, accepted: { ...exact.accepted, asset: "0x0000000000000000000000000000000000000001" } },
    ];
    for (const payment of tampered) expect(await signed(header(payment))).toBe(false);
    // A Solana transaction whose payer's signature is gone, or belongs to another message.
    const wire = Buffer.from((solana.payload as { transaction: string }).transaction, "base64");
    const unsigned = Buffer.from(wire);
    unsigned.fill(0, 1, 1 + 64 * wire[0]!);
    const flipped = Buffer.from(wire);
    flipped[flipped.length - 1]! ^= 1;
    for (const transaction of [unsigned, flipped]) {
      const payment = { ...solana, payload: { transaction: transaction.toString("base64") } };
      expect(await signed(header(payment))).toBe(false);
    }
    // Past its validity (the offers here last a minute): a stale signed payment lifts nothing.
    const later = createPaymentSignatureCheck(chains(), () => Date.now() + TIMEOUT_S * 2_000);
    expect(await later(header(exact))).toBe(false);
    expect(await later(header(upto))).toBe(false);
  }, 60_000);
});
