/**
 * The limits on billed calls made without a key (docs/reliability.md, "Anonymous work"): each is
 * admitted by the core per client address before its body is read, and one that carries no x402
 * payment yet — it can only get an offer — may send a small body only.
 */
import { Transform, type TransformCallback } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { type Client, ConnectError } from "@connectrpc/connect";
import type { FastifyRequest, onRequestHookHandler, preParsingHookHandler } from "fastify";
import { type AnonymousWork, anonymousThrottled } from "../core/auth/anonymous-limits.js";
import { throttleKey } from "../core/auth/client-address.js";
import { errorInfo } from "../core/errors.js";
import { AnonymousWork as AnonymousWorkKind, type AuthService } from "../gen/tollgate/auth/v1/auth_pb.js";
import { clientAddress } from "./authenticate.js";
import { paymentHeader } from "./core-call.js";
import { formatBytes } from "./request-body.js";

declare module "fastify" {
  interface FastifyRequest {
    /**
     * The most body bytes this request may send, when less than its route's limit: set for a
     * keyless call without a payment. Undefined otherwise.
     */
    unpaidBodyLimit: number | undefined;
  }
}

/**
 * An onRequest hook for the billed routes, installed after the authentication hook: a call
 * without a key (`request.principal === null`) is admitted by the core (AdmitAnonymous, counted
 * per client address) before anything else happens, and one without an x402 payment header is
 * held to `unpaidBodyBytes` (413 from its content-length at once; a chunked body is cut off by
 * {@link unpaidBodyLimitHook} as it arrives). Calls with a key pass untouched. A refusal reaches
 * the scope's own error handler (429 with retry-after, or 413, in that format's envelope).
 */
export function admitAnonymousHook(
  auth: Client<typeof AuthService>,
  unpaidBodyBytes: number,
): onRequestHookHandler {
  const refused = new RefusedAddresses("call");
  return async (request: FastifyRequest) => {
    if (request.principal !== null) return;
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
    if (paymentHeader(request) !== "") return;
    request.unpaidBodyLimit = unpaidBodyBytes;
    const declared = Number(request.headers["content-length"] ?? Number.NaN);
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
        "payment (PAYMENT-SIGNATURE or X-PAYMENT); send the payment with this body, or use an API key.",
    ),
    { statusCode: 413 },
  );
}

/** Refused addresses remembered at most; past it they are asked about again (a bound, not a policy). */
const REFUSED_LIMIT = 10_000;

/**
 * How long a refusal from this facade's copy is held back: a flooding client waits for its
 * answers, so its flood stops competing with keyed callers for this process (as the key-guessing
 * throttle does, src/facade/authenticate.ts).
 */
const REFUSAL_DELAY_MS = 1_000;

/** Refusals held back at once at most; past it they are answered at once, so held sockets stay bounded. */
const MAX_HELD_REFUSALS = 1_000;

/**
 * The addresses the core refused as over their limit for one kind of work, and until when.
 * Further requests of such an address cost the facade an answer and no more: no RPC, no counter
 * (in Redis, a round trip). The copy cannot go stale: a fixed window does not end early, and it
 * is the core's `retry_after`, rounded up to the second.
 */
export class RefusedAddresses {
  readonly #until = new Map<string, { readonly until: number; readonly limit: number }>();
  #held = 0;

  constructor(private readonly work: AnonymousWork) {}

  /** The refusal for `address` while its window lasts; undefined otherwise. */
  refusal(address: string): ConnectError | undefined {
    const key = throttleKey(address);
    const entry = this.#until.get(key);
    if (entry === undefined) return undefined;
    const now = Date.now();
    if (entry.until <= now) {
      this.#until.delete(key);
      return undefined;
    }
    return anonymousThrottled(
      this.work,
      { allowed: false, limit: entry.limit, remaining: 0, resetMs: entry.until - now },
      now,
    );
  }

  /** Waits before a refusal is sent ({@link REFUSAL_DELAY_MS}), unless too many already wait. */
  async holdBack(): Promise<void> {
    if (this.#held >= MAX_HELD_REFUSALS) return;
    this.#held++;
    try {
      await sleep(REFUSAL_DELAY_MS);
    } finally {
      this.#held--;
    }
  }

  /** Takes note of the core's answer when it refused `address` as over its limit. */
  remember(address: string, error: unknown): void {
    if (!(error instanceof ConnectError)) return;
    const info = errorInfo(error);
    if (info?.reason !== "ANONYMOUS_THROTTLED") return;
    if (this.#until.size >= REFUSED_LIMIT) this.#forgetEnded();
    if (this.#until.size >= REFUSED_LIMIT) this.#until.clear();
    this.#until.set(throttleKey(address), {
      until: Date.now() + Number(info.metadata.retry_after) * 1000,
      limit: Number(info.metadata.limit),
    });
  }

  #forgetEnded(): void {
    const now = Date.now();
    for (const [key, entry] of this.#until) if (entry.until <= now) this.#until.delete(key);
  }
}
