import { create, type DescMessage, fromBinary, type MessageShape, toBinary } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import {
  EditImageRequestSchema,
  GeneratedImageSchema,
  GenerateImageRequestSchema,
  ImageResponseFormat,
  type ImageResult,
  ImageResultSchema,
  type InferenceService,
} from "../../gen/tollgate/inference/v1/inference_pb.js";
import type { AuthenticatedKey } from "../auth/authenticator.js";
import { gatewayOrigin, type Receipts } from "../billing/receipts.js";
import { newRequestId } from "../ids.js";
import { type IdempotentCalls, startIdempotent } from "../inference/idempotency.js";
import type { ImageCall, ImageCallResult, ImageInference } from "./image-inference.js";

/** The image RPCs of InferenceService. */
export type ImageRpcs = Pick<
  ServiceImpl<typeof InferenceService>,
  "generateImage" | "editImage" | "getStoredImage"
>;

/** The scalar fields GenerateImage and EditImage share. */
interface ImageRequestFields {
  readonly payment: string;
  readonly x402: boolean;
  readonly model: string;
  readonly prompt: string;
  readonly size: string;
  readonly aspectRatio: string;
  readonly n: number;
  readonly responseFormat: ImageResponseFormat;
  readonly billingChain: string;
}

/**
 * The image RPCs over {@link ImageInference} (or Unimplemented when the core serves no images):
 * caller, request id, idempotency keys and proto mapping. `payingKey` is the text service's
 * caller rule.
 */
export function imageRpcs(
  images: ImageInference | undefined,
  payingKey: (ctx: HandlerContext, x402: boolean) => AuthenticatedKey,
  receipts: Receipts,
  idempotency?: IdempotentCalls,
): ImageRpcs {
  const served = (): ImageInference => {
    if (images === undefined) throw new ConnectError("This core serves no images.", Code.Unimplemented);
    return images;
  };
  const call = (
    req: ImageRequestFields,
    ctx: HandlerContext,
    references: ImageCall["references"],
  ): ImageCall => {
    const key = payingKey(ctx, req.x402);
    return {
      payment: req.payment,
      origin: gatewayOrigin(ctx.requestHeader),
      accountId: key.accountId,
      keyId: key.keyId,
      requestId: ctx.requestHeader.get("x-request-id") || newRequestId(),
      billingChain: req.billingChain,
      model: req.model,
      prompt: req.prompt,
      size: req.size,
      aspectRatio: req.aspectRatio,
      n: req.n,
      responseFormat: req.responseFormat === ImageResponseFormat.URL ? "url" : "b64_json",
      references,
    };
  };
  /**
   * Runs an image call once per idempotency key: a retry of the same request (every field but
   * the key equal) gets the kept result, marked replayed; a call that failed charged nothing
   * and frees its key.
   */
  const once = async <Desc extends DescMessage>(
    schema: Desc,
    req: MessageShape<Desc> & { idempotencyKey: string; x402: boolean; omitReceipt: boolean },
    ctx: HandlerContext,
    route: string,
    run: () => Promise<ImageCallResult>,
  ): Promise<ImageResult> => {
    // Whether the answer carries its receipt is not part of the request a retry must repeat.
    const request = toBinary(schema, { ...req, idempotencyKey: "", omitReceipt: false });
    const accountId = payingKey(ctx, req.x402).accountId;
    // A keyless call has no account to keep its answer under: its payment pays once anyway.
    const start = await startIdempotent(
      idempotency,
      accountId,
      accountId === "" ? "" : req.idempotencyKey,
      route,
      request,
    );
    if (start?.kind === "replay")
      return { ...fromBinary(ImageResultSchema, start.answer), replayed: true, charge: 0n };
    let result: ImageResult;
    try {
      const ran = await run();
      // Signed when asked for (not `omit_receipt`), and always for a call paid with x402, which has
      // no key to fetch it with later.
      const sign = req.x402 || !req.omitReceipt;
      result = toResult(
        ran,
        sign ? await receipts.forState(ran.state, gatewayOrigin(ctx.requestHeader)) : "",
      );
    } catch (error) {
      await start?.claim.release();
      throw error;
    }
    await start?.claim.complete(toBinary(ImageResultSchema, result));
    return result;
  };
  return {
    async generateImage(req, ctx) {
      const run = () => served().run(call(req, ctx, undefined), ctx.signal);
      return { result: await once(GenerateImageRequestSchema, req, ctx, "/v1/images/generations", run) };
    },
    async editImage(req, ctx) {
      const references = req.images.map((image) => ({ data: image.data, filename: image.filename }));
      const run = () => served().run(call(req, ctx, references), ctx.signal);
      return { result: await once(EditImageRequestSchema, req, ctx, "/v1/images/edits", run) };
    },
    async getStoredImage(req) {
      const image = await served().stored(req.token);
      return { data: image.data, mimeType: image.mimeType, expiresAt: timestampFromMs(image.expiresAt) };
    },
  };
}

function toResult(result: ImageCallResult, receipt: string): ImageResult {
  return create(ImageResultSchema, {
    receipt,
    paymentResponse: result.paymentResponse ?? "",
    requestId: result.requestId,
    billingChain: result.billingChain,
    created: timestampFromMs(result.created),
    model: result.model,
    size: result.size,
    aspectRatio: result.aspectRatio,
    text: result.text,
    charge: result.charge,
    images: result.images.map((image) =>
      image.kind === "data"
        ? create(GeneratedImageSchema, {
            result: { case: "data", value: image.data },
            mimeType: image.mimeType,
          })
        : create(GeneratedImageSchema, {
            result: { case: "urlToken", value: image.token },
            mimeType: image.mimeType,
            expiresAt: timestampFromMs(image.expiresAt),
          }),
    ),
  });
}
