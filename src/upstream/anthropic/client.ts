/**
 * The client for an upstream provider that speaks the Anthropic wire format, on the shared
 * pooled HTTP client (../pool.ts): the core's text provider port (`TextUpstream`,
 * src/core/ports/providers.ts), and a router's endpoint of kind `anthropic` (../endpoint.ts,
 * docs/providers.md). Failures without an HTTP answer surface as the core's `UpstreamFailure`.
 */
import type { SseFrame, UpstreamCall, UpstreamResponse } from "../../core/ports/providers.js";
import type { EndpointCapabilities, EndpointModels, TextEndpoint } from "../endpoint.js";
import { UpstreamPool, type UpstreamPoolOptions } from "../pool.js";
import { sseFrames } from "../sse.js";

/** How to reach the upstream, and how long to wait for it. */
export interface AnthropicUpstreamOptions extends UpstreamPoolOptions {
  /** Sent as `x-api-key`; the gateway's own credential, never the caller's. */
  readonly apiKey: string;
  /** The endpoint's configured name (default `anthropic`). */
  readonly name?: string;
  /**
   * Gateway model id → this endpoint's model id; a call whose body names another id than this
   * endpoint's has its `model` rewritten. Empty (the default): every body goes as it is.
   */
  readonly models?: EndpointModels;
}

/**
 * What Anthropic's own API runs: token counting and every server tool the gateway lets through
 * (billable-features.ts names them).
 */
export const ANTHROPIC_CAPABILITIES: EndpointCapabilities = {
  countTokens: true,
  serverTools: ["web_search", "web_fetch", "advisor", "tool_search_tool", "mcp_toolset", "mcp_servers"],
};

/** A keep-alive pool of connections to one Anthropic-format upstream. */
export class AnthropicUpstream implements TextEndpoint {
  readonly name: string;
  readonly kind = "anthropic" as const;
  readonly capabilities = ANTHROPIC_CAPABILITIES;
  readonly models: ReadonlySet<string>;
  readonly #pool: UpstreamPool;
  readonly #apiKey: string;
  readonly #modelIds: EndpointModels;

  constructor(options: AnthropicUpstreamOptions) {
    this.#pool = new UpstreamPool(options);
    this.#apiKey = options.apiKey;
    this.name = options.name ?? "anthropic";
    this.#modelIds = options.models ?? new Map();
    this.models = new Set(this.#modelIds.keys());
  }

  /** Sends one request; resolves at the response headers. Throws UpstreamFailure for no answer. */
  send(call: UpstreamCall): Promise<UpstreamResponse> {
    // Built from scratch so nothing of the caller's request (its credentials above all) leaks.
    const headers: Record<string, string> = {
      "content-type": "application/json",
      // What the official SDK sends for streaming requests too; `stream` in the body decides.
      accept: "application/json",
      "x-api-key": this.#apiKey,
      "anthropic-version": call.anthropicVersion,
    };
    if (call.anthropicBeta !== "") headers["anthropic-beta"] = call.anthropicBeta;
    return this.#pool.post({ path: call.path, headers, body: this.#body(call), signal: call.signal });
  }

  /** The body as this endpoint takes it: re-serialised only when its model id differs. */
  #body(call: UpstreamCall): string | Uint8Array {
    const own = call.model === undefined ? undefined : this.#modelIds.get(call.model.id);
    if (own === undefined || own === call.model?.sent) return call.body;
    const text = typeof call.body === "string" ? call.body : Buffer.from(call.body).toString("utf8");
    return JSON.stringify({ ...(JSON.parse(text) as object), model: own });
  }

  /** A streamed answer's body as SSE frames, parsed as they arrive (src/upstream/sse.ts). */
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
