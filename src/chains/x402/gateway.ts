import {
  decodePaymentSignatureHeader,
  encodePaymentRequiredHeader,
  encodePaymentResponseHeader,
} from "@x402/core/http";
import { type FacilitatorClient, x402ResourceServer } from "@x402/core/server";
import type { Network, PaymentPayload, PaymentRequirements, SettleResponse } from "@x402/core/types";
import { ExactEvmScheme } from "@x402/evm/exact/server";
import { UptoEvmScheme } from "@x402/evm/upto/server";
import { declareEip2612GasSponsoringExtension } from "@x402/extensions";
import { ExactSvmScheme } from "@x402/svm/exact/server";
import type {
  X402Gateway,
  X402Offer,
  X402OfferRequest,
  X402PaymentPayload,
  X402Required,
  X402Settlement,
  X402Verdict,
} from "../../core/ports/x402.js";

/**
 * The core's x402 port over the payment SDK (spec v2, docs/x402.md): `@x402/core`'s resource
 * server with x402's EVM mechanisms (`@x402/evm`: `exact` and `upto`) and, on Solana,
 * `@x402/svm`'s `exact` (its `upto` needs x402's payment-channel program on the chain). The
 * core's types are the SDK's shapes, so values pass through unchanged.
 */

/** A network the gateway takes x402 payments on, and the family whose schemes it registers. */
export interface X402Network {
  readonly network: string;
  readonly family: "evm" | "solana";
}

/** The gateway's x402 over `facilitator`, with each network's schemes registered. */
export function createX402Gateway(
  facilitator: FacilitatorClient,
  networks: readonly X402Network[],
): X402Gateway {
  const resources = new x402ResourceServer(facilitator);
  for (const { network, family } of networks) {
    if (family === "evm") {
      resources
        .register(network as Network, new ExactEvmScheme())
        .register(network as Network, new UptoEvmScheme());
    } else {
      resources.register(network as Network, new ExactSvmScheme());
    }
  }
  return {
    initialize: () => resources.initialize(),
    async offer(request: X402OfferRequest): Promise<X402Offer | undefined> {
      const [template] = await resources.buildPaymentRequirements({
        scheme: request.scheme,
        network: request.network as Network,
        payTo: request.payTo,
        price: { asset: request.asset, amount: "1", extra: { ...request.extra } },
        maxTimeoutSeconds: request.maxTimeoutSeconds,
      });
      return template;
    },
    paymentRequiredHeader(required: X402Required): string {
      return encodePaymentRequiredHeader({
        x402Version: 2,
        error: required.error,
        resource: required.resource,
        accepts: required.accepts as PaymentRequirements[],
        ...(required.sponsorGas ? { extensions: declareEip2612GasSponsoringExtension() } : {}),
      });
    },
    decodePayment: (header: string): X402PaymentPayload =>
      decodePaymentSignatureHeader(header) as unknown as X402PaymentPayload,
    matches: (offer: X402Offer, payment: X402PaymentPayload): boolean =>
      resources.findMatchingRequirements([offer as PaymentRequirements], payment as PaymentPayload) !==
      undefined,
    async verify(payment: X402PaymentPayload, offer: X402Offer): Promise<X402Verdict> {
      try {
        return await resources.verifyPayment(payment as PaymentPayload, offer as PaymentRequirements);
      } catch (error) {
        // A remote facilitator answers a refusal with an error status, thrown as its verdict.
        const refused = error as { invalidReason?: unknown; invalidMessage?: unknown };
        if (typeof refused.invalidReason !== "string") throw error;
        return {
          isValid: false,
          invalidReason: refused.invalidReason,
          invalidMessage: typeof refused.invalidMessage === "string" ? refused.invalidMessage : undefined,
        };
      }
    },
    settle: (payment: X402PaymentPayload, offer: X402Offer, amount: bigint | undefined) =>
      resources.settlePayment(
        payment as PaymentPayload,
        offer as PaymentRequirements,
        undefined,
        undefined,
        amount === undefined ? undefined : { amount: `${amount}` },
      ),
    paymentResponseHeader: (settlement: X402Settlement): string =>
      encodePaymentResponseHeader(settlement as SettleResponse),
  };
}
