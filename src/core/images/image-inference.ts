import { Code, ConnectError } from "@connectrpc/connect";
import type { CallBilling } from "../billing/call-billing.js";
import { NO_USAGE } from "../billing/pricing.js";
import type { X402Payments } from "../billing/x402.js";
import { isStorageFull, storageFull } from "../errors.js";
import { admitCaller, type PaidCaller } from "../inference/admission.js";
import { holdPaidCall } from "../inference/hold.js";
import { upstreamError } from "../inference/inference-errors.js";
import { settledCall } from "../inference/settlement.js";
import {
  type UpstreamErrorSink,
  upstreamFailureError,
  upstreamStatusError,
} from "../inference/upstream-errors.js";
import type { ImageStore, StoredImage } from "../ports/image-store.js";
import type { HoldState } from "../ports/ledger.js";
import type { Log } from "../ports/log.js";
import type { Metrics } from "../ports/metrics.js";
import type { ImageInput, ImageUpstream } from "../ports/providers.js";
import type { RateLimiter } from "../ports/rate-limits.js";
import type { X402Settlement } from "../ports/x402.js";
import { imageNotFound, imageRefused } from "./image-errors.js";
import { type ImageMimeType, sniffImageType } from "./image-formats.js";
import type { ImageAdapter, ImageModelCatalog } from "./image-models.js";
import { pixelSize } from "./image-models.js";
import { type ImageFields, type ImageParams, parseImageFields } from "./image-request.js";
import { isImageToken, newImageToken } from "./image-tokens.js";

/** What image inference is built from. */
export interface ImageInferenceDeps {
  /** Hold, settle and release, each answered once durable (grouped with other calls in flight). */
  readonly billing: CallBilling;
  readonly models: ImageModelCatalog;
  /** The configured provider per wire format; a model routed to a missing one gets 503. */
  readonly upstreams: Readonly<Partial<Record<ImageAdapter, ImageUpstream>>>;
  readonly store: ImageStore;
  /** How long a `url` image is served. */
  readonly urlTtlMs: number;
  /** Per-key limit on image calls. */
  readonly limit: RateLimiter;
  /** Told how long the provider took to answer each call. */
  readonly metrics: Metrics;
  readonly now: () => number;
  /** Told of failures that are masked for the caller. */
  readonly log: Log;
  /** Calls paid with x402 instead of a key; a keyless call is refused (401) without it. */
  readonly x402?: X402Payments;
}

/** A paying caller's image call, as the Inference service hands it over. */
export interface ImageCall extends ImageFields, PaidCaller {
  readonly responseFormat: "b64_json" | "url";
}

/** One delivered image: its bytes, or the token of its stored copy. */
export type DeliveredImage =
  | { readonly kind: "data"; readonly data: Uint8Array; readonly mimeType: ImageMimeType }
  | {
      readonly kind: "url";
      readonly token: string;
      readonly mimeType: ImageMimeType;
      readonly expiresAt: number;
    };

/** A finished image call. */
export interface ImageCallResult {
  readonly requestId: string;
  readonly billingChain: string;
  /** Unix milliseconds. */
  readonly created: number;
  readonly model: string;
  readonly size: string;
  readonly aspectRatio: string;
  readonly images: readonly DeliveredImage[];
  readonly text: string;
  /** What the call was charged, in the chain's ledger units. */
  readonly charge: bigint;
  /** The call's hold and its settlement, for its receipt. */
  readonly state: HoldState;
  /** An x402 call's collection, as its PAYMENT-RESPONSE header says it. */
  readonly paymentResponse?: string;
}

/**
 * Image calls, end to end: rate limit, validation, the hold of the model's per-image price at
 * the requested size, the provider call, storage for `url`, and the charge — only once an
 * image is in hand. Every failure releases the hold (nothing charged). Transport-free: the
 * Inference service adapts it to RPCs.
 */
export class ImageInference {
  constructor(private readonly deps: ImageInferenceDeps) {}

