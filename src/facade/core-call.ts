import { type ContextValues, createContextValues } from "@connectrpc/connect";
import type { FastifyReply, FastifyRequest } from "fastify";
import { presentedCredential } from "../core/auth/credentials.js";
import { authenticatedCallerKey } from "../core/caller.js";

/**
 * The door a billed call came through: the keyed API (`/v1/*`, an API key pays; no key is a
 * 401) or x402's (`/x402/v1/*`, a payment pays; any key presented there is ignored).
 */
export type Door = "keyed" | "x402";

/**
 * Metadata for core calls: the caller's key (the core authenticates every RPC; none through the
 * x402 door, where a key is ignored), the request id and the origin.
 */
export function coreHeaders(request: FastifyRequest, door: Door = "keyed"): Record<string, string> {
  return {
    "x-request-id": request.id,
    "x-api-key":
      door === "x402" ? "" : (presentedCredential((name) => header(request, name) || undefined) ?? ""),
    // What receipts name as the gateway, when the core has no TOLLGATE_PUBLIC_URL of its own.
    "x-gateway-origin": request.publicOrigin,
  };
}

/**
 * The key the facade authenticated before reading the body, for a core in this process to take
 * as the call's caller instead of authenticating it again (a remote core never sees context
 * values: it authenticates the forwarded key itself). Undefined before authentication.
 */
export function callerValues(request: FastifyRequest): ContextValues | undefined {
  const principal = request.principal;
  if (principal === null || principal.keyId === "") return undefined;
  return createContextValues().set(authenticatedCallerKey, {
    kind: "key",
    key: { accountId: principal.accountId, keyId: principal.keyId },
  });
}

/** Aborts the core call when the client goes away before the answer is complete. */
export function abortOnDisconnect(reply: FastifyReply): AbortController {
  const abort = new AbortController();
  reply.raw.on("close", () => {
    if (!reply.raw.writableFinished) abort.abort();
  });
  return abort;
}

/** A request header as one string ("" when absent; repeated values joined with commas). */
export function header(request: FastifyRequest, name: string): string {
  const value = request.headers[name];
  return (Array.isArray(value) ? value.join(",") : value) ?? "";
}

/**
 * A keyless call's x402 payment: `PAYMENT-SIGNATURE` (x402 v2), else the v1 header `X-PAYMENT`
 * (the core reads the version from the payment itself); "" when neither is sent.
 */
export function paymentHeader(request: FastifyRequest): string {
  return header(request, "payment-signature") || header(request, "x-payment");
}
