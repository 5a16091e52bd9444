/**
 * The OpenAI images format ⇄ the core's image RPCs, as pure translation: request fields in
 * (JSON for generations, multipart text fields for edits), `ImagesResponse` out. Type and
 * shape checks happen here (a 400 naming the field); the values (model, prompt, size, ratio, n,
 * files) are the core's to judge.
 */

import { timestampMs } from "@bufbuild/protobuf/wkt";
import { invalidField } from "../../core/errors.js";
import { ImageResponseFormat, type ImageResult } from "../../gen/tollgate/inference/v1/inference_pb.js";

/** The scalar fields of an image call, as the core's requests take them. */
export interface ImageRequestFields {
  readonly model: string;
  readonly prompt: string;
  readonly size: string;
  readonly aspectRatio: string;
  readonly n: number;
  readonly responseFormat: ImageResponseFormat;
}

const INT32_MAX = 2 ** 31 - 1;

type FieldKind = "string" | "integer" | "format" | "ignored" | "false-only";

/**
 * The fields the gateway reads. `user` is accepted and ignored (it is only an end-user tag);
 * `stream` only as false. Every other field of the format (quality, background, output_format,
 * style, mask, …) is refused by name rather than silently dropped: the gateway cannot honour it.
 */
const FIELDS: Readonly<Record<string, FieldKind>> = {
  model: "string",
  prompt: "string",
  size: "string",
  aspect_ratio: "string",
  n: "integer",
  response_format: "format",
  user: "ignored",
  stream: "false-only",
};

/** Fields of a JSON generations body, checked for type; unknown fields are a 400 naming them. */
export function generationFields(body: unknown): ImageRequestFields {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw invalidField("body", "The request body must be a JSON object.");
  }
  const values = new Map<string, unknown>(Object.entries(body));
  return fieldsFrom(values, (field, value, kind) => {
    if (value === null) return undefined;
    switch (kind) {
      case "integer":
        if (typeof value !== "number" || !Number.isInteger(value)) {
          throw invalidField(field, `${field} must be an integer.`);
        }
        return value;
      case "false-only":
        if (value !== false) throw invalidField(field, `${field}: streaming is not supported; omit it.`);
        return value;
      default:
        if (typeof value !== "string") throw invalidField(field, `${field} must be a string.`);
        return value;
    }
  });
}

/** Fields of a multipart edits body (every value a string), checked the same way. */
export function editFields(values: ReadonlyMap<string, string>): ImageRequestFields {
  return fieldsFrom(values, (field, value, kind) => {
    const text = value as string;
    switch (kind) {
      case "integer":
        if (!/^-?\d+$/.test(text)) throw invalidField(field, `${field} must be an integer.`);
        return Number(text);
      case "false-only":
        if (text !== "false") throw invalidField(field, `${field}: streaming is not supported; omit it.`);
        return false;
      default:
        return text;
    }
  });
}

/** Whether a multipart text field of this name is one the gateway reads (or ignores). */
export function isKnownField(name: string): boolean {
  return Object.hasOwn(FIELDS, name);
}

function fieldsFrom(
  values: ReadonlyMap<string, unknown>,
  read: (field: string, value: unknown, kind: FieldKind) => unknown,
): ImageRequestFields {
  const out = new Map<string, unknown>();
  for (const [field, value] of values) {
    const kind = FIELDS[field];
    if (kind === undefined) {
      throw invalidField(field, `${field} is not supported by this gateway; remove it.`);
    }
    out.set(field, read(field, value, kind));
  }
  const text = (field: string) => (out.get(field) as string | undefined) ?? "";
  const format = text("response_format");
  if (format !== "" && format !== "b64_json" && format !== "url") {
    throw invalidField(
      "response_format",
      `response_format must be b64_json or url; got ${JSON.stringify(format)}.`,
    );
  }
  const n = out.get("n") as number | undefined;
  // 0 is proto3's "unset" in the core's request, and the field is an int32: values the core
  // could not tell apart or receive are refused here; the core judges the rest.
  if (n !== undefined && (n < 1 || n > INT32_MAX)) throw invalidField("n", `n must be 1; got ${n}.`);
  return {
    model: text("model"),
    prompt: text("prompt"),
    size: text("size"),
    aspectRatio: text("aspect_ratio"),
    // Absent is 1; any other count is the core's to refuse (it names `n`).
    n: n ?? 1,
    responseFormat: format === "url" ? ImageResponseFormat.URL : ImageResponseFormat.B64_JSON,
  };
}

/** The format's `ImagesResponse` for a finished call; `fileUrl` turns a token into its URL. */
export function imagesResponse(result: ImageResult, fileUrl: (token: string) => string) {
  const created = result.created === undefined ? Date.now() : timestampMs(result.created);
  return {
    created: Math.floor(created / 1000),
    data: result.images.map((image) =>
      image.result.case === "urlToken"
        ? { url: fileUrl(image.result.value) }
        : { b64_json: Buffer.from(image.result.value ?? new Uint8Array()).toString("base64") },
    ),
    output_format: outputFormat(result.images[0]?.mimeType ?? ""),
  };
}

function outputFormat(mimeType: string): string {
  return mimeType === "image/jpeg" ? "jpeg" : mimeType === "image/webp" ? "webp" : "png";
}
