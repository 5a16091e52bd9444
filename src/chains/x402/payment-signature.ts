import {
  getBase64Encoder,
  getPublicKeyFromAddress,
  getTransactionDecoder,
  type SignatureBytes,
  type Address as SolanaAddress,
  verifySignature,
} from "@solana/kit";
import { decodePaymentSignatureHeader } from "@x402/core/http";
import {
  authorizationTypes,
  PERMIT2_ADDRESS,
  permit2WitnessTypes,
  uptoPermit2WitnessTypes,
  x402ExactPermit2ProxyAddress,
  x402UptoPermit2ProxyAddress,
} from "@x402/evm";
import { getAddress, type Hex, isAddress, verifyTypedData } from "viem";
import type { ChainConfig } from "../../core/billing/chain-registry.js";

/**
 * Whether an x402 payment header is signed by the payer it names, checked locally: no RPC, no
 * store, a signature recovery or two (docs/reliability.md, "Anonymous work"). x402's door holds
 * a keyless call to a small body until its payment passes this; only then may it send what its
 * route allows (an image edit's upload). It proves that someone holding the payer's key signed
 * this payment — on a chain and token the gateway takes, within its validity window — not that
 * the payer can pay: the facilitator's verify says that, once the body is read.
 *
 * - EVM `exact` over EIP-3009: the `TransferWithAuthorization` typed data, under the token's
 *   domain as the payment names it, recovers to `authorization.from`; `validAfter ≤ now <
 *   validBefore`; a value above zero.
 * - EVM over Permit2 (`upto`, `exact` over Permit2): Permit2's `PermitWitnessTransferFrom`
 *   (x402's witness types) recovers to `permit2Authorization.from`; its spender is x402's
 *   proxy; `witness.validAfter ≤ now ≤ deadline`.
 * - Solana `exact`: every signature the transaction carries verifies (Ed25519) over its message
 *   for its signer, and there is one (the payer's; the fee payer's slot is the facilitator's).
 *
 * A smart-wallet (ERC-1271 or ERC-6492) signature cannot be checked without the chain: it is
 * not lifted, and such a payer's call is held to the small body.
 */

/** A payment header is read up to this size, as the core reads it. */
const MAX_HEADER = 16 * 1024;

/** The check for the enabled chains of the registry: a payment on another network is not lifted. */
export function createPaymentSignatureCheck(
  chains: readonly ChainConfig[],
  now: () => number = Date.now,
): (header: string) => Promise<boolean> {
  const byNetwork = new Map(chains.filter((c) => c.enabled).map((c) => [c.network, c]));
  return async (header) => {
    try {
      if (header.length > MAX_HEADER) return false;
      const payment = decodePaymentSignatureHeader(header) as unknown as {
        x402Version?: unknown;
        accepted?: { network?: unknown; scheme?: unknown; asset?: unknown; extra?: unknown };
        payload?: unknown;
      };
      const accepted = payment.accepted;
      if (payment.x402Version !== 2 || typeof accepted !== "object" || accepted === null) return false;
      const chain = byNetwork.get(String(accepted.network));
      if (chain === undefined || typeof payment.payload !== "object" || payment.payload === null)
        return false;
      const fields = payment.payload as Record<string, unknown>;
      const seconds = BigInt(Math.floor(now() / 1000));
      if (chain.family === "solana") {
        return accepted.asset === chain.asset.address && (await solanaSigned(fields));
      }
      if (!sameAddress(accepted.asset, chain.asset.address)) return false;
      const chainId = chain.chainId!;
      if (typeof fields.permit2Authorization === "object") {
        return await permit2Signed(fields, accepted.scheme === "upto", chain, chainId, seconds);
      }
      return await eip3009Signed(fields, accepted.extra, chain, chainId, seconds);
    } catch {
      // Anything that does not read as a signed payment: the small body it is.
      return false;
    }
  };
}

async function eip3009Signed(
  fields: Record<string, unknown>,
  extra: unknown,
  chain: ChainConfig,
  chainId: number,
  now: bigint,
): Promise<boolean> {
  const auth = fields.authorization as Record<string, string>;
  const domain = extra as { name?: unknown; version?: unknown };
  if (typeof domain?.name !== "string" || typeof domain.version !== "string") return false;
  const value = BigInt(auth.value!);
  if (value <= 0n || BigInt(auth.validAfter!) > now || BigInt(auth.validBefore!) <= now) return false;
  return await verifyTypedData({
    address: getAddress(auth.from!),
    domain: {
      name: domain.name,
      version: domain.version,
      chainId,
      verifyingContract: getAddress(chain.asset.address),
    },
    types: authorizationTypes,
    primaryType: "TransferWithAuthorization",
    message: {
      from: getAddress(auth.from!),
      to: getAddress(auth.to!),
      value,
      validAfter: BigInt(auth.validAfter!),
      validBefore: BigInt(auth.validBefore!),
      nonce: auth.nonce as Hex,
    },
    signature: fields.signature as Hex,
  });
}

async function permit2Signed(
  fields: Record<string, unknown>,
  upto: boolean,
  chain: ChainConfig,
  chainId: number,
  now: bigint,
): Promise<boolean> {
  const auth = fields.permit2Authorization as {
    from: string;
    permitted: { token: string; amount: string };
    spender: string;
    nonce: string;
    deadline: string;
    witness: { to: string; facilitator?: string; validAfter: string };
  };
  const spender = getAddress(auth.spender);
  if (spender !== getAddress(upto ? x402UptoPermit2ProxyAddress : x402ExactPermit2ProxyAddress)) return false;
  if (!sameAddress(auth.permitted.token, chain.asset.address)) return false;
  if (BigInt(auth.witness.validAfter) > now || BigInt(auth.deadline) < now) return false;
  const permitted = { token: getAddress(auth.permitted.token), amount: BigInt(auth.permitted.amount) };
  const common = { permitted, spender, nonce: BigInt(auth.nonce), deadline: BigInt(auth.deadline) };
  const domain = { name: "Permit2", chainId, verifyingContract: PERMIT2_ADDRESS } as const;
  const address = getAddress(auth.from);
  const signature = fields.signature as Hex;
  const to = getAddress(auth.witness.to);
  const validAfter = BigInt(auth.witness.validAfter);
  return upto
    ? await verifyTypedData({
        address,
        domain,
        types: uptoPermit2WitnessTypes,
        primaryType: "PermitWitnessTransferFrom",
        message: {
          ...common,
          witness: { to, facilitator: getAddress(auth.witness.facilitator!), validAfter },
        },
        signature,
      })
    : await verifyTypedData({
        address,
        domain,
        types: permit2WitnessTypes,
        primaryType: "PermitWitnessTransferFrom",
        message: { ...common, witness: { to, validAfter } },
        signature,
      });
}

/** Every signature present verifies over the message for its signer, and there is at least one. */
async function solanaSigned(fields: Record<string, unknown>): Promise<boolean> {
  if (typeof fields.transaction !== "string") return false;
  const transaction = getTransactionDecoder().decode(getBase64Encoder().encode(fields.transaction));
  const message = new Uint8Array(transaction.messageBytes);
  let present = 0;
  for (const [signer, signature] of Object.entries(transaction.signatures) as [
    SolanaAddress,
    SignatureBytes | null,
  ][]) {
    if (signature === null) continue;
    present++;
    if (!(await verifySignature(await getPublicKeyFromAddress(signer), signature, message))) return false;
  }
  return present > 0;
}

function sameAddress(a: unknown, b: string): boolean {
  return typeof a === "string" && isAddress(a, { strict: false }) && a.toLowerCase() === b.toLowerCase();
}
