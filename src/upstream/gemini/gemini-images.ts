/**
 * The Gemini `generateContent` image format, as pure translation: the request body for an
 * image call, and the outcome of a response body. No I/O (see client.ts).
 */
import type { ImageInput, ImageUpstreamOutcome, ImageUpstreamRequest } from "../../core/ports/providers.js";

/** Per-model wire options the catalog sets. */
export interface GeminiImageOptions {
  /**
   * Whether to send `imageConfig.imageSize`. Models that render only 1K (gemini-2.5-flash-image)
   * do not take the field; 1K is the API's default.
   */
  readonly sendImageSize: boolean;
}

/**
 * Finish and block reasons that mean the provider declined the request (as opposed to a
 * malfunction): the caller gets a refusal, not a gateway error.
 */
const REFUSALS = new Set([
  "SAFETY",
  "IMAGE_SAFETY",
  "PROHIBITED_CONTENT",
  "IMAGE_PROHIBITED_CONTENT",
  "BLOCKLIST",
  "SPII",
  "RECITATION",
  "IMAGE_RECITATION",
  "OTHER",
  "IMAGE_OTHER",
  "NO_IMAGE",
]);

/** The JSON body of `POST /v1beta/models/{model}:generateContent` for one image call. */
export function generateContentBody(request: ImageUpstreamRequest, options: GeminiImageOptions): string {
  const imageConfig: Record<string, string> = { aspectRatio: request.aspectRatio };
  if (options.sendImageSize) imageConfig.imageSize = request.size;
  const parts: unknown[] = [{ text: request.prompt }];
  for (const image of request.references) {
    parts.push({
      inlineData: { mimeType: image.mimeType, data: Buffer.from(image.data).toString("base64") },
    });
  }
  return JSON.stringify({
    contents: [{ role: "user", parts }],
    generationConfig: { responseModalities: ["TEXT", "IMAGE"], imageConfig },
  });
}

/** The outcome of a 200 response body: its images, or why there are none. */
export function generateContentOutcome(text: string): ImageUpstreamOutcome {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { kind: "empty", detail: "the response is not JSON" };
  }
  if (!isRecord(json)) return { kind: "empty", detail: "the response is not a JSON object" };
  const feedback = isRecord(json.promptFeedback) ? json.promptFeedback : undefined;
  const blockReason = typeof feedback?.blockReason === "string" ? feedback.blockReason : undefined;
  const candidates = Array.isArray(json.candidates) ? json.candidates.filter(isRecord) : [];
  const images: ImageInput[] = [];
  const texts: string[] = [];
  const finishReasons: string[] = [];
  for (const candidate of candidates) {
    if (typeof candidate.finishReason === "string") finishReasons.push(candidate.finishReason);
    const content = isRecord(candidate.content) ? candidate.content : undefined;
    const parts = Array.isArray(content?.parts) ? content.parts.filter(isRecord) : [];
    for (const part of parts) {
      // Thought parts are the model's working drafts, not its answer.
      if (part.thought === true) continue;
      if (typeof part.text === "string") texts.push(part.text);
      // The REST API answers in camelCase; snake_case is accepted too, so read both.
      const inline = isRecord(part.inlineData)
        ? part.inlineData
        : isRecord(part.inline_data)
          ? part.inline_data
          : undefined;
      if (inline === undefined || typeof inline.data !== "string") continue;
      const mimeType = typeof inline.mimeType === "string" ? inline.mimeType : String(inline.mime_type ?? "");
      images.push({ data: Buffer.from(inline.data, "base64"), mimeType });
    }
  }
  const said = texts.join("\n").trim();
  if (images.length > 0) return { kind: "images", images, text: said };
  if (blockReason !== undefined)
    return { kind: "refused", detail: withText(`prompt blocked: ${blockReason}`, said) };
  const refusal = finishReasons.find((reason) => REFUSALS.has(reason));
  if (refusal !== undefined) return { kind: "refused", detail: withText(`finish reason ${refusal}`, said) };
  const reasons = finishReasons.length > 0 ? `finish reason ${finishReasons.join(", ")}` : "no candidates";
  return { kind: "empty", detail: withText(`no image in the response (${reasons})`, said) };
}

function withText(detail: string, said: string): string {
  return said === "" ? detail : `${detail}; the model said: ${said.slice(0, 500)}`;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
