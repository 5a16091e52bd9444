/**
 * The image side of the dev upstream (see ../anthropic/dev-upstream.ts): answers the Gemini
 * `generateContent` image format and the OpenAI images format with deterministic, clearly
 * labelled PNGs (../dev-png.ts) at the pixel size the size and ratio imply. A development aid,
 * not a model.
 */
import { createHash } from "node:crypto";
import { isImageSize } from "../../core/billing/price-catalog.js";
import { ASPECT_RATIOS, isAspectRatio, pixelSize } from "../../core/images/image-models.js";
import { labelledPng } from "./dev-png.js";

/** What every generated image says about itself (also its `tEXt` Comment). */
export const DEV_IMAGE_LABEL = "[tollgate dev-upstream: generated image, not a model]";

/** A dev answer: status and JSON body. */
export interface DevImageAnswer {
  readonly status: number;
  readonly body: unknown;
}

/** Answers `POST /v1beta/models/{model}:generateContent` for an image request. */
export function devGenerateContent(model: string, body: unknown): DevImageAnswer {
  const fail = (message: string) => ({
    status: 400,
    body: { error: { code: 400, message, status: "INVALID_ARGUMENT" } },
  });
  if (!isRecord(body) || !Array.isArray(body.contents) || body.contents.length === 0) {
    return fail("* GenerateContentRequest.contents: contents is not specified");
  }
  const config = isRecord(body.generationConfig) ? body.generationConfig : {};
  const imageConfig = isRecord(config.imageConfig) ? config.imageConfig : {};
  const ratio = imageConfig.aspectRatio ?? "1:1";
  const size = imageConfig.imageSize ?? "1K";
  if (typeof ratio !== "string" || !isAspectRatio(ratio)) {
    return fail(`imageConfig.aspectRatio must be one of ${ASPECT_RATIOS.join(", ")}`);
  }
  if (typeof size !== "string" || !isImageSize(size))
    return fail("imageConfig.imageSize must be 1K, 2K or 4K");
  const parts = body.contents.flatMap((content) =>
    isRecord(content) && Array.isArray(content.parts) ? content.parts.filter(isRecord) : [],
  );
  const prompt = parts
    .map((part) => (typeof part.text === "string" ? part.text : ""))
    .join(" ")
    .trim();
  const references = parts
    .filter((part) => isRecord(part.inlineData))
    .map((part) => JSON.stringify(part.inlineData));
  const { width, height } = pixelSize(size, ratio);
  const png = devPng({ model, prompt, ratio, size, width, height, references });
  return {
    status: 200,
    body: {
      candidates: [
        {
          content: {
            role: "model",
            parts: [
              { text: DEV_IMAGE_LABEL },
              { inlineData: { mimeType: "image/png", data: png.toString("base64") } },
            ],
          },
          finishReason: "STOP",
          index: 0,
        },
      ],
      usageMetadata: {
        promptTokenCount: Math.ceil(prompt.length / 4) + references.length * 560,
        candidatesTokenCount: size === "4K" ? 2000 : 1120,
        totalTokenCount:
          Math.ceil(prompt.length / 4) + references.length * 560 + (size === "4K" ? 2000 : 1120),
      },
      modelVersion: model,
    },
  };
}

/**
 * Answers `POST /v1/images/generations` (JSON) and `/v1/images/edits` (multipart, read
 * leniently: the text fields by name, the files counted) in the OpenAI images format.
 */
export function devOpenaiImages(
  path: "generations" | "edits",
  rawBody: string,
  body: unknown,
): DevImageAnswer {
  const fail = (message: string, param: string) => ({
    status: 400,
    body: { error: { message, type: "invalid_request_error", param, code: null } },
  });
  let fields: Record<string, unknown>;
  let references: string[] = [];
  if (path === "generations") {
    if (!isRecord(body)) return fail("The body must be JSON.", "body");
    fields = body;
  } else {
    fields = {};
    for (const match of rawBody.matchAll(/name="([a-z_]+)"\r\n\r\n([^\r]*)\r\n/g))
      fields[match[1] ?? ""] = match[2];
    references = [...rawBody.matchAll(/name="image(?:\[\])?"; filename="([^"]*)"/g)].map((m) => m[1] ?? "");
    if (references.length === 0) return fail("image is required.", "image");
  }
  if (typeof fields.prompt !== "string" || fields.prompt === "") return fail("prompt is required.", "prompt");
  const size = /^(\d+)x(\d+)$/.exec(String(fields.size ?? "1024x1024"));
  const width = Number(size?.[1] ?? 0);
  const height = Number(size?.[2] ?? 0);
  if (size === null || width < 16 || height < 16 || width > 8192 || height > 8192) {
    return fail(`Invalid size ${JSON.stringify(fields.size)}.`, "size");
  }
  const model = String(fields.model ?? "");
  const png = devPng({ model, prompt: fields.prompt, ratio: "", size: "", width, height, references });
  return {
    status: 200,
    body: { created: Math.floor(Date.now() / 1000), data: [{ b64_json: png.toString("base64") }] },
  };
}

function devPng(request: {
  model: string;
  prompt: string;
  ratio: string;
  size: string;
  width: number;
  height: number;
  references: readonly string[];
}): Buffer {
  const seed = createHash("sha256")
    .update(
      JSON.stringify([request.model, request.prompt, request.width, request.height, request.references]),
    )
    .digest();
  const lines = [
    "TOLLGATE DEV-UPSTREAM",
    "GENERATED IMAGE - NOT A MODEL",
    `${request.width}X${request.height} ${request.ratio} ${request.size}`.trim(),
  ];
  if (request.references.length > 0) lines.push(`EDIT OF ${request.references.length} IMAGES`);
  return labelledPng({
    width: request.width,
    height: request.height,
    seed,
    lines,
    text: {
      Comment: DEV_IMAGE_LABEL,
      Software: "tollgate dev-upstream",
      Description: `model ${request.model}; ${request.width}x${request.height}; prompt sha256 ${seed.toString("hex").slice(0, 16)}`,
    },
  });
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
