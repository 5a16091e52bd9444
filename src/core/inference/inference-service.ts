import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import {
  type CreateMessageResponse,
  CreateMessageResponseSchema,
  type InferenceService,
  ModelSchema,
  type RateLimit,
  RateLimitSchema,
} from "../../gen/tollgate/inference/v1/inference_pb.js";
import type { AuthenticatedKey } from "../auth/authenticator.js";
import { gatewayOrigin, type Receipts } from "../billing/receipts.js";
import { callerKey } from "../caller.js";
import { keyMissing } from "../errors.js";
import { newRequestId } from "../ids.js";
import type { ImageInference } from "../images/image-inference.js";
import { imageRpcs } from "../images/image-service.js";
import type { RateLimitDecision } from "../ports/rate-limits.js";
import { type IdempotentCalls, startIdempotent } from "./idempotency.js";
import { recordedMessage, replayedMessage } from "./idempotent-messages.js";
import { payingCallerRequired } from "./inference-errors.js";
import type { MessagePart, TextInference } from "./text-inference.js";

/**
 * The InferenceService RPCs over {@link TextInference} and, when given, {@link ImageInference}:
 * caller, request id, idempotency keys (when the core keeps them) and proto mapping.
 */
export function createInferenceService(
  inference: TextInference,
  now: () => number,
  receipts: Receipts,
  images?: ImageInference,
  idempotency?: IdempotentCalls,
): ServiceImpl<typeof InferenceService> {
  const rateLimit = (decision: RateLimitDecision): RateLimit =>
    create(RateLimitSchema, {
      limit: BigInt(decision.limit),
      remaining: BigInt(decision.remaining),
      reset: timestampFromMs(now() + decision.resetMs),
    });
  const toResponse = (part: MessagePart): CreateMessageResponse => {
    switch (part.kind) {
      case "head": {
        const { head } = part;
        return create(CreateMessageResponseSchema, {
          part: {
            case: "head",
            value: {
              requestId: head.requestId,
              billingChain: head.billingChain,
              repairedParams: [...head.repairedParams],
              clampedMaxTokens: BigInt(head.clampedFrom ?? 0),
              rateLimit: rateLimit(head.rateLimit),
              stream: head.stream,
              model: head.model,
              upstreamRequestId: head.upstreamRequestId,
            },
          },
        });
      }
      case "message":
        return create(CreateMessageResponseSchema, { part: { case: "message", value: part.body } });
      case "event":
        return create(CreateMessageResponseSchema, {
          part: { case: "event", value: { event: part.event, data: part.data } },
        });
      case "comment":
        return create(CreateMessageResponseSchema, { part: { case: "comment", value: part.text } });
      case "settled":
        return create(CreateMessageResponseSchema, {
          part: { case: "settled", value: { charge: part.charge } },
        });
    }
  };

  /**
   * The parts as responses. A non-streaming call's settlement carries its signed receipt (the
   * facade sends it as a header) when `sign`; a stream's headers went out before it settled, so
   * its receipt is fetched with GetReceipt instead of being signed for nobody, as is the receipt
   * of a call whose caller did not ask for it (`omit_receipt`).
   */
  async function* responses(parts: AsyncIterable<MessagePart>, origin: string | undefined, sign: boolean) {
    let stream = true;
    for await (const part of parts) {
      if (part.kind === "head") stream = part.head.stream;
      if (part.kind !== "settled" || stream) {
        yield toResponse(part);
        continue;
      }
      const receipt = sign ? await receipts.forState(part.state, origin) : "";
      yield create(CreateMessageResponseSchema, {
        part: {
          case: "settled",
          value: { charge: part.charge, receipt, paymentResponse: part.paymentResponse ?? "" },
        },
      });
    }
  }

  return {
    ...imageRpcs(images, payingOrKeyless, receipts, idempotency),

    async *createMessage(req, ctx) {
      const key = payingOrKeyless(ctx, req.x402);
      const call = {
        accountId: key.accountId,
        keyId: key.keyId,
        requestId: ctx.requestHeader.get("x-request-id") || newRequestId(),
        body: req.body,
        anthropicVersion: req.anthropicVersion,
        anthropicBeta: req.anthropicBeta,
        billingChain: req.billingChain,
        userAgent: req.clientUserAgent || (ctx.requestHeader.get("user-agent") ?? ""),
        payment: req.payment,
        origin: gatewayOrigin(ctx.requestHeader),
      };
      // A call paid with x402 has no key to fetch its receipt with later: it always carries it.
      const sign = req.x402 || !req.omitReceipt;
      // A keyless call has no account to keep its answer under: its payment pays once anyway.
      // A call without an Idempotency-Key keeps nothing either.
      if (key.accountId === "" || req.idempotencyKey === "") {
        yield* responses(inference.createMessage(call, ctx.signal), call.origin, sign);
        return;
      }
      const start = await startIdempotent(
        idempotency,
        key.accountId,
        req.idempotencyKey,
        "/v1/messages",
        req.body,
      );
      if (start?.kind === "replay") {
        yield* replayedMessage(start.answer);
        return;
      }
      const parts = responses(inference.createMessage(call, ctx.signal), call.origin, sign);
      yield* start === undefined ? parts : recordedMessage(parts, start.claim);
    },

    async countTokens(req, ctx) {
      const key = payingKey(ctx);
      const count = await inference.countTokens({
        keyId: key.keyId,
        requestId: ctx.requestHeader.get("x-request-id") || undefined,
        body: req.body,
        anthropicVersion: req.anthropicVersion,
        anthropicBeta: req.anthropicBeta,
        userAgent: req.clientUserAgent || (ctx.requestHeader.get("user-agent") ?? ""),
      });
      return {
        inputTokens: BigInt(count.inputTokens),
        body: count.body,
        rateLimit: rateLimit(count.rateLimit),
        repairedParams: [...count.repairedParams],
      };
    },

    listModels() {
      return {
        models: inference.models.map((model) =>
          create(ModelSchema, {
            id: model.id,
            displayName: model.displayName,
            createdAt: timestampFromMs(Date.parse(model.createdAt)),
            maxInputTokens: BigInt(model.contextWindow),
            maxTokens: BigInt(model.maxOutputTokens),
            aliases: [...model.aliases],
          }),
        ),
      };
    },
  };
}

/**
 * The API key paying for this call, or — for a call paid with x402 (`x402` set, the facade's
 * `/x402/v1/*` door) — no key (accountId ""), whatever key its caller presented: the call then
 * pays with its payment. Without `x402`, a caller without a key is refused (401 KEY_MISSING).
 */
export function payingOrKeyless(ctx: HandlerContext, x402: boolean): AuthenticatedKey {
  if (x402) return { accountId: "", keyId: "" };
  return payingKey(ctx);
}

/** The API key paying for this call: anonymous callers and the operator cannot pay. */
function payingKey(ctx: HandlerContext): AuthenticatedKey {
  const caller = ctx.values.get(callerKey);
  if (caller.kind === "key") return caller.key;
  throw caller.kind === "anonymous" ? keyMissing() : payingCallerRequired();
}