  /** Runs one generation (no references) or edit (`references` set). */
  async run(given: ImageCall, signal: AbortSignal): Promise<ImageCallResult> {
    const admitted = await admitCaller(this.deps, this.deps.limit, given);
    const params = parseImageFields(given, this.deps.models);
    const { model, size, aspectRatio } = params;
    const upstream = this.deps.upstreams[model.route.adapter];
    if (upstream === undefined) {
      throw upstreamError(`no ${model.route.adapter} image provider is configured for ${model.id}`);
    }
    const spec = { kind: "image", model: model.id, size, count: 1 } as const;
    // x402 `exact`: the listed price of the one image. Funds first: a call the wallet cannot
    // cover never reaches the provider.
    const path = given.references === undefined ? "/x402/v1/images/generations" : "/x402/v1/images/edits";
    const paid = { spec, route: { kind: "image", path } as const, admitted };
    const { call, payment, hold } = await holdPaidCall(this.deps, this.deps.limit, given, paid);
    const holdId = hold.hold.id;
    /** Whether the hold is charged (or, for x402, its charge collected): it is then not released. */
    let charged = false;
    // An x402 payment not yet closed when the call ends: closed as unused (nothing collected).
    let open = payment;
    try {
      const sentAt = performance.now();
      const image = await this.fetchImage(upstream, params, signal, call.requestId);
      this.deps.metrics.providerAnswered(call.requestId, "image", (performance.now() - sentAt) / 1000);
      const delivered = await this.deliver(image.image, call.responseFormat, call.requestId);
      // A client gone before the answer could be written receives nothing, so pays nothing.
      if (signal.aborted) throw new ConnectError("The client cancelled the call.", Code.Canceled);
      // An x402 image is paid before it is handed over: a payment the chain refuses gets
      // nothing (closed, and the hold released below). A collection is recorded before the
      // ledger's settle: should that settle not happen (a crash, a store failure), the payment
      // stays `collected`, its hold is never swept, and the recovery pass settles it.
      let collected: X402Settlement | undefined;
      if (payment !== undefined) {
        open = undefined;
        // Collected or refused, the hold is no longer this call's to release: collected, it is
        // the recovery pass's to settle should the settle below fail; refused, it was released.
        charged = true;
        collected = await this.deps.x402!.collectBeforeDelivery(payment, payment.authorised, () =>
          this.deps.billing.release(holdId),
        );
      }
      // Only the endpoint that returned the image is charged for; its row names it.
      const usage = {
        ...NO_USAGE,
        images: 1,
        ...(image.endpoint === "" ? {} : { endpoint: image.endpoint }),
      };
      const { state } = await this.deps.billing.settleDelivered(hold.hold, usage);
      charged = true;
      return {
        requestId: call.requestId,
        billingChain: hold.hold.chain,
        created: this.deps.now(),
        model: model.id,
        size,
        aspectRatio,
        images: [delivered],
        text: image.text,
        ...(await settledCall(this.deps, state, payment, collected)),
      };
    } finally {
      if (!charged) await this.release(holdId, call.requestId);
      if (open !== undefined) await this.deps.x402!.close(open, 0n, undefined);
    }
  }

  /** A stored `url` image; NotFound when the token is unknown or expired. */
  async stored(token: string): Promise<StoredImage> {
    if (!isImageToken(token)) throw imageNotFound();
    const image = await this.deps.store.get(token, this.deps.now());
    if (image === undefined) throw imageNotFound();
    return image;
  }

  /** Removes expired `url` images; resolves to how many. */
  sweepStored(): Promise<number> {
    return this.deps.store.sweep(this.deps.now());
  }

  /** Calls the provider; anything but a real image is the matching error. */
  private async fetchImage(
    upstream: ImageUpstream,
    params: ImageParams,
    signal: AbortSignal,
    requestId: string,
  ): Promise<{ image: { data: Uint8Array; mimeType: ImageMimeType }; text: string; endpoint: string }> {
    let outcome: Awaited<ReturnType<ImageUpstream["generate"]>>;
    const sink: UpstreamErrorSink = (error, context) =>
      this.deps.log.error({ err: error, requestId }, context);
    try {
      outcome = await upstream.generate({
        upstreamModel: params.model.route.upstreamModel,
        model: params.model.id,
        prompt: params.prompt,
        size: params.size,
        aspectRatio: params.aspectRatio,
        ...pixelSize(params.size, params.aspectRatio),
        references: params.references,
        signal,
      });
    } catch (error) {
      throw upstreamFailureError(error, signal, sink);
    }
    switch (outcome.kind) {
      case "http-error":
        throw upstreamStatusError(outcome.status, outcome.body, outcome.retryAfter, sink);
      case "refused":
        throw imageRefused(outcome.detail);
      case "empty":
        throw upstreamError(`no image was returned: ${outcome.detail}`);
      case "images": {
        const image = firstImage(outcome.images);
        if (image === undefined) throw upstreamError("what was returned is not a PNG, JPEG or WebP image");
        return { image, text: outcome.text, endpoint: outcome.endpoint ?? "" };
      }
    }
  }

  /** The image as the caller asked for it: its bytes, or stored behind a fresh token. */
  private async deliver(
    image: { data: Uint8Array; mimeType: ImageMimeType },
    format: ImageCall["responseFormat"],
    requestId: string,
  ): Promise<DeliveredImage> {
    if (format === "b64_json") return { kind: "data", ...image };
    const token = newImageToken();
    const expiresAt = this.deps.now() + this.deps.urlTtlMs;
    try {
      await this.deps.store.put(token, { ...image, expiresAt });
    } catch (error) {
      this.deps.log.error({ err: error, requestId }, "storing an image failed");
      const lead = "The image could not be stored; nothing was charged.";
      // A full disk is the gateway's to fix, and passes: a 503 the caller may retry.
      if (isStorageFull(error)) throw storageFull(lead);
      throw new ConnectError(lead, Code.Internal);
    }
    return { kind: "url", token, mimeType: image.mimeType, expiresAt };
  }

  private async release(holdId: string, requestId: string): Promise<void> {
    try {
      await this.deps.billing.release(holdId);
    } catch (error) {
      this.deps.log.error({ err: error, requestId, holdId }, "releasing a hold failed");
    }
  }
}

/** The first returned image whose bytes really are an image, typed by its content. */
function firstImage(
  images: readonly ImageInput[],
): { data: Uint8Array; mimeType: ImageMimeType } | undefined {
  for (const image of images) {
    const mimeType = sniffImageType(image.data);
    if (mimeType !== undefined) return { data: image.data, mimeType };
  }
  return undefined;
}
