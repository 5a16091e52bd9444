import type { Client } from "@connectrpc/connect";
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from "fastify";
import type { AuthService } from "../../gen/tollgate/auth/v1/auth_pb.js";
import type {
  CreateMessageResponse,
  InferenceService,
  MessageHead,
} from "../../gen/tollgate/inference/v1/inference_pb.js";
import { admitAnonymousHook, unpaidBodyLimitHook } from "../anonymous-limits.js";
import { authenticateHook } from "../authenticate.js";
import { waitForDrain } from "../client-limits.js";
import { abortOnDisconnect, coreCall, type Door, header, paymentHeader } from "../core-call.js";
import { toFacadeError } from "../http-status.js";
import { limitOfHead, rateLimitHeaders } from "../rate-limit-headers.js";
import { PAYMENT_RESPONSE_HEADER, RECEIPT_HEADER, receiptAsked } from "../receipts/header.js";
import { anthropicErrorBody, anthropicErrorHandler } from "./envelope.js";
import { modelList } from "./models.js";
import { encodeComment, encodeEvent } from "./sse.js";

/** What the Anthropic-format scope needs from the core. */
export interface AnthropicRoutesDeps {
  readonly auth: Client<typeof AuthService>;
  readonly inference: Client<typeof InferenceService>;
  /** How long a stream waits for a client that reads nothing before it is ended. */
  readonly stallMs: number;
  /**
   * `keyed`: the API-key routes (`/v1/messages`, count_tokens, models; no key is a 401 before
   * the body is read). `x402`: only `/v1/messages`, paid with x402, under the scope's prefix
   * (`/x402`); a key sent there is ignored.
   */
  readonly door: Door;
  /** The largest body a call on x402's door may send before it carries a payment. */
  readonly unpaidBodyBytes: number;
}

/**
 * The Anthropic messages-format routes of one door, with their own authentication and error envelope.
 * Bodies are read as bytes and handed to the core unparsed: the core validates them, and
 * whatever the gateway does not read reaches the provider exactly as the client sent it.
 */
export const anthropicRoutes: FastifyPluginAsync<AnthropicRoutesDeps> = async (
  scope,
  { auth, inference, stallMs, door, unpaidBodyBytes },
) => {
  scope.setErrorHandler(anthropicErrorHandler);
  scope.addHook("onRequest", async (request, reply) => {
    // The format's own name for the request id; the SDKs surface it on every error.
    reply.header("request-id", request.id);
  });
  if (door === "keyed") scope.addHook("onRequest", authenticateHook(auth));
  else {
    // x402's door: limited per client address, and held to a small body until a call pays.
    scope.addHook("onRequest", admitAnonymousHook(auth, unpaidBodyBytes));
    scope.addHook("preParsing", unpaidBodyLimitHook());
  }
  scope.removeContentTypeParser("application/json");
  scope.addContentTypeParser("application/json", { parseAs: "buffer" }, (_request, body, done) =>
    done(null, body),
  );

  scope.post("/v1/messages", async (request, reply) => {
    const abort = abortOnDisconnect(reply);
    const parts = inference.createMessage(
      {
        body: bodyBytes(request),
        anthropicVersion: header(request, "anthropic-version"),
        anthropicBeta: header(request, "anthropic-beta"),
        billingChain: header(request, "x-gateway-billing-chain"),
        clientUserAgent: header(request, "user-agent"),
        idempotencyKey: header(request, "idempotency-key"),
        payment: door === "x402" ? paymentHeader(request) : "",
        x402: door === "x402",
        omitReceipt: !receiptAsked(request),
      },
      { ...coreCall(request), signal: abort.signal },
    );
    const iterator = parts[Symbol.asyncIterator]();
    // Every failure before the head is an ordinary error response (nothing was charged).
    const head = (await iterator.next()).value as CreateMessageResponse | undefined;
    if (head?.part.case !== "head") throw new Error("the core answered without a head");
    reply.headers(headHeaders(head.part.value));
    if (!head.part.value.stream) {
      const message = (await iterator.next()).value as CreateMessageResponse | undefined;
      if (message?.part.case !== "message") throw new Error("the core answered without a message");
      // Then its charge, the last part: reading to the end lets the core's call end.
      for (let next = await iterator.next(); !next.done; next = await iterator.next()) {
        const { part } = next.value as CreateMessageResponse;
        if (part.case !== "settled") continue;
        request.charge = part.value.charge;
        if (part.value.receipt !== "") reply.header(RECEIPT_HEADER, part.value.receipt);
        if (part.value.paymentResponse !== "")
          reply.header(PAYMENT_RESPONSE_HEADER, part.value.paymentResponse);
      }
      return reply.type("application/json").send(Buffer.from(message.part.value));
    }
    await relayEvents(request, reply, iterator, stallMs);
    return reply;
  });
  // x402's door pays for calls, nothing else: counting tokens and listing models take a key.
  if (door === "x402") return;

  scope.post("/v1/messages/count_tokens", async (request, reply) => {
    const count = await inference.countTokens(
      {
        body: bodyBytes(request),
        anthropicVersion: header(request, "anthropic-version"),
        anthropicBeta: header(request, "anthropic-beta"),
        clientUserAgent: header(request, "user-agent"),
      },
      coreCall(request),
    );
    reply.headers(rateLimitHeaders(limitOfHead(count.rateLimit)));
    if (count.repairedParams.length > 0)
      reply.header("x-gateway-repaired-params", count.repairedParams.join(","));
    return reply.type("application/json").send(Buffer.from(count.body));
  });

  scope.get("/v1/models", async (request) => {
    const { models } = await inference.listModels({}, coreCall(request));
    return modelList(models);
  });
};

