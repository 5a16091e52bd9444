/**
 * Reading an edits upload (multipart/form-data) as it streams in, with @fastify/multipart
 * (busboy): each reference image is collected once, its type checked by its first bytes as
 * soon as they arrive, and the per-file and per-request limits enforced while reading, so an
 * oversize or wrong upload is refused without being held. A form busboy cannot parse (no
 * boundary, a boundary the body does not use, a truncated body) is a 400 naming the problem.
 */
import type { Multipart, MultipartFile } from "@fastify/multipart";
import type { FastifyRequest } from "fastify";
import { invalidField } from "../../core/errors.js";
import { SNIFF_BYTES, sniffImageType } from "../../core/images/image-formats.js";
import { MAX_REFERENCE_IMAGES } from "../../core/images/image-request.js";
import { formatBytes } from "../request-body.js";
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

/**
 * The busboy options the multipart plugin is registered with for the images scope. An image
 * field is a file whether or not its part names a filename, so its bytes obey the file limit
 * and its type check rather than being read as text.
 */
export function busboyOptions(limits: UploadLimits) {
  return {
    limits: {
      fileSize: limits.maxFileBytes,
      // One more than allowed, so a 15th image is seen and refused by name (400), not cut off.
      files: MAX_REFERENCE_IMAGES + 1,
      fields: 32,
      fieldSize: MAX_FIELD_BYTES,
      parts: 64,
    },
    isPartAFile: (name: string | undefined, contentType: string | undefined, filename: string | undefined) =>
      IMAGE_FIELDS.has(name ?? "") || contentType === "application/octet-stream" || filename !== undefined,
  };
}

/** A 413 in the format's envelope (`request_too_large`). */
function tooLarge(message: string): Error {
  return Object.assign(new Error(message), { statusCode: 413 });
}

/** Reads the multipart body of an edits request, enforcing every limit as it streams. */
export async function readEditUpload(request: FastifyRequest, limits: UploadLimits): Promise<EditUpload> {
  const requestTooLarge = () =>
    tooLarge(`The request body exceeds the limit of ${formatBytes(limits.maxRequestBytes)} per request.`);
  const declared = Number(request.headers["content-length"] ?? Number.NaN);
  if (declared > limits.maxRequestBytes) throw requestTooLarge();
  const fields = new Map<string, string>();
  const images: { data: Buffer; filename: string }[] = [];
  let total = 0;
  const count = (bytes: number) => {
    total += bytes;
    if (total > limits.maxRequestBytes) throw requestTooLarge();
  };
  let parts = 0;
  for await (const part of fromForm(request.parts(), () => parts > 0)) {
    parts++;
    if (!part.fieldname) {
      throw invalidField(
        "body",
        `A form part has ${part.fieldname === "" ? "an empty name" : "no name"}: each part's Content-Disposition needs name="…".`,
      );
    }
    if (part.type === "field") {
      const value = readField(part);
      if (fields.has(part.fieldname)) throw invalidField(part.fieldname, `${part.fieldname} is given twice.`);
      count(Buffer.byteLength(value));
      fields.set(part.fieldname, value);
    } else {
      if (images.length === MAX_REFERENCE_IMAGES) {
        throw invalidField("image", `An edit takes at most ${MAX_REFERENCE_IMAGES} images.`);
      }
      images.push(await readImage(part, images.length + 1, limits, count));
    }
  }
  if (images.length === 0)
    throw invalidField("image", "An edit needs at least one image (field image or image[]).");
  return { fields, images };
}

/** A text field's value, refused when the gateway does not read the field or it is not plain text. */
function readField(part: Extract<Multipart, { type: "field" }>): string {
  const name = part.fieldname;
  if (!isKnownField(name)) throw invalidField(name, `${name} is not supported by this gateway; remove it.`);
  if (part.valueTruncated) throw invalidField(name, `${name} is too long.`);
  // The plugin parses a part declared as application/json; the format's fields are plain text.
  if (typeof part.value !== "string" || part.mimetype.startsWith("application/json")) {
    throw invalidField(name, `${name} must be plain text, not ${part.mimetype}.`);
  }
  return part.value;
}

