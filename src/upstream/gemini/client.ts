/**
 * The client for an image provider speaking the Gemini `generateContent` format
 * (`POST {base}/v1beta/models/{model}:generateContent`, key in `x-goog-api-key`), on the shared
 * pooled HTTP client.
 */
import { readBody } from "../../core/inference/read-body.js";
import type {
  ImageUpstream,
  ImageUpstreamOutcome,
  ImageUpstreamRequest,
} from "../../core/ports/providers.js";
import { httpErrorOutcome } from "../image-upstream.js";
import { UpstreamPool, type UpstreamPoolOptions } from "../pool.js";
import { type GeminiImageOptions, generateContentBody, generateContentOutcome } from "./gemini-images.js";

/** How to reach a Gemini-format provider. */
export interface GeminiUpstreamOptions extends UpstreamPoolOptions {
  /** Sent as `x-goog-api-key`; the gateway's own credential. */
  readonly apiKey: string;
  /** Wire options per provider model id; models not listed get {@link DEFAULT_OPTIONS}. */
  readonly models?: Readonly<Record<string, GeminiImageOptions>>;
}

const DEFAULT_OPTIONS: GeminiImageOptions = { sendImageSize: true };
/** A 4K PNG is tens of MB, and base64 adds a third. */
const RESPONSE_LIMIT = 256 * 1024 * 1024;

/** Image calls to a Gemini-format provider. */
export class GeminiImageUpstream implements ImageUpstream {
  readonly #pool: UpstreamPool;
  readonly #apiKey: string;
  readonly #models: Readonly<Record<string, GeminiImageOptions>>;

  constructor(options: GeminiUpstreamOptions) {
    this.#pool = new UpstreamPool(options);
    this.#apiKey = options.apiKey;
    this.#models = options.models ?? {};
  }

  /** One generateContent call; throws UpstreamFailure when there is no (complete) answer. */
  async generate(request: ImageUpstreamRequest): Promise<ImageUpstreamOutcome> {
    const options = this.#models[request.upstreamModel] ?? DEFAULT_OPTIONS;
    const response = await this.#pool.post({
      path: `/v1beta/models/${encodeURIComponent(request.upstreamModel)}:generateContent`,
      headers: {
        "content-type": "application/json",
        accept: "application/json",
        "x-goog-api-key": this.#apiKey,
      },
      body: generateContentBody(request, options),
      signal: request.signal,
    });
    if (response.status !== 200) return credentialsAware(await httpErrorOutcome(response));
    return generateContentOutcome(await readBody(response.body, RESPONSE_LIMIT));
  }

  close(): Promise<void> {
    return this.#pool.close();
  }
}

/**
 * Gemini answers a bad API key with 400 (reason API_KEY_INVALID), not 401: reported as 401 so
 * the core treats it as the gateway's own credentials failing, never as the caller's request.
 */
function credentialsAware(outcome: ImageUpstreamOutcome): ImageUpstreamOutcome {
  if (outcome.kind === "http-error" && outcome.status === 400 && outcome.body.includes("API_KEY_INVALID")) {
    return { ...outcome, status: 401 };
  }
  return outcome;
}
