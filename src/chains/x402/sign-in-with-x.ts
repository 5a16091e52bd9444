import { encodePaymentRequiredHeader } from "@x402/core/http";
import type { Network, PaymentRequired, PaymentRequirements } from "@x402/core/types";
import {
  buildSIWxSchema,
  parseSIWxHeader,
  SIGN_IN_WITH_X,
  type SIWxExtension,
  type SIWxPayload,
  validateSIWxMessage,
  verifySIWxSignature,
} from "@x402/extensions/sign-in-with-x";
import type {
  X402SignInChallenge,
  X402SignInCheck,
  X402SignInProof,
  X402SignInProofs,
  X402SignInVerdict,
} from "../../core/ports/x402.js";

/**
 * The core's sign-in port over x402's sign-in-with-x extension (CAIP-122: SIWE on EVM, SIWS on
 * Solana; `@x402/extensions/sign-in-with-x`), the only caller of that SDK. The rules — which
 * origin, which path, which chains, the single-use nonce — stay in the core
 * (src/core/billing/x402-sign-in.ts); see docs/receipts.md.
 */
export function createSignInWithX(): X402SignInProofs {
  return {
    challengeHeader(challenge: X402SignInChallenge): string {
      const extension: SIWxExtension = {
        info: {
          domain: challenge.domain,
          uri: challenge.url,
          statement: challenge.statement,
          version: "1",
          nonce: challenge.nonce,
          issuedAt: new Date(challenge.issuedAt).toISOString(),
          expirationTime: new Date(challenge.expiresAt).toISOString(),
          resources: [challenge.url],
        },
        supportedChains: challenge.networks.map((c) => ({
          chainId: c.network,
          type: c.family === "solana" ? "ed25519" : "eip191",
        })),
        schema: buildSIWxSchema(),
      };
      const required: PaymentRequired = {
        x402Version: 2,
        error: challenge.error,
        resource: { url: challenge.url, description: challenge.description, mimeType: "application/json" },
        // Nothing is for sale: one entry per network, amount 0 and no payTo, because x402's fetch
        // wrapper (wrapFetchWithSIWx) signs for the first entry's network and reads nothing else.
        accepts: challenge.networks.map(
          (c): PaymentRequirements => ({
            scheme: "exact",
            network: c.network as Network,
            asset: c.asset,
            amount: "0",
            payTo: "",
            maxTimeoutSeconds: Math.floor((challenge.expiresAt - challenge.issuedAt) / 1000),
            extra: {},
          }),
        ),
        extensions: { [SIGN_IN_WITH_X]: extension },
      };
      return encodePaymentRequiredHeader(required);
    },
    parse: (header: string): X402SignInProof => parseSIWxHeader(header),
    validate: (proof: X402SignInProof, expected: URL, maxAgeMs: number): Promise<X402SignInCheck> =>
      validateSIWxMessage(proof as SIWxPayload, expected, { maxAge: maxAgeMs }),
    verify: (proof: X402SignInProof): Promise<X402SignInVerdict> => verifySIWxSignature(proof as SIWxPayload),
  };
}
