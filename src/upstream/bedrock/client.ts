/**
 * The client for Anthropic's models on Amazon Bedrock (docs/providers.md, "Amazon Bedrock"), on the
 * shared pooled HTTP client (../pool.ts): a text endpoint (../endpoint.ts) that takes the call
 * as the core builds it for Anthropic and answers in Anthropic's terms. The body is rewritten
 * for InvokeModel (./request.ts), signed (./sign.ts), and the answer translated back: a stream's
 * eventstream frames to Messages SSE (./event-stream.ts), Bedrock's errors to Anthropic's
 * envelope and statuses (./errors.ts). A count goes to Bedrock's CountTokens and its
 * `{"inputTokens": N}` comes back as Anthropic's `{"input_tokens": N}`.
 */
import {
  type SseFrame,
  type UpstreamCall,
  UpstreamFailure,
  type UpstreamResponse,
} from "../../core/ports/providers.js";
import type { EndpointBase, EndpointCapabilities, TextEndpoint } from "../endpoint.js";
import {
  anthropicError,
  bodyOf,
  headerOf,
  jsonObjectOf,
  namedAsSent,
  platformTarget,
  readErrorBody,
} from "../platform-answer.js";
import { UpstreamPool } from "../pool.js";
import { sseFrames } from "../sse.js";
import { errorTypeOf, mapBedrockError } from "./errors.js";
import { eventStreamAsSse } from "./event-stream.js";
import { bedrockCountTokens, bedrockInvoke } from "./request.js";
import { type BedrockAuth, BedrockSigner } from "./sign.js";

/** How to reach one Bedrock endpoint. */
export interface BedrockUpstreamOptions extends EndpointBase {
  /** The AWS region, e.g. `us-east-1` (signed into every request). */
  readonly region: string;
  /** Default `https://bedrock-runtime.{region}.amazonaws.com`. */
  readonly baseUrl?: string;
  readonly auth: BedrockAuth;
}

/**
 * What Bedrock runs beyond `/v1/messages`: count_tokens through its CountTokens API, and none of
 * Anthropic's server tools (docs/providers.md, "Amazon Bedrock").
 */
export const BEDROCK_CAPABILITIES: EndpointCapabilities = { countTokens: true, serverTools: [] };

/** A keep-alive pool of connections to one Bedrock runtime endpoint. */
export class BedrockUpstream implements TextEndpoint {
  readonly kind = "bedrock" as const;
  readonly name: string;
  readonly capabilities = BEDROCK_CAPABILITIES;
  readonly models: ReadonlySet<string>;
  readonly #modelIds: EndpointBase["models"];
  readonly #pool: UpstreamPool;
  readonly #base: URL;
  readonly #signer: BedrockSigner;

  constructor(options: BedrockUpstreamOptions) {
    this.name = options.name;
    this.models = new Set(options.models.keys());
    this.#modelIds = options.models;
    const baseUrl = options.baseUrl ?? `https://bedrock-runtime.${options.region}.amazonaws.com`;
    this.#base = new URL(baseUrl);
    this.#pool = new UpstreamPool({ ...options, baseUrl });
    this.#signer = new BedrockSigner(options.auth, options.region);
  }

  /** Sends one request; resolves at the response headers. Throws UpstreamFailure for no answer. */
  async send(call: UpstreamCall): Promise<UpstreamResponse> {
    const target = platformTarget(call, this.#modelIds, `the Bedrock endpoint ${this.name}`);
    if ("refused" in target) return target.refused;
    const { messages, modelId } = target;
    const counting = call.path === "/v1/messages/count_tokens";
    const invoke = counting
      ? bedrockCountTokens(messages, modelId, call.anthropicBeta)
      : bedrockInvoke(messages, modelId, call.anthropicBeta);
    const path = this.#base.pathname.replace(/\/+$/, "") + invoke.path;
    const headers = await this.#signer.headers(
      new URL(path, this.#base),
      {
        "content-type": "application/json",
        accept: invoke.stream ? "application/vnd.amazon.eventstream" : "application/json",
      },
      invoke.body,
    );
    const response = await this.#pool.post({
      path: invoke.path,
      headers,
      body: invoke.body,
      signal: call.signal,
    });
    const answered = await answer(response);
    if (answered.status !== 200) return answered;
    if (counting) return countAnswer(answered);
    return namedAsSent(answered, modelId, call.model);
  }

  /** A streamed answer's body (already Messages SSE) as SSE frames (src/upstream/sse.ts). */
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

/** Bedrock's answer in Anthropic's terms. */
async function answer(response: UpstreamResponse): Promise<UpstreamResponse> {
  const requestId = headerOf(response.headers, "x-amzn-requestid");
  const headers: UpstreamResponse["headers"] = { ...response.headers };
  if (requestId !== undefined) headers["request-id"] = requestId;
  if (response.status === 200) {
    const type = headerOf(response.headers, "content-type") ?? "";
    if (!type.includes("application/vnd.amazon.eventstream")) return { ...response, headers };
    headers["content-type"] = "text/event-stream; charset=utf-8";
    delete headers["content-length"];
    return { status: 200, headers, body: eventStreamAsSse(response.body) };
  }
  const name = errorTypeOf(headerOf(response.headers, "x-amzn-errortype"));
  const text = await readErrorBody(response.body);
  const mapped = mapBedrockError(name, response.status);
  const message = messageOf(text) ?? `HTTP ${response.status}`;
  delete headers["content-length"];
  return anthropicError(
    mapped.status,
    mapped.type,
    name === undefined ? message : `${name}: ${message}`,
    headers,
  );
}

/** CountTokens' `{"inputTokens": N}` as Anthropic's `{"input_tokens": N}`. */
async function countAnswer(response: UpstreamResponse): Promise<UpstreamResponse> {
  const counted = jsonObjectOf(await readErrorBody(response.body))?.inputTokens;
  if (typeof counted !== "number" || !Number.isSafeInteger(counted) || counted < 0) {
    throw new UpstreamFailure("malformed", "Bedrock CountTokens answered without a whole inputTokens");
  }
  const headers: UpstreamResponse["headers"] = { ...response.headers, "content-type": "application/json" };
  delete headers["content-length"];
  return { status: 200, headers, body: bodyOf(JSON.stringify({ input_tokens: counted })) };
}

/** Bedrock's `{"message": …}` (some services write `Message`). */
function messageOf(text: string): string | undefined {
  const body = jsonObjectOf(text);
  const message = body?.message ?? body?.Message;
  return typeof message === "string" ? message : undefined;
}
