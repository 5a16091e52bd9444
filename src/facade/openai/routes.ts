import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { Client } from "@connectrpc/connect";
import multipart from "@fastify/multipart";
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from "fastify";
import type { AuthService } from "../../gen/tollgate/auth/v1/auth_pb.js";
import type { ImageResult, InferenceService } from "../../gen/tollgate/inference/v1/inference_pb.js";
import { admitAnonymousHook, unpaidTooLarge } from "../anonymous-limits.js";
import { authenticateHook } from "../authenticate.js";
import { abortOnDisconnect, coreCall, type Door, header, paymentHeader } from "../core-call.js";
import { PAYMENT_RESPONSE_HEADER, RECEIPT_HEADER, receiptAsked } from "../receipts/header.js";
import { unsupportedType } from "../request-body.js";
import { openaiErrorHandler } from "./envelope.js";
import { editFields, generationFields, imagesResponse } from "./images-request.js";
import { busboyOptions, readEditUpload, type UploadLimits } from "./uploads.js";

/** What the OpenAI-images-format scope needs from the core. */
export interface OpenaiRoutesDeps {
  readonly auth: Client<typeof AuthService>;
  readonly inference: Client<typeof InferenceService>;
  readonly limits: UploadLimits;
  /** The public origin for `url` images; the request's own origin when undefined. */
  readonly publicUrl: string | undefined;
  /**
   * `keyed`: generations, edits (a key pays; none is a 401 before the body is read) and stored
   * images. `x402`: generations and edits paid with x402 (a key sent there is ignored).
   */
  readonly door: Door;
  /** The largest upload a call on x402's door may send before it carries a payment. */
  readonly unpaidUploadBytes: number;
}

/** Where stored images are served, under the scope's prefix (`/v1/images`). */
const FILES_PATH = "/files";
/** A generations body is a prompt and a few scalars. */
const GENERATIONS_BODY_LIMIT = 1024 * 1024;

/**
 * The OpenAI images-format routes, with their own error envelope: generations and edits
 * (authenticated, billed in the core), and the stored images of `url` responses (the
 * unguessable URL is the credential, as with the provider's own image URLs).
 */
export const openaiRoutes: FastifyPluginAsync<OpenaiRoutesDeps> = async (scope, deps) => {
  scope.setErrorHandler(openaiErrorHandler);
  scope.setNotFoundHandler((request, reply) =>
    openaiErrorHandler(
      Object.assign(new Error(`No route ${request.method} ${request.url}.`), { statusCode: 404 }),
      request,
      reply,
    ),
  );
  // Only the deps: the scope's own options carry its prefix, which children would add again.
  const { auth, inference, limits, publicUrl, door, unpaidUploadBytes } = deps;
  const own = { auth, inference, limits, publicUrl, door, unpaidUploadBytes };
  await scope.register(billedImageRoutes, own);
  if (door === "keyed") await scope.register(storedImageRoutes, own);
};

/**
 * Generations and edits: authenticated before the body is read, billed in the core. Each takes
 * one content type, checked before the body is read (a 415 naming it, never a parse error).
 */
