/**
 * The response header carrying a non-streaming call's signed receipt (a JWS compact string,
 * docs/receipts.md). A stream's receipt is fetched at `GET /v1/receipts/{request_id}`.
 */
export const RECEIPT_HEADER = "x-gateway-receipt";
