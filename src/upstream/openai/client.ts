/**
 * The client for an OpenAI-images-compatible provider (`POST {base}/v1/images/generations`
 * and `/v1/images/edits`, key as `Authorization: Bearer`), on the shared pooled HTTP client.
 */
import { readBody } from "../../core/inference/read-body.js";
import type {
  ImageUpstream,
  ImageUpstreamOutcome,
  ImageUpstreamRequest,
} from "../../core/ports/providers.js";
import { httpErrorOutcome } from "../image-upstream.js";
import { UpstreamPool, type UpstreamPoolOptions } from "../pool.js";
import { imagesOutcome, imagesRequest } from "./openai-images.js";

/** How to reach an OpenAI-images-compatible provider. */
export interface OpenaiImagesUpstreamOptions extends UpstreamPoolOptions {
  /** Sent as `Authorization: Bearer`; the gateway's own credential. */
  readonly apiKey: string;
}

const RESPONSE_LIMIT = 256 * 1024 * 1024;

/** Image calls to an OpenAI-images-compatible provider. */
export class OpenaiImagesUpstream implements ImageUpstream {
  readonly #pool: UpstreamPool;
  readonly #apiKey: string;

  constructor(options: OpenaiImagesUpstreamOptions) {
    this.#pool = new UpstreamPool(options);
    this.#apiKey = options.apiKey;
  }

  /** One generations or edits call; throws UpstreamFailure when there is no (complete) answer. */
  async generate(request: ImageUpstreamRequest): Promise<ImageUpstreamOutcome> {
    const { path, contentType, body } = imagesRequest(request);
    const headers: Record<string, string> = { "content-type": contentType, accept: "application/json" };
    if (this.#apiKey !== "") headers.authorization = `Bearer ${this.#apiKey}`;
    const response = await this.#pool.post({ path, headers, body, signal: request.signal });
    if (response.status !== 200) return httpErrorOutcome(response);
    return imagesOutcome(await readBody(response.body, RESPONSE_LIMIT));
  }

  close(): Promise<void> {
    return this.#pool.close();
  }
}