/**
 * One reference image, read to its end. Refused as soon as its first bytes show it is not an
 * image, its size passes the file limit (busboy's `limit` event: the rest of the part is not
 * waited for), or the request passes its limit (`count` throws).
 */
async function readImage(
  part: MultipartFile,
  position: number,
  limits: UploadLimits,
  count: (bytes: number) => void,
): Promise<{ data: Buffer; filename: string }> {
  if (!IMAGE_FIELDS.has(part.fieldname)) {
    throw invalidField(
      part.fieldname,
      isKnownField(part.fieldname)
        ? `${part.fieldname} must be a text field, not a file.`
        : `${part.fieldname} is not supported by this gateway; send images as image or image[].`,
    );
  }
  const name = part.filename ? JSON.stringify(part.filename) : `image ${position}`;
  part.file.once("limit", () =>
    part.file.destroy(
      tooLarge(`Image ${name} exceeds the limit of ${formatBytes(limits.maxFileBytes)} per file.`),
    ),
  );
  const chunks: Buffer[] = [];
  let size = 0;
  let checked = false;
  for await (const chunk of fromForm(part.file as AsyncIterable<Buffer>, () => true)) {
    size += chunk.byteLength;
    count(chunk.byteLength);
    chunks.push(chunk);
    if (!checked && size >= SNIFF_BYTES) {
      checked = true;
      checkType(Buffer.concat(chunks), name);
    }
  }
  // Shorter than a signature: checked now (and refused).
  const data = Buffer.concat(chunks, size);
  if (!checked) checkType(data, name);
  return { data, filename: part.filename ?? "" };
}

function checkType(head: Buffer, name: string): void {
  if (sniffImageType(head) === undefined) {
    throw invalidField("image", `Image ${name} is not a PNG, JPEG or WebP image (checked by its content).`);
  }
}

/**
 * `source` (the form's parts, or one file's bytes) with its own errors — the parser's, never
 * the consumer's — turned into the answers the client should see. `sawPart` tells a body
 * truncated after its first part from one whose boundary never matched.
 */
async function* fromForm<T>(source: AsyncIterable<T>, sawPart: () => boolean): AsyncGenerator<T> {
  try {
    yield* source;
  } catch (error) {
    throw formError(error, sawPart());
  }
}

/**
 * An error of the multipart plugin or of busboy as the error the client gets. The plugin's
 * carry codes; busboy's carry only their text, so the ones with a clearer answer are matched by
 * it, and any other is still a 400 quoting it: all come from the body the client sent.
 */
function formError(error: unknown, sawPart: boolean): unknown {
  const code = (error as { code?: unknown } | null)?.code;
  switch (code) {
    case "FST_FILES_LIMIT":
      return invalidField("image", `An edit takes at most ${MAX_REFERENCE_IMAGES} images.`);
    case "FST_FIELDS_LIMIT":
    case "FST_PARTS_LIMIT":
      return invalidField("body", "The form has too many fields.");
    case "FST_MP_PREMATURE_CLOSE":
      return invalidField("body", "The upload ended before the form was complete.");
    case "FST_PROTO_VIOLATION":
      return invalidField("body", "A form field is named after a built-in property (such as __proto__).");
    case "FST_INVALID_JSON_FIELD_ERROR":
      return invalidField("body", "A form field declared as application/json is not valid JSON.");
  }
  // Ours (a limit, a refused image) and the plugin's other errors already carry their status.
  if (typeof (error as { statusCode?: unknown } | null)?.statusCode === "number") return error;
  const message = error instanceof Error ? error.message : String(error);
  if (message === "Multipart: Boundary not found") {
    return invalidField(
      "body",
      "Content-Type multipart/form-data has no boundary parameter (multipart/form-data; boundary=…).",
    );
  }
  if (message.includes("needle cannot have a length bigger than")) {
    return invalidField("body", "The boundary in Content-Type is too long.");
  }
  if (/unexpected end of multipart data/i.test(message)) {
    return invalidField(
      "body",
      sawPart
        ? "The form is truncated: the body ended before its closing boundary."
        : "The form ended before its first part was complete: the body does not use the boundary given in Content-Type, or it is truncated.",
    );
  }
  return invalidField("body", `The body is not a valid multipart/form-data form: ${message}`);
}
