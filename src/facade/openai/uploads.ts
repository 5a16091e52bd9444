/**
 * Reading an edits upload (multipart/form-data) as it streams in, with @fastify/multipart
 * (busboy): each reference image is collected once, its type checked by its first bytes as
 * soon as they arrive, and the per-file and per-request limits enforced while reading, so an
 * oversize or wrong upload is refused without being held.
 */
import type {} from "@fastify/multipart";
import type { FastifyRequest } from "fastify";
import { invalidField } from "../../core/errors.js";
import { SNIFF_BYTES, sniffImageType } from "../../core/images/image-formats.js";
import { MAX_REFERENCE_IMAGES } from "../../core/images/image-request.js";
import { isKnownField } from "./images-request.js";

/** Upload limits of `POST /v1/images/edits`. */
export interface UploadLimits {
  /** Largest reference image. */
  readonly maxFileBytes: number;
  /** Largest request body. */
  readonly maxRequestBytes: number;
}

/** An edits request as read: its text fields and its reference images, in order. */
export interface EditUpload {
  readonly fields: Map<string, string>;
  readonly images: { readonly data: Buffer; readonly filename: string }[];
}

/** Longest text field read (a 32,000-character prompt is at most 128 KB of UTF-8). */
export const MAX_FIELD_BYTES = 256 * 1024;
/** Image field names: `image` for one file, `image[]` as the openai SDK sends several. */
const IMAGE_FIELDS = new Set(["image", "image[]"]);

/** The busboy limits the multipart plugin is registered with for the images scope. */
export function busboyLimits(limits: UploadLimits) {
  return {
    fileSize: limits.maxFileBytes,
    // One more than allowed, so a 15th image is seen and refused by name (400), not cut off.
    files: MAX_REFERENCE_IMAGES + 1,
    fields: 32,
    fieldSize: MAX_FIELD_BYTES,
    parts: 64,
  };
}

/** A 413 in the format's envelope (`request_too_large`). */
function tooLarge(message: string): Error {
  return Object.assign(new Error(message), { statusCode: 413 });
}

/** Reads the multipart body of an edits request, enforcing every limit as it streams. */
export async function readEditUpload(request: FastifyRequest, limits: UploadLimits): Promise<EditUpload> {
  if (!request.isMultipart()) {
    throw invalidField("image", "POST /v1/images/edits takes multipart/form-data with image files.");
  }
  const requestLimit = `${mib(limits.maxRequestBytes)} per request`;
  const declared = Number(request.headers["content-length"] ?? Number.NaN);
  if (declared > limits.maxRequestBytes)
    throw tooLarge(`The request body exceeds the limit of ${requestLimit}.`);
  const fields = new Map<string, string>();
  const images: { data: Buffer; filename: string }[] = [];
  let total = 0;
  const fileTooLarge = (name: string) =>
    tooLarge(`Image ${name} exceeds the limit of ${mib(limits.maxFileBytes)} per file.`);
  const count = (bytes: number) => {
    total += bytes;
    if (total > limits.maxRequestBytes)
      throw tooLarge(`The request body exceeds the limit of ${requestLimit}.`);
  };
  try {
    for await (const part of request.parts()) {
      if (part.type === "field") {
        if (!isKnownField(part.fieldname)) {
          throw invalidField(
            part.fieldname,
            `${part.fieldname} is not supported by this gateway; remove it.`,
          );
        }
        if (part.valueTruncated) throw invalidField(part.fieldname, `${part.fieldname} is too long.`);
        if (fields.has(part.fieldname))
          throw invalidField(part.fieldname, `${part.fieldname} is given twice.`);
        const value = String(part.value);
        count(Buffer.byteLength(value));
        fields.set(part.fieldname, value);
        continue;
      }
      if (!IMAGE_FIELDS.has(part.fieldname)) {
        throw invalidField(
          part.fieldname,
          `${part.fieldname} is not supported by this gateway; send images as image or image[].`,
        );
      }
      if (images.length === MAX_REFERENCE_IMAGES) {
        throw invalidField("image", `An edit takes at most ${MAX_REFERENCE_IMAGES} images.`);
      }
      const name = part.filename === "" ? `image ${images.length + 1}` : JSON.stringify(part.filename);
      const chunks: Buffer[] = [];
      let size = 0;
      let checked = false;
      try {
        for await (const chunk of part.file as AsyncIterable<Buffer>) {
          size += chunk.byteLength;
          count(chunk.byteLength);
          chunks.push(chunk);
          if (!checked && size >= SNIFF_BYTES) {
            checked = true;
            checkType(Buffer.concat(chunks), name);
          }
        }
      } catch (error) {
        if (codeOf(error) === "FST_REQ_FILE_TOO_LARGE") throw fileTooLarge(name);
        throw error;
      }
      // busboy stops a file at the limit and marks it truncated (the plugin also errors the form).
      if ((part.file as { truncated?: boolean }).truncated === true) throw fileTooLarge(name);
      // Shorter than a signature: checked now (and refused).
      const data = Buffer.concat(chunks, size);
      if (!checked) checkType(data, name);
      images.push({ data, filename: part.filename });
    }
  } catch (error) {
    switch (codeOf(error)) {
      case "FST_REQ_FILE_TOO_LARGE": {
        const filename = (error as { part?: { filename?: unknown } }).part?.filename;
        throw fileTooLarge(
          typeof filename === "string" && filename !== "" ? JSON.stringify(filename) : "an image",
        );
      }
      case "FST_FILES_LIMIT":
        throw invalidField("image", `An edit takes at most ${MAX_REFERENCE_IMAGES} images.`);
      case "FST_FIELDS_LIMIT":
      case "FST_PARTS_LIMIT":
        throw invalidField("body", "The form has too many fields.");
      case "FST_MP_PREMATURE_CLOSE":
        throw invalidField("body", "The upload ended before the form was complete.");
      default:
        throw error;
    }
  }
  if (images.length === 0)
    throw invalidField("image", "An edit needs at least one image (field image or image[]).");
  return { fields, images };
}

function checkType(head: Buffer, name: string): void {
  if (sniffImageType(head) === undefined) {
    throw invalidField("image", `Image ${name} is not a PNG, JPEG or WebP image (checked by its content).`);
  }
}

function codeOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

function mib(bytes: number): string {
  if (bytes % (1024 * 1024) === 0) return `${bytes / (1024 * 1024)} MiB`;
  return bytes % 1024 === 0 ? `${bytes / 1024} KiB` : `${bytes} bytes`;
}
