/**
 * The response header carrying a non-streaming call's signed receipt (a JWS compact string,
 * docs/receipts.md). A stream's receipt is fetched at `GET /v1/receipts/{request_id}` (with its
 * key), or at `GET /x402/v1/receipts/{request_id}` by the wallet that paid it with x402.
 */
export const RECEIPT_HEADER = "x-gateway-receipt";

/** x402 v2's header naming what a call without a key may pay with (base64 JSON), on its 402. */
export const PAYMENT_REQUIRED_HEADER = "payment-required";

/** x402 v2's header carrying the settlement of a call paid with x402 (base64 JSON). */
export const PAYMENT_RESPONSE_HEADER = "payment-response";
