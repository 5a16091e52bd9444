import { Code, ConnectError } from "@connectrpc/connect";
import type { FastifyRequest } from "fastify";
import { PAYMENT_REQUIRED_METADATA, PAYMENT_RESPONSE_METADATA } from "../core/billing/x402-accounts.js";
import { errorInfo, isStorageFull, storageFull } from "../core/errors.js";
import { limitOfRefusal, rateLimitHeaders } from "./rate-limit-headers.js";
import { PAYMENT_REQUIRED_HEADER, PAYMENT_RESPONSE_HEADER } from "./receipts/header.js";

/** A core error as the facade reports it, before a format wraps it in its envelope. */
export interface FacadeError {
  readonly status: number;
  readonly message: string;
  /** The core's machine-readable reason (ErrorInfo), when it gave one. */
  readonly reason: string | undefined;
  /** The request field at fault, for InvalidArgument. */
  readonly field: string | undefined;
  /** The billing chain a 402 is about; answered in `x-gateway-billing-chain`. */
  readonly chain: string | undefined;
  /** The reason's metadata (ErrorInfo), empty when there is none. */
  readonly metadata: Readonly<Record<string, string>>;
}

/**
 * Maps any error to an HTTP status and a message that is safe to show. ConnectErrors map by
 * code (and reason, for billing); a write the full disk refused is a 503 (STORAGE_FULL), even
 * when it reached the facade raw; Fastify's own 4xx errors keep their status; anything else is
 * a masked 500.
 */
export function toFacadeError(error: unknown): FacadeError {
  if (!(error instanceof ConnectError) && isStorageFull(error)) return toFacadeError(storageFull());
  if (error instanceof ConnectError) {
    const info = errorInfo(error);
    const reason = info?.reason;
    const status = statusOf(error.code, reason);
    const metadata = info?.metadata ?? {};
    const chain = status === 402 ? metadata.chain : undefined;
    return { status, message: error.rawMessage, reason, field: metadata.field, chain, metadata };
  }
  const statusCode = (error as { statusCode?: unknown } | null)?.statusCode;
  if (typeof statusCode === "number" && statusCode >= 400 && statusCode < 500) {
    return {
      status: statusCode,
      message: (error as Error).message,
      reason: undefined,
      field: undefined,
      chain: undefined,
      metadata: {},
    };
  }
  return {
    status: 500,
    message: "Internal server error.",
    reason: undefined,
    field: undefined,
    chain: undefined,
    metadata: {},
  };
}

function statusOf(code: Code, reason: string | undefined): number {
  switch (code) {
    case Code.InvalidArgument:
    case Code.OutOfRange:
      return 400;
    case Code.Unauthenticated:
      return 401;
    case Code.FailedPrecondition:
      // A call the wallet cannot pay for, on the chain it must be paid on, is a billing error.
      if (reason === "INSUFFICIENT_FUNDS" || reason === "DEFAULT_CHAIN_UNAVAILABLE") return 402;
      // So is one past a spend cap the account or key set (x-should-retry: false, as every 402).
      if (reason === "SPEND_CAP_REACHED") return 402;
      // And a call without a key that needs (or brought a refused) x402 payment.
      if (reason === "PAYMENT_REQUIRED" || reason?.startsWith("X402_")) return 402;
      // An idempotency key sent with another request (422).
      if (reason === "IDEMPOTENCY_KEY_REUSED") return 422;
      // An answer not kept for a retry, or a receipt of a call still running: try later (409).
      return reason === "IDEMPOTENCY_ANSWER_NOT_KEPT" || reason === "RECEIPT_PENDING" ? 409 : 400;
    case Code.PermissionDenied:
      return 403;
    case Code.NotFound:
      return 404;
    case Code.AlreadyExists:
    case Code.Aborted:
      return 409;
    case Code.ResourceExhausted:
      return 429;
    case Code.Canceled:
      return 499;
    case Code.Unimplemented:
      return 501;
    case Code.Unavailable:
      // The provider's 529 keeps its status; other provider failures are a bad gateway; the
      // gateway's own (STORAGE_FULL: its disk is full) is a 503.
      if (reason === "UPSTREAM_OVERLOADED") return 529;
      return reason === "UPSTREAM_ERROR" ? 502 : 503;
    case Code.DeadlineExceeded:
      return 504;
    case Code.Unknown:
    case Code.Internal:
    case Code.DataLoss:
      return 500;
  }
}

/**
 * A refusal for funds that tells the caller where to add them: the dashboard's Wallet page at
 * the gateway's public origin (TOLLGATE_PUBLIC_URL, else the request's own). Other errors are
 * returned as they are.
 */
export function withWalletLink(error: FacadeError, request: FastifyRequest): FacadeError {
  if (error.reason !== "INSUFFICIENT_FUNDS") return error;
  const origin = request.publicOrigin || `${request.protocol}://${request.host}`;
  return { ...error, message: `${error.message} Add funds on the Wallet page: ${origin}/dashboard#/wallet` };
}

/**
 * Headers every format adds for a mapped error: the billing chain of a 402 and
 * `x-should-retry: false` (the official SDKs and Claude Code then stop at once: a retry cannot
 * fund the wallet), and `retry-after` with the request-limit headers of a 429 (the format's
 * names; docs/protocols.md, "Response headers").
 */
export function errorHeaders(error: FacadeError): Record<string, string> {
  const headers: Record<string, string> = {};
  if (error.chain !== undefined) headers["x-gateway-billing-chain"] = error.chain;
  // Retrying cannot fund the wallet, nor bring back an answer the gateway did not keep.
  if (error.status === 402 || error.reason === "IDEMPOTENCY_ANSWER_NOT_KEPT")
    headers["x-should-retry"] = "false";
  const { metadata } = error;
  // x402: what a call may pay with, and a payment's refused collection, in the protocol's headers.
  const required = metadata[PAYMENT_REQUIRED_METADATA];
  if (required !== undefined) headers[PAYMENT_REQUIRED_HEADER] = required;
  const response = metadata[PAYMENT_RESPONSE_METADATA];
  if (response !== undefined) headers[PAYMENT_RESPONSE_HEADER] = response;
  if (error.reason === "RATE_LIMITED") {
    Object.assign(headers, rateLimitHeaders(limitOfRefusal(metadata)));
  } else if (metadata.retry_after !== undefined) {
    headers["retry-after"] = metadata.retry_after;
  }
  return headers;
}