/**
 * Streams the events after the head as server-sent events, each written as soon as it
 * arrives, honouring the socket's backpressure. A failure after the headers went out can only
 * be told in the stream: it becomes an `error` event.
 */
async function relayEvents(
  request: FastifyRequest,
  reply: FastifyReply,
  iterator: AsyncIterator<CreateMessageResponse>,
  stallMs: number,
): Promise<void> {
  reply.hijack();
  const raw = reply.raw;
  raw.writeHead(200, {
    ...(reply.getHeaders() as Record<string, string>),
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    connection: "keep-alive",
  });
  // Headers go out with the first event, not before: flush them now so the client sees 200 at once.
  raw.flushHeaders();
  try {
    for (;;) {
      const next = await iterator.next();
      if (next.done) break;
      const { part } = next.value;
      let frame: string;
      if (part.case === "event") frame = encodeEvent(part.value.event, part.value.data);
      else if (part.case === "comment") frame = encodeComment(part.value);
      else {
        if (part.case === "settled") request.charge = part.value.charge;
        continue;
      }
      if (raw.destroyed) break;
      // A client that stops reading is waited for `stallMs`, then disconnected (settled as delivered).
      if (!raw.write(frame)) await waitForDrain(raw, stallMs);
    }
  } catch (error) {
    if (!raw.destroyed) {
      const mapped = toFacadeError(error);
      if (mapped.status >= 500) request.log.error({ err: error }, "stream failed");
      const body = anthropicErrorBody(mapped, request.id);
      raw.write(encodeEvent("error", JSON.stringify({ type: "error", error: body.error })));
    }
  } finally {
    // Tells the core to stop (and settle) if the loop ended early.
    await iterator.return?.();
    if (!raw.destroyed) raw.end();
  }
}

/** The gateway's response headers for a call's head. */
function headHeaders(head: MessageHead): Record<string, string> {
  const headers: Record<string, string> = {
    "x-gateway-billing-chain": head.billingChain,
    ...rateLimitHeaders(limitOfHead(head.rateLimit)),
  };
  if (head.repairedParams.length > 0) headers["x-gateway-repaired-params"] = head.repairedParams.join(",");
  if (head.clampedMaxTokens > 0n) headers["x-gateway-clamped-max-tokens"] = `${head.clampedMaxTokens}`;
  if (head.replayed) headers["idempotent-replayed"] = "true";
  return headers;
}

function bodyBytes(request: FastifyRequest): Uint8Array {
  return Buffer.isBuffer(request.body) ? request.body : new Uint8Array();
}
