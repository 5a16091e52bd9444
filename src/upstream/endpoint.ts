/**
 * One provider endpoint as the router sees it (issue 33): a text endpoint is
 * the core's `TextUpstream` port (it answers in the Anthropic wire format whatever platform it
 * reaches: Anthropic, Amazon Bedrock or Google Vertex AI) plus its configured name, its kind and
 * what the platform supports. The router (src/upstream/router/) holds an ordered list of them per
 * gateway model and tries the next one when the current one fails before any content went out.
 */
import type { UpstreamTimeouts } from "../config/text.js";
import type { TextUpstream } from "../core/ports/providers.js";

/** The text platforms an endpoint may be. */
export type TextEndpointKind = "anthropic" | "bedrock" | "vertex";

/** The image platforms an endpoint may be. */
export type ImageEndpointKind = "gemini" | "openai" | "vertex";

/** What a platform does beyond `/v1/messages`; a call needing more goes to endpoints that have it. */
export interface EndpointCapabilities {
  /** Whether `/v1/messages/count_tokens` can be asked of it. */
  readonly countTokens: boolean;
  /**
   * The server tools it runs, by the prefix of the tool's `type` (`web_search`, `web_fetch`,
   * `code_execution`, …); a call carrying another is not routed to it.
   */
  readonly serverTools: readonly string[];
}

/**
 * A text endpoint: `send` takes the call exactly as the core builds it for Anthropic (the JSON
 * body naming the catalog's upstream model id, `stream` in the body, `anthropic-version`/`-beta`
 * as fields, and the gateway model in `call.model.id`) and answers in Anthropic's terms:
 *
 * - status codes and error bodies as Anthropic's (`{"type":"error","error":{"type":…}}`; a
 *   platform's throttling is 429, its overload 529, its own faults 500–503);
 * - a non-streaming 200 is the Messages JSON;
 * - a streaming 200 has `content-type: text/event-stream` and a body of Messages SSE events
 *   (a platform's own stream format converted; an error inside the stream as an `error` event).
 *
 * The platform's model id for a gateway model (`call.model.id`; the body's `model` when the call
 * names none) comes from the endpoint's own `models` map.
 */
export interface TextEndpoint extends TextUpstream {
  /** The configured name: named in usage rows, receipts, logs, metrics and health (no secrets). */
  readonly name: string;
  readonly kind: TextEndpointKind;
  readonly capabilities: EndpointCapabilities;
  /** The gateway model ids this endpoint serves. */
  readonly models: ReadonlySet<string>;
  /** Stops accepting calls; resolves once the calls in flight have finished. */
  close(): Promise<void>;
}

/** Gateway model id → the endpoint's own model id (for Bedrock with its inference-profile prefix). */
export type EndpointModels = ReadonlyMap<string, string>;

/** What every endpoint's client is built from, whatever its kind. */
export interface EndpointBase extends UpstreamTimeouts {
  readonly name: string;
  readonly models: EndpointModels;
  /** Most connections open to this endpoint at once; null for no limit. */
  readonly connections: number | null;
}