const billedImageRoutes: FastifyPluginAsync<OpenaiRoutesDeps> = async (scope, deps) => {
  const { auth, inference, limits, door } = deps;
  if (door === "keyed") scope.addHook("onRequest", authenticateHook(auth));
  // x402's door: limited per client address, and held to a small upload until a call pays.
  else scope.addHook("onRequest", admitAnonymousHook(auth, deps.unpaidUploadBytes));
  const paid = (request: FastifyRequest) => ({
    payment: door === "x402" ? paymentHeader(request) : "",
    x402: door === "x402",
    omitReceipt: !receiptAsked(request),
  });
  await scope.register(multipart, { ...busboyOptions(limits), throwFileSizeLimit: true });

  const generations = { bodyLimit: GENERATIONS_BODY_LIMIT, preParsing: takes("application/json") };
  scope.post("/generations", generations, async (request, reply) => {
    const fields = generationFields(request.body);
    const abort = abortOnDisconnect(reply);
    const { result } = await inference.generateImage(
      {
        ...fields,
        billingChain: header(request, "x-gateway-billing-chain"),
        idempotencyKey: header(request, "idempotency-key"),
        ...paid(request),
      },
      { ...coreCall(request), signal: abort.signal },
    );
    return sendResult(request, reply, result, deps.publicUrl);
  });

  scope.post("/edits", { preParsing: takes("multipart/form-data") }, async (request, reply) => {
    const upload = await readEditUpload(request, unpaidLimits(request, limits)).catch((error: unknown) => {
      // Past the unpaid limit only: say why this call's limit is the smaller one.
      const unpaid = request.unpaidBodyLimit;
      const status = (error as { statusCode?: unknown } | null)?.statusCode;
      throw unpaid !== undefined && status === 413 && unpaid < limits.maxRequestBytes
        ? unpaidTooLarge(unpaid)
        : error;
    });
    const fields = editFields(upload.fields);
    const abort = abortOnDisconnect(reply);
    const { result } = await inference.editImage(
      {
        ...fields,
        billingChain: header(request, "x-gateway-billing-chain"),
        idempotencyKey: header(request, "idempotency-key"),
        ...paid(request),
        images: upload.images.map((image) => ({ data: image.data, filename: image.filename })),
      },
      { ...coreCall(request), signal: abort.signal },
    );
    return sendResult(request, reply, result, deps.publicUrl);
  });
};

/** The upload limits of this request: lowered for a keyless call that carries no payment yet. */
function unpaidLimits(request: FastifyRequest, limits: UploadLimits): UploadLimits {
  const unpaid = request.unpaidBodyLimit;
  if (unpaid === undefined) return limits;
  return {
    maxRequestBytes: Math.min(limits.maxRequestBytes, unpaid),
    maxFileBytes: Math.min(limits.maxFileBytes, unpaid),
  };
}

/** A preParsing hook refusing (415) a body of any other media type than `mediaType`. */
function takes(mediaType: string) {
  return async (request: FastifyRequest) => {
    const type = request.headers["content-type"]?.split(";")[0]?.trim().toLowerCase();
    if (type !== mediaType) throw unsupportedType(request, mediaType);
  };
}

/** `GET /v1/images/files/{token}`: a stored image until it expires, 404 after. No key needed. */
const storedImageRoutes: FastifyPluginAsync<OpenaiRoutesDeps> = async (scope, { inference }) => {
  scope.get<{ Params: { token: string } }>(`${FILES_PATH}/:token`, async (request, reply) => {
    const image = await inference.getStoredImage(
      { token: request.params.token },
      { headers: { "x-request-id": request.id } },
    );
    const expiresAt = image.expiresAt === undefined ? Date.now() : timestampMs(image.expiresAt);
    const maxAge = Math.max(0, Math.floor((expiresAt - Date.now()) / 1000));
    return reply
      .type(image.mimeType)
      .header("cache-control", `private, max-age=${maxAge}`)
      .header("expires", new Date(expiresAt).toUTCString())
      .header("x-content-type-options", "nosniff")
      .send(Buffer.from(image.data));
  });
};

function sendResult(
  request: FastifyRequest,
  reply: FastifyReply,
  result: ImageResult | undefined,
  publicUrl: string | undefined,
) {
  if (result === undefined) throw new Error("the core answered without a result");
  const origin = publicUrl ?? `${request.protocol}://${request.host}`;
  reply.header("x-gateway-billing-chain", result.billingChain);
  request.charge = result.charge;
  if (result.receipt !== "") reply.header(RECEIPT_HEADER, result.receipt);
  if (result.paymentResponse !== "") reply.header(PAYMENT_RESPONSE_HEADER, result.paymentResponse);
  if (result.replayed) reply.header("idempotent-replayed", "true");
  return reply.send(imagesResponse(result, (token) => `${origin}/v1/images${FILES_PATH}/${token}`));
}
