import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import {
  GeneratedImageSchema,
  ImageResponseFormat,
  type ImageResult,
  ImageResultSchema,
  type InferenceService,
} from "../../gen/tollgate/inference/v1/inference_pb.js";
import type { AuthenticatedKey } from "../auth/authenticator.js";
import { newRequestId } from "../ids.js";
import type { ImageCall, ImageCallResult, ImageInference } from "./image-inference.js";

/** The image RPCs of InferenceService. */
export type ImageRpcs = Pick<
  ServiceImpl<typeof InferenceService>,
  "generateImage" | "editImage" | "getStoredImage"
>;

/** The scalar fields GenerateImage and EditImage share. */
interface ImageRequestFields {
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
 * caller, request id and proto mapping. `payingKey` is the text service's caller rule.
 */
export function imageRpcs(
  images: ImageInference | undefined,
  payingKey: (ctx: HandlerContext) => AuthenticatedKey,
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
    const key = payingKey(ctx);
    return {
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
  return {
    async generateImage(req, ctx) {
      const result = await served().run(call(req, ctx, undefined), ctx.signal);
      return { result: toResult(result) };
    },
    async editImage(req, ctx) {
      const references = req.images.map((image) => ({ data: image.data, filename: image.filename }));
      const result = await served().run(call(req, ctx, references), ctx.signal);
      return { result: toResult(result) };
    },
    async getStoredImage(req) {
      const image = await served().stored(req.token);
      return { data: image.data, mimeType: image.mimeType, expiresAt: timestampFromMs(image.expiresAt) };
    },
  };
}

function toResult(result: ImageCallResult): ImageResult {
  return create(ImageResultSchema, {
    requestId: result.requestId,
    billingChain: result.billingChain,
    created: timestampFromMs(result.created),
    model: result.model,
    size: result.size,
    aspectRatio: result.aspectRatio,
    text: result.text,
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
