import {
  type ContextValues,
  createContextKey,
  createContextValues,
  type Transport,
} from "@connectrpc/connect";
import type { FastifyReply, FastifyRequest } from "fastify";
import { authenticatedCallerKey } from "../core/caller.js";

/**
 * The door a billed call came through: the keyed API (`/v1/*`, an API key pays; no key is a
 * 401) or x402's (`/x402/v1/*`, a payment pays; any key presented there is ignored).
 */
export type Door = "keyed" | "x402";

/*
 * How the caller reaches the core. The facade parses the credential once, in its authentication
 * hook (authenticate.ts), and keeps one value on the request: `request.caller`. Every core call of
 * that request hands the caller over as context values ({@link coreCall}):
 * - a core in this process takes it as the call's caller (core/caller.ts, callerInterceptor,
 *   only from the in-process transport): no second parse of the headers, no second digest;
 * - a core over the network never sees context values: the facade's transport to it
 *   ({@link remoteCoreTransport}) turns the handed-over key into the `x-api-key` header, and the
 *   core authenticates it from the RPC's metadata, its one conversion at its own edge (the same
 *   it does for every gRPC or Connect client calling it directly).
 * x402's door runs no authentication hook: its calls hand over no caller, so any key sent there
 * never reaches the core.
 */

/** The key to forward to a core over the network; read only by {@link remoteCoreTransport}. */
const forwardedKey = createContextKey<string>("", { description: "key for a remote core" });

/** What a core call of this request carries: its metadata and, once authenticated, its caller. */
export interface CoreCallOptions {
  readonly headers: Record<string, string>;
  readonly contextValues: ContextValues | undefined;
}

/**
 * The options of a core call made for `request`: the request id and the origin as metadata, and
 * the caller the authentication hook authenticated (none before it, nor on x402's door).
 */
export function coreCall(request: FastifyRequest): CoreCallOptions {
  return { headers: coreHeaders(request), contextValues: callerValues(request) };
}

/** Metadata for core calls: the request id and the origin. */
export function coreHeaders(request: FastifyRequest): Record<string, string> {
  return {
    "x-request-id": request.id,
    // What receipts name as the gateway, when the core has no TOLLGATE_PUBLIC_URL of its own.
    "x-gateway-origin": request.publicOrigin,
  };
}

/**
 * The caller the facade authenticated before reading the body, for a core in this process to take
 * as the call's caller instead of authenticating it again, and its key for a remote core to
 * authenticate itself. Undefined before authentication.
 */
export function callerValues(request: FastifyRequest): ContextValues | undefined {
  const caller = request.caller;
  if (caller === null) return undefined;
  return createContextValues()
    .set(authenticatedCallerKey, { kind: "key", key: { accountId: caller.accountId, keyId: caller.keyId } })
    .set(forwardedKey, caller.credential.secret);
}

/**
 * The facade's transport to a core over the network: a call that hands over a caller sends its
 * key as `x-api-key`, which the core authenticates (context values do not cross the network).
 */
export function remoteCoreTransport(transport: Transport): Transport {
  const withKey = (header: ConstructorParameters<typeof Headers>[0], values: ContextValues | undefined) => {
    const key = values?.get(forwardedKey) ?? "";
    if (key === "") return header;
    const headers = new Headers(header);
    headers.set("x-api-key", key);
    return headers;
  };
  return {
    unary: (method, signal, timeoutMs, header, input, values) =>
      transport.unary(method, signal, timeoutMs, withKey(header, values), input, values),
    stream: (method, signal, timeoutMs, header, input, values) =>
      transport.stream(method, signal, timeoutMs, withKey(header, values), input, values),
  };
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
