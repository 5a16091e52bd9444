/**
 * The client for an upstream provider that speaks the Anthropic wire format, on the shared
 * pooled HTTP client (../pool.ts). Failures without an HTTP answer surface as
 * {@link UpstreamFailure}, re-exported here for the text core.
 */
import { UpstreamPool, type UpstreamPoolOptions, type UpstreamResponse } from "../pool.js";

export { readBody, UpstreamFailure, type UpstreamFailureKind, type UpstreamResponse } from "../pool.js";

/** How to reach the upstream, and how long to wait for it. */
export interface AnthropicUpstreamOptions extends UpstreamPoolOptions {
  /** Sent as `x-api-key`; the gateway's own credential, never the caller's. */
  readonly apiKey: string;
}

/** The upstream endpoints the gateway calls. */
export type UpstreamPath = "/v1/messages" | "/v1/messages/count_tokens";

/** One upstream request. */
export interface UpstreamCall {
  readonly path: UpstreamPath;
  /** The JSON body, already serialised. */
  readonly body: string | Uint8Array;
  /** Forwarded verbatim as `anthropic-version`. */
  readonly anthropicVersion: string;
  /** Forwarded verbatim as `anthropic-beta`; "" omits the header. */
  readonly anthropicBeta: string;
  readonly signal?: AbortSignal;
}

/** A keep-alive pool of connections to one Anthropic-format upstream. */
export class AnthropicUpstream {
  readonly #pool: UpstreamPool;
  readonly #apiKey: string;

  constructor(options: AnthropicUpstreamOptions) {
    this.#pool = new UpstreamPool(options);
    this.#apiKey = options.apiKey;
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
    return this.#pool.post({ path: call.path, headers, body: call.body, signal: call.signal });
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
