/**
 * The OpenAI images format towards an OpenAI-images-compatible provider, as pure translation:
 * request bodies for `POST /v1/images/generations` (JSON) and `POST /v1/images/edits`
 * (multipart/form-data), and the outcome of a response body. No I/O (see client.ts).
 */
import { randomBytes } from "node:crypto";
import type { ImageInput, ImageUpstreamOutcome, ImageUpstreamRequest } from "../../core/ports/providers.js";

/** A body with its content type. */
export interface EncodedBody {
  readonly contentType: string;
  readonly body: Uint8Array;
}

const EXTENSIONS: Readonly<Record<string, string>> = {
  "image/png": "png",
  "image/jpeg": "jpg",
  "image/webp": "webp",
};

/**
 * The provider request for one image call. The size goes as the pixel size the gateway's size
 * and ratio imply (`WxH`); `response_format` is not sent, because GPT image models refuse it
 * and always answer `b64_json`.
 */
export function imagesRequest(request: ImageUpstreamRequest): { path: string } & EncodedBody {
  const size = `${request.width}x${request.height}`;
  if (request.references.length === 0) {
    const body = JSON.stringify({ model: request.upstreamModel, prompt: request.prompt, n: 1, size });
    return { path: "/v1/images/generations", contentType: "application/json", body: Buffer.from(body) };
  }
  const fields: [string, string][] = [
    ["model", request.upstreamModel],
    ["prompt", request.prompt],
    ["n", "1"],
    ["size", size],
  ];
  return { path: "/v1/images/edits", ...multipart(fields, request.references) };
}

/** multipart/form-data with text fields, then the images as repeated `image[]` files. */
export function multipart(fields: readonly [string, string][], images: readonly ImageInput[]): EncodedBody {
  const boundary = `tollgate-${randomBytes(16).toString("hex")}`;
  const chunks: Buffer[] = [];
  for (const [name, value] of fields) {
    chunks.push(
      Buffer.from(`--${boundary}\r\ncontent-disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`),
    );
  }
  for (const [index, image] of images.entries()) {
    const filename = `image-${index + 1}.${EXTENSIONS[image.mimeType] ?? "bin"}`;
    chunks.push(
      Buffer.from(
        `--${boundary}\r\ncontent-disposition: form-data; name="image[]"; filename="${filename}"\r\n` +
          `content-type: ${image.mimeType}\r\n\r\n`,
      ),
      Buffer.from(image.data.buffer, image.data.byteOffset, image.data.byteLength),
      Buffer.from("\r\n"),
    );
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { contentType: `multipart/form-data; boundary=${boundary}`, body: Buffer.concat(chunks) };
}

/** The outcome of a 200 response body (`{"data":[{"b64_json":…}]}`). */
export function imagesOutcome(text: string): ImageUpstreamOutcome {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { kind: "empty", detail: "the response is not JSON" };
  }
  const data = isRecord(json) && Array.isArray(json.data) ? json.data.filter(isRecord) : [];
  const images: ImageInput[] = [];
  let urls = 0;
  for (const item of data) {
    if (typeof item.b64_json === "string" && item.b64_json !== "") {
      // The type is read from the bytes by the core; the format does not say it per image.
      images.push({ data: Buffer.from(item.b64_json, "base64"), mimeType: "" });
    } else if (typeof item.url === "string") urls++;
  }
  if (images.length > 0) return { kind: "images", images, text: "" };
  if (urls > 0) return { kind: "empty", detail: "the provider returned URLs, not b64_json" };
  return { kind: "empty", detail: "no image in the response" };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
