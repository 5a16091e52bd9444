/**
 * The client for an upstream provider that speaks the Anthropic wire format, on the shared
 * pooled HTTP client (../pool.ts): the core's text provider port (`TextUpstream`,
 * src/core/ports/providers.ts). Failures without an HTTP answer surface as the core's
 * `UpstreamFailure`.
 */
import type { SseFrame, TextUpstream, UpstreamCall, UpstreamResponse } from "../../core/ports/providers.js";
import { UpstreamPool, type UpstreamPoolOptions } from "../pool.js";
import { sseFrames } from "../sse.js";

/** How to reach the upstream, and how long to wait for it. */
export interface AnthropicUpstreamOptions extends UpstreamPoolOptions {
  /** Sent as `x-api-key`; the gateway's own credential, never the caller's. */
  readonly apiKey: string;
}

/** A keep-alive pool of connections to one Anthropic-format upstream. */
export class AnthropicUpstream implements TextUpstream {
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
