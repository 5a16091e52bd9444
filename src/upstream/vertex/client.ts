/**
 * The client for Anthropic's models on Google Vertex AI (docs/providers.md, "Google Vertex AI"), on the
 * shared pooled HTTP client (../pool.ts): a text endpoint (../endpoint.ts) that takes the call as
 * the core builds it for Anthropic and answers in Anthropic's terms. The body is rewritten for
 * rawPredict (./request.ts) and sent with an OAuth access token from the service-account key
 * (./access-token.ts); answers are already Anthropic's SSE and JSON, and Google's own errors
 * are mapped to Anthropic's envelope (./errors.ts).
 */
import type { SseFrame, UpstreamCall, UpstreamResponse } from "../../core/ports/providers.js";
import type { EndpointBase, EndpointCapabilities, TextEndpoint } from "../endpoint.js";
import { anthropicError, bodyOf, namedAsSent, platformTarget, readErrorBody } from "../platform-answer.js";
import { UpstreamPool } from "../pool.js";
import { sseFrames } from "../sse.js";
import { AccessTokens, TokenRefused } from "./access-token.js";
import { googleError, isAnthropicError, mapVertexError } from "./errors.js";
import { vertexBaseUrl, vertexPredict } from "./request.js";

/** How to reach one Vertex AI project's Anthropic models in one region. */
export interface VertexUpstreamOptions extends EndpointBase {
  /** e.g. `us-east5`, `europe-west1`, or `global`. */
  readonly region: string;
  readonly projectId: string;
  /** Default `https://{region}-aiplatform.googleapis.com` (`global`: `https://aiplatform.googleapis.com`). */
  readonly baseUrl?: string;
  /** The service-account key file's JSON, parsed (`client_email`, `private_key`, `token_uri`). */
  readonly serviceAccountKey: object;
}

/**
 * What Claude on Vertex runs beyond `/v1/messages`: count_tokens (its `count-tokens:rawPredict`);
 * no server tools are claimed (not confirmed for Vertex: see docs/providers.md, "Google Vertex AI").
 */
export const VERTEX_CAPABILITIES: EndpointCapabilities = { countTokens: true, serverTools: [] };

/** A keep-alive pool of connections to one Vertex AI endpoint. */
export class VertexUpstream implements TextEndpoint {
  readonly kind = "vertex" as const;
  readonly name: string;
  readonly capabilities = VERTEX_CAPABILITIES;
  readonly models: ReadonlySet<string>;
  readonly #modelIds: EndpointBase["models"];
  readonly #location: { readonly projectId: string; readonly region: string };
  readonly #pool: UpstreamPool;
  readonly #tokens: AccessTokens;

  constructor(options: VertexUpstreamOptions) {
    this.name = options.name;
    this.models = new Set(options.models.keys());
    this.#modelIds = options.models;
    this.#location = { projectId: options.projectId, region: options.region };
    this.#pool = new UpstreamPool({ ...options, baseUrl: options.baseUrl ?? vertexBaseUrl(options.region) });
    this.#tokens = new AccessTokens(
      options.serviceAccountKey,
      options.connectTimeoutMs + options.headersTimeoutMs,
    );
  }

  /** Sends one request; resolves at the response headers. Throws UpstreamFailure for no answer. */
  async send(call: UpstreamCall): Promise<UpstreamResponse> {
    const target = platformTarget(call, this.#modelIds, `the Vertex AI endpoint ${this.name}`);
    if ("refused" in target) return target.refused;
    const { messages, modelId } = target;
    let token: string;
    try {
      token = await this.#tokens.token(call.signal);
    } catch (error) {
      // The gateway's own key refused: its credentials, not the caller's fault (403, masked).
      if (error instanceof TokenRefused) return anthropicError(403, "permission_error", error.message);
      throw error;
    }
    const predict = vertexPredict(
      messages,
      modelId,
      this.#location,
      call.path === "/v1/messages/count_tokens",
    );
    const headers: Record<string, string> = {
      "content-type": "application/json",
      accept: "application/json",
      authorization: `Bearer ${token}`,
    };
    if (call.anthropicBeta !== "") headers["anthropic-beta"] = call.anthropicBeta;
    const response = await this.#pool.post({
      path: predict.path,
      headers,
      body: predict.body,
      signal: call.signal,
    });
    return namedAsSent(await answer(response), modelId, call.model);
  }

  /** A streamed answer's body (Messages SSE as Vertex sends it) as SSE frames (src/upstream/sse.ts). */
  frames(body: UpstreamResponse["body"]): AsyncGenerator<SseFrame> {
    return sseFrames(body);
  }

  /** Stops accepting calls and resolves once the calls in flight have finished. */
  close(): Promise<void> {
    return this.#pool.close();
  }

  /** Aborts the calls in flight and closes every connection at once. */
  destroy(): Promise<void> {
    return this.#pool.destroy();
  }
}

/** Vertex's answer in Anthropic's terms: 200s as they are, errors in Anthropic's envelope. */
async function answer(response: UpstreamResponse): Promise<UpstreamResponse> {
  if (response.status === 200) return response;
  const text = await readErrorBody(response.body);
  const headers = { ...response.headers };
  delete headers["content-length"];
  if (isAnthropicError(text)) return { status: response.status, headers, body: bodyOf(text) };
  const google = googleError(text);
  const mapped = mapVertexError(google?.status, response.status);
  const message = google === undefined ? `HTTP ${response.status}` : `${google.status}: ${google.message}`;
  return anthropicError(mapped.status, mapped.type, message, headers);
}
