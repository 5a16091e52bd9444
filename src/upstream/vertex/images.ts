/**
 * Image calls to Google's Gemini image models on Vertex AI (docs/providers.md, "Gemini images on Vertex AI"): the
 * Gemini `generateContent` body and answer exactly as src/upstream/gemini/ builds and reads them,
 * at `POST {base}/v1/projects/{p}/locations/{r}/publishers/google/models/{model}:generateContent`
 * with an OAuth access token from the service-account key (./access-token.ts) instead of an API
 * key. Implements the core's `ImageUpstream` port.
 */
import { readBody } from "../../core/inference/read-body.js";
import type {
  ImageUpstream,
  ImageUpstreamOutcome,
  ImageUpstreamRequest,
} from "../../core/ports/providers.js";
import type { EndpointBase } from "../endpoint.js";
import {
  type GeminiImageOptions,
  generateContentBody,
  generateContentOutcome,
} from "../gemini/gemini-images.js";
import { httpErrorOutcome } from "../image-upstream.js";
import { UpstreamPool } from "../pool.js";
import { AccessTokens, TokenRefused } from "./access-token.js";
import { vertexBaseUrl } from "./request.js";

/** How to reach one Vertex AI project's Gemini image models in one region. */
export interface VertexImagesOptions extends EndpointBase {
  /** e.g. `us-central1`, or `global`. */
  readonly region: string;
  readonly projectId: string;
  /** Default `https://{region}-aiplatform.googleapis.com` (`global`: `https://aiplatform.googleapis.com`). */
  readonly baseUrl?: string;
  /** The service-account key file's JSON, parsed (`client_email`, `private_key`, `token_uri`). */
  readonly serviceAccountKey: object;
  /** Wire options per Vertex model id; models not listed send `imageConfig.imageSize`. */
  readonly imageOptions?: Readonly<Record<string, GeminiImageOptions>>;
}

const DEFAULT_OPTIONS: GeminiImageOptions = { sendImageSize: true };
/** A 4K PNG is tens of MB, and base64 adds a third. */
const RESPONSE_LIMIT = 256 * 1024 * 1024;

/** Image calls to Gemini models on one Vertex AI endpoint. */
export class VertexImages implements ImageUpstream {
  readonly kind = "vertex" as const;
  readonly name: string;
  readonly #models: EndpointBase["models"];
  readonly #imageOptions: Readonly<Record<string, GeminiImageOptions>>;
  readonly #modelsPath: string;
  readonly #pool: UpstreamPool;
  readonly #tokens: AccessTokens;

  constructor(options: VertexImagesOptions) {
    this.name = options.name;
    this.#models = options.models;
    this.#imageOptions = options.imageOptions ?? {};
    this.#modelsPath = `/v1/projects/${encodeURIComponent(options.projectId)}/locations/${encodeURIComponent(options.region)}/publishers/google/models`;
    this.#pool = new UpstreamPool({ ...options, baseUrl: options.baseUrl ?? vertexBaseUrl(options.region) });
    this.#tokens = new AccessTokens(
      options.serviceAccountKey,
      options.connectTimeoutMs + options.headersTimeoutMs,
    );
  }

  /**
   * One generateContent call for `request.upstreamModel` (mapped through the endpoint's `models`
   * when listed there); throws UpstreamFailure when there is no (complete) answer.
   */
  async generate(request: ImageUpstreamRequest): Promise<ImageUpstreamOutcome> {
    const model = this.#models.get(request.upstreamModel) ?? request.upstreamModel;
    let token: string;
    try {
      token = await this.#tokens.token(request.signal);
    } catch (error) {
      // The gateway's own key refused: reported as 401, its credentials, never the caller's.
      if (error instanceof TokenRefused) {
        return { kind: "http-error", status: 401, body: error.message, retryAfter: undefined };
      }
      throw error;
    }
    const response = await this.#pool.post({
      path: `${this.#modelsPath}/${encodeURIComponent(model)}:generateContent`,
      headers: {
        "content-type": "application/json",
        accept: "application/json",
        authorization: `Bearer ${token}`,
      },
      body: generateContentBody(request, this.#imageOptions[model] ?? DEFAULT_OPTIONS),
      signal: request.signal,
    });
    if (response.status !== 200) return httpErrorOutcome(response);
    return generateContentOutcome(await readBody(response.body, RESPONSE_LIMIT));
  }

  /** Stops accepting calls and resolves once the calls in flight have finished. */
  close(): Promise<void> {
    return this.#pool.close();
  }
}
