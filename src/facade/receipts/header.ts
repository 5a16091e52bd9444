import type { FastifyRequest } from "fastify";

/**
 * The response header carrying a non-streaming call's signed receipt (a JWS compact string,
 * docs/receipts.md), when the call asked for it with the same header (`x-gateway-receipt: true`)
 * or was paid with x402. Any receipt is fetched at `GET /v1/receipts/{request_id}` (with its
 * key), or at `GET /x402/v1/receipts/{request_id}` by the wallet that paid it with x402.
 */
export const RECEIPT_HEADER = "x-gateway-receipt";

/**
 * Whether a call asks for its signed receipt in the answer: the request's `x-gateway-receipt`
 * is `true` (or `1`); absent, empty, `false` or `0`, it does not (the receipt is signed when
 * fetched instead: docs/receipts.md, "Where to get one"). Any other value is a 400 naming it.
 */
export function receiptAsked(request: FastifyRequest): boolean {
  const value = request.headers[RECEIPT_HEADER];
  const text = (Array.isArray(value) ? value.join(",") : (value ?? "")).trim().toLowerCase();
  if (text === "true" || text === "1") return true;
  if (text === "" || text === "false" || text === "0") return false;
  throw Object.assign(
    new Error(
      `${RECEIPT_HEADER}: expected true or false (whether the answer carries the call's signed receipt); got ${JSON.stringify(String(value))}.`,
    ),
    { statusCode: 400 },
  );
}

/** x402 v2's header naming what a call without a key may pay with (base64 JSON), on its 402. */
export const PAYMENT_REQUIRED_HEADER = "payment-required";

/** x402 v2's header carrying the settlement of a call paid with x402 (base64 JSON). */
export const PAYMENT_RESPONSE_HEADER = "payment-response";
