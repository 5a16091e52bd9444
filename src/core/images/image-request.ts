/**
 * Validation of an image call's fields, pure: each failure is INVALID_FIELD naming the field
 * as the images format calls it (`model`, `prompt`, `size`, `aspect_ratio`, `n`, `image`).
 */

import { type ImageSize, isImageSize } from "../billing/price-catalog.js";
import { invalidField } from "../errors.js";
import { type ImageMimeType, sniffImageType } from "./image-formats.js";
import {
  ASPECT_RATIOS,
  type AspectRatio,
  type ImageModel,
  type ImageModelCatalog,
  isAspectRatio,
} from "./image-models.js";

/** The longest prompt accepted (the images format's limit for GPT image models). */
export const MAX_PROMPT_CHARS = 32_000;
/** The most reference images an edit may carry (the Gemini image models' limit). */
export const MAX_REFERENCE_IMAGES = 14;

/** An image call's fields as they arrive (RPC or facade). */
export interface ImageFields {
  readonly model: string;
  readonly prompt: string;
  /** "" means 1K. */
  readonly size: string;
  /** "" means 1:1. */
  readonly aspectRatio: string;
  /** 0 means 1. */
  readonly n: number;
  /** Undefined for a generation; the uploaded files for an edit. */
  readonly references: readonly { readonly data: Uint8Array; readonly filename: string }[] | undefined;
}

/** A validated image call. */
export interface ImageParams {
  readonly model: ImageModel;
  readonly prompt: string;
  readonly size: ImageSize;
  readonly aspectRatio: AspectRatio;
  readonly references: readonly { readonly data: Uint8Array; readonly mimeType: ImageMimeType }[];
}

/** Validates an image call against the served models; throws INVALID_FIELD on the first fault. */
export function parseImageFields(fields: ImageFields, models: ImageModelCatalog): ImageParams {
  const served = models.models.map((m) => m.id).join(", ");
  if (fields.model === "") throw invalidField("model", `model is required: one of ${served}.`);
  const model = models.resolve(fields.model);
  if (model === undefined) {
    throw invalidField(
      "model",
      `model ${JSON.stringify(fields.model)} is not served here; use one of ${served}.`,
    );
  }
  if (fields.prompt.trim() === "") throw invalidField("prompt", "prompt is required and must not be blank.");
  if (fields.prompt.length > MAX_PROMPT_CHARS) {
    throw invalidField("prompt", `prompt must be at most ${MAX_PROMPT_CHARS} characters.`);
  }
  const size = fields.size === "" ? "1K" : fields.size;
  if (!isImageSize(size)) {
    throw invalidField(
      "size",
      `size must be 1K, 2K or 4K (the shape is set by aspect_ratio); got ${JSON.stringify(fields.size)}.`,
    );
  }
  if (!model.sizes.includes(size)) {
    throw invalidField(
      "size",
      `size ${size} is not offered by ${model.id}; it offers ${model.sizes.join(", ")}.`,
    );
  }
  const aspectRatio = fields.aspectRatio === "" ? "1:1" : fields.aspectRatio;
  if (!isAspectRatio(aspectRatio)) {
    throw invalidField(
      "aspect_ratio",
      `aspect_ratio must be one of ${ASPECT_RATIOS.join(", ")}; got ${JSON.stringify(fields.aspectRatio)}.`,
    );
  }
  if (fields.n !== 0 && fields.n !== 1) {
    throw invalidField("n", `n must be 1: the gateway generates one image per request; got ${fields.n}.`);
  }
  return { model, prompt: fields.prompt, size, aspectRatio, references: references(fields.references) };
}

function references(files: ImageFields["references"]): ImageParams["references"] {
  if (files === undefined) return [];
  if (files.length === 0) throw invalidField("image", "An edit needs at least one image.");
  if (files.length > MAX_REFERENCE_IMAGES) {
    throw invalidField("image", `An edit takes at most ${MAX_REFERENCE_IMAGES} images; got ${files.length}.`);
  }
  return files.map((file, index) => {
    const mimeType = sniffImageType(file.data);
    if (mimeType === undefined) {
      const name = file.filename === "" ? `image ${index + 1}` : JSON.stringify(file.filename);
      throw invalidField("image", `${name} is not a PNG, JPEG or WebP image (checked by its content).`);
    }
    return { data: file.data, mimeType };
  });
}
