/**
 * The limits on billed calls made without a key (docs/reliability.md, "Anonymous work"): each is
 * admitted by the core per client address before its body is read, and one that carries no x402
 * payment signed by its payer — it can only get an offer, or a refusal — may send a small body
 * only.
 */
import { Transform, type TransformCallback } from "node:stream";
import type { Client } from "@connectrpc/connect";
import type { FastifyRequest, onRequestHookHandler, preParsingHookHandler } from "fastify";
import { type AnonymousWork, anonymousThrottled } from "../core/auth/anonymous-limits.js";
import { AnonymousWork as AnonymousWorkKind, type AuthService } from "../gen/tollgate/auth/v1/auth_pb.js";
import { clientAddress } from "./authenticate.js";
import { paymentHeader } from "./core-call.js";
import { RefusedAddresses } from "./refused-addresses.js";
import { formatBytes } from "./request-body.js";

declare module "fastify" {
  interface FastifyRequest {
    /**
     * The most body bytes this request may send, when less than its route's limit: set for a
     * keyless call without a payment its payer signed. Undefined otherwise.
     */
    unpaidBodyLimit: number | undefined;
  }
  interface FastifyInstance {
    /**
     * Whether an x402 payment header is signed by the payer it names, checked locally (no RPC):
     * only such a payment lifts a keyless call's small body limit. Set by buildFacade; when x402
     * is not wired it answers false, and every keyless call keeps the small limit.
     */
    x402PaymentSigned: (header: string) => Promise<boolean>;
  }
}

/**
 * An onRequest hook for the billed routes, installed after the authentication hook: a call
 * without a key (`request.caller === null`) is admitted by the core (AdmitAnonymous, counted
 * per client address) before anything else happens, and one whose body may exceed
 * `unpaidBodyBytes` (declared so, or chunked) is held to it unless its x402 payment header is
 * signed by the payer it names ({@link FastifyInstance.x402PaymentSigned}, checked only then: a
 * junk header lifts nothing). Held: 413 from its content-length at once; a chunked body is cut
 * off by {@link unpaidBodyLimitHook} as it arrives. Calls with a key pass untouched. A refusal
 * reaches the scope's own error handler (429 with retry-after, or 413, in that format's envelope).
 */
export function admitAnonymousHook(
  auth: Client<typeof AuthService>,
  unpaidBodyBytes: number,
): onRequestHookHandler {
  const refused = anonymousRefusals("call");
  return async (request: FastifyRequest) => {
    if (request.caller !== null) return;
    const address = clientAddress(request);
    const refusal = refused.refusal(address);
    if (refusal !== undefined) {
      await refused.holdBack();
      throw refusal;
    }
    try {
      await auth.admitAnonymous(
        { clientAddress: address, work: AnonymousWorkKind.CALL },
        { headers: { "x-request-id": request.id } },
      );
    } catch (error) {
      refused.remember(address, error);
      throw error;
    }
    const declared = Number(request.headers["content-length"] ?? Number.NaN);
    const payment = paymentHeader(request);
    // A body within the small limit needs no check; a larger (or chunked) one, a signed payment.
    if (
      payment !== "" &&
      (declared <= unpaidBodyBytes || (await request.server.x402PaymentSigned(payment)))
    ) {
      return;
    }
    request.unpaidBodyLimit = unpaidBodyBytes;
    if (declared > unpaidBodyBytes) throw unpaidTooLarge(unpaidBodyBytes);
  };
}

/**
 * A preParsing hook that ends a body past the request's {@link FastifyRequest.unpaidBodyLimit}
 * with a 413, for bodies that declare no length (chunked). Fastify's body parsers read what this
 * returns; the multipart upload reads the raw request, so edits check the limit themselves.
 */
export function unpaidBodyLimitHook(): preParsingHookHandler {
  return async (request, _reply, payload) => {
    const limit = request.unpaidBodyLimit;
    if (limit === undefined) return payload;
    let read = 0;
    const capped = new Transform({
      transform(chunk: Buffer, _encoding, done: TransformCallback) {
        read += chunk.byteLength;
        if (read > limit) done(unpaidTooLarge(limit));
        else done(null, chunk);
      },
    });
    payload.on("error", (error) => capped.destroy(error));
    return payload.pipe(capped);
  };
}

/** A 413 for a keyless call's body past what it may send before it pays. */
export function unpaidTooLarge(limit: number): Error {
  return Object.assign(
    new Error(
      `A call without an API key may send at most ${formatBytes(limit)} until it carries an x402 ` +
        "payment (PAYMENT-SIGNATURE or X-PAYMENT) signed by its payer; send a signed payment with this body, " +
        "or use an API key.",
    ),
    { statusCode: 413 },
  );
}

/** The addresses the core refused as over their limit for `work` (ANONYMOUS_THROTTLED). */
export function anonymousRefusals(work: AnonymousWork): RefusedAddresses {
  return new RefusedAddresses("ANONYMOUS_THROTTLED", (decision, now) =>
    anonymousThrottled(work, decision, now),
  );
}
