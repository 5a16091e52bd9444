import { type Client, Code } from "@connectrpc/connect";
import type { FastifyPluginAsync } from "fastify";
import { didWeb, type ReceiptJwk, X402_RECEIPTS_PATH } from "../../core/billing/receipts.js";
import { reasonError } from "../../core/errors.js";
import type { AuthService } from "../../gen/tollgate/auth/v1/auth_pb.js";
import type { BillingService } from "../../gen/tollgate/billing/v1/billing_pb.js";
import { admitAnonymousHook } from "../anonymous-limits.js";
import { anthropicErrorHandler } from "../anthropic/envelope.js";
import { authenticateHook } from "../authenticate.js";
import { coreCall, header } from "../core-call.js";

/** What the receipt routes need from the core. */
export interface ReceiptRoutesDeps {
  readonly auth: Client<typeof AuthService>;
  readonly billing: Client<typeof BillingService>;
  /** x402 is on: calls without a key are paid per request, and their payers read receipts at the x402 door. */
  readonly keyless: boolean;
}

/** The keyed door's receipt route: any call of the key's account. */
const RECEIPT_ROUTE = "/v1/receipts/:requestId";
/** The x402 door's receipt route: a call paid with x402, for its payer signed in with its wallet. */
const X402_RECEIPT_ROUTE = `${X402_RECEIPTS_PATH}/:requestId`;
/** Where the receipt keys are published (also what docs/receipts.md tells verifiers). */
export const JWKS_PATH = "/.well-known/jwks.json";
export const DID_PATH = "/.well-known/did.json";
/** x402's sign-in-with-x proof header (base64 JSON of the signed CAIP-122 message). */
const SIGN_IN_WITH_X_HEADER = "sign-in-with-x";

/**
 * Signed receipts (docs/receipts.md): `GET /v1/receipts/{request_id}` for the account of a call
 * (its API key); `GET /x402/v1/receipts/{request_id}` for a call paid with x402, served to the
 * wallet that paid once it signs in with x402's sign-in-with-x (an API key is ignored there);
 * and the verification keys for anyone, as a JSON Web Key Set and as the did:web document a
 * receipt's `kid` resolves through. Errors answer in the Anthropic envelope.
 */
export const receiptRoutes: FastifyPluginAsync<ReceiptRoutesDeps> = async (
  scope,
  { auth, billing, keyless },
) => {
  scope.setErrorHandler(anthropicErrorHandler);

  scope.get<{ Params: { requestId: string } }>(
    RECEIPT_ROUTE,
    { onRequest: authenticateHook(auth, receiptKeyMissing) },
    async (request, reply) => {
      const { jws } = await billing.getReceipt(
        { requestId: request.params.requestId, origin: request.publicOrigin },
        coreCall(request),
      );
      reply.header("cache-control", "no-store");
      // The extension's receipt object: for JWS, the compact string carries the payload.
      return { format: "jws", signature: jws };
    },
  );

  if (keyless) {
    // Each challenge writes a nonce: limited per client address like every other keyless call.
    const admit = admitAnonymousHook(auth, 0);
    scope.get<{ Params: { requestId: string } }>(
      X402_RECEIPT_ROUTE,
      { onRequest: admit },
      async (request, reply) => {
        // The door of keyless payers: who asks is the wallet it proves, never a key it sends along.
        const { jws } = await billing.getReceipt(
          {
            requestId: request.params.requestId,
            origin: request.publicOrigin,
            signInWithX: header(request, SIGN_IN_WITH_X_HEADER),
          },
          coreCall(request),
        );
        reply.header("cache-control", "no-store");
        return { format: "jws", signature: jws };
      },
    );
  }

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

/**
 * The keyed door refuses a request without a key before anything else, and says where a call
 * paid with x402 (which has no key) has its receipt: a payer's address proves nothing, so
 * `?payer=` is no longer a way in.
 */
const receiptKeyMissing = () =>
  reasonError(
    Code.Unauthenticated,
    "KEY_MISSING",
    "No API key: send it as x-api-key or Authorization: Bearer. A call paid with x402 has its receipt at " +
      `GET ${X402_RECEIPTS_PATH}/{request_id}, served to the wallet that paid once it signs in (x402 sign-in-with-x).`,
  );
