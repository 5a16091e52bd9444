import type { Client } from "@connectrpc/connect";
import type { FastifyPluginAsync } from "fastify";
import { didWeb, type ReceiptJwk } from "../../core/billing/receipts.js";
import type { AuthService } from "../../gen/tollgate/auth/v1/auth_pb.js";
import type { BillingService } from "../../gen/tollgate/billing/v1/billing_pb.js";
import { anthropicErrorHandler } from "../anthropic/envelope.js";
import { authenticateHook } from "../authenticate.js";
import { callerValues, coreHeaders } from "../core-call.js";

/** What the receipt routes need from the core. */
export interface ReceiptRoutesDeps {
  readonly auth: Client<typeof AuthService>;
  readonly billing: Client<typeof BillingService>;
}

/** Where the receipt keys are published (also what docs/receipts.md tells verifiers). */
const RECEIPT_ROUTE = "/v1/receipts/:requestId";
export const JWKS_PATH = "/.well-known/jwks.json";
export const DID_PATH = "/.well-known/did.json";

/**
 * Signed receipts (docs/receipts.md): `GET /v1/receipts/{request_id}` for the payer of a call
 * (its API key; for a call paid with x402, `?payer=<its address>`), and the verification keys for anyone, as a JSON Web Key Set and as the did:web
 * document a receipt's `kid` resolves through. Errors answer in the Anthropic envelope.
 */
export const receiptRoutes: FastifyPluginAsync<ReceiptRoutesDeps> = async (scope, { auth, billing }) => {
  scope.setErrorHandler(anthropicErrorHandler);

  const authenticate = authenticateHook(auth);
  scope.get<{ Params: { requestId: string }; Querystring: { payer?: string } }>(
    RECEIPT_ROUTE,
    {
      // A call paid with x402 has no key: its receipt is asked for with the payer's address.
      onRequest: async function (request, reply) {
        if (typeof request.query.payer === "string" && request.headers["x-api-key"] === undefined) {
          request.principal = null;
          return;
        }
        await authenticate.call(this, request, reply, () => {});
      },
    },
    async (request, reply) => {
      const payer = typeof request.query.payer === "string" ? request.query.payer : "";
      const { jws } = await billing.getReceipt(
        { requestId: request.params.requestId, origin: request.publicOrigin, payer },
        { headers: coreHeaders(request), contextValues: callerValues(request) },
      );
      reply.header("cache-control", "no-store");
      // The extension's receipt object: for JWS, the compact string carries the payload.
      return { format: "jws", signature: jws };
    },
  );

  const keys = async () => JSON.parse((await billing.getReceiptKeys({})).jwks) as { keys: ReceiptJwk[] };

  scope.get(JWKS_PATH, async (_request, reply) => {
    reply.header("cache-control", "public, max-age=300");
    return keys();
  });

  scope.get(DID_PATH, async (request, reply) => {
    const did = didWeb(request.publicOrigin);
    const methods = (await keys()).keys.map(({ kid, kty, crv, x }) => ({
      id: `${did}#${kid}`,
      type: "JsonWebKey2020",
      controller: did,
      publicKeyJwk: { kty, crv, x },
    }));
    reply.header("cache-control", "public, max-age=300");
    return {
      "@context": ["https://www.w3.org/ns/did/v1", "https://w3id.org/security/suites/jws-2020/v1"],
      id: did,
      verificationMethod: methods,
      assertionMethod: methods.map((m) => m.id),
    };
  });
};
