/**
 * The port between the image core and the image providers: one request in the gateway's
 * terms (upstream model, prompt, size, ratio, reference images), one outcome back. Each wire
 * format (gemini/, openai/) implements it; the core maps outcomes onto its errors and billing.
 */
import { readBody, type UpstreamResponse } from "./pool.js";

/** A reference image, already checked to be PNG, JPEG or WebP. */
export interface ImageInput {
  readonly data: Uint8Array;
  readonly mimeType: string;
}

/** One image call as a provider adapter receives it. */
export interface ImageUpstreamRequest {
  /** The provider's model id (e.g. `gemini-3-pro-image-preview`). */
  readonly upstreamModel: string;
  readonly prompt: string;
  /** `1K`, `2K` or `4K`. */
  readonly size: string;
  /** e.g. `16:9`. */
  readonly aspectRatio: string;
  /** The pixel size the size and ratio imply, for providers that take pixels. */
  readonly width: number;
  readonly height: number;
  /** Reference images for an edit; empty for a generation. */
  readonly references: readonly ImageInput[];
  readonly signal?: AbortSignal | undefined;
}

/** What a provider answered. Failures without an HTTP answer throw UpstreamFailure instead. */
export type ImageUpstreamOutcome =
  /** At least one image (bytes as the provider sent them; the core checks their type). */
  | { readonly kind: "images"; readonly images: readonly ImageInput[]; readonly text: string }
  /** The provider declined (safety, policy): `detail` says why, in its words. */
  | { readonly kind: "refused"; readonly detail: string }
  /** A 200 without any image and without a stated refusal. */
  | { readonly kind: "empty"; readonly detail: string }
  /** A non-200 answer; `body` is its text (read up to a limit). */
  | {
      readonly kind: "http-error";
      readonly status: number;
      readonly body: string;
      readonly retryAfter: string | undefined;
    };

/** A provider of images in one wire format. */
export interface ImageUpstream {
  generate(request: ImageUpstreamRequest): Promise<ImageUpstreamOutcome>;
  close(): Promise<void>;
}

/** A non-200 answer as an outcome: its body read (up to 1 MiB) and its `retry-after`. */
export async function httpErrorOutcome(response: UpstreamResponse): Promise<ImageUpstreamOutcome> {
  const body = await readBody(response.body, 1024 * 1024).catch(() => "");
  const retryAfter = response.headers["retry-after"];
  return {
    kind: "http-error",
    status: response.status,
    body,
    retryAfter: Array.isArray(retryAfter) ? retryAfter[0] : retryAfter,
  };
}
