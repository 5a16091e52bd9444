/**
 * The provider ports: what the core asks of a model provider, in the core's own types.
 *
 * - Text: one request in the Anthropic wire format, one HTTP answer back whose body still
 *   streams; the core reads and meters it (src/upstream/anthropic/ implements the port).
 * - Images: one request in the gateway's terms (upstream model, prompt, size, ratio, reference
 *   images), one outcome back; each wire format (src/upstream/gemini/, src/upstream/openai/)
 *   implements it, and the core maps outcomes onto its errors and billing.
 *
 * Every way a provider call fails without a (complete) HTTP answer surfaces as one
 * {@link UpstreamFailure}, which the core classifies (src/core/inference/upstream-errors.ts);
 * implementations never let their HTTP client's own errors through.
 */

/**
 * Why a provider call failed without a usable HTTP answer: no answer in time, none at all, the
 * caller's abort, a response cut off, or a response that is not in the provider's format
 * (garbage where events or a message were due).
 */
export type UpstreamFailureKind = "timeout" | "unreachable" | "aborted" | "broken" | "malformed";

/** A provider call that failed without a (complete) HTTP answer; `cause` keeps the original error. */
export class UpstreamFailure extends Error {
  constructor(
    readonly kind: UpstreamFailureKind,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = "UpstreamFailure";
  }
}

/** A provider's HTTP answer, at its headers; the body still streams. */
export interface UpstreamResponse {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  /**
   * The body; iterating it only ever throws {@link UpstreamFailure}. Consume it or destroy it:
   * until then its pooled connection stays busy.
   */
  readonly body: AsyncIterable<Uint8Array> & { destroy(error?: Error): void };
  /**
   * The configured name of the endpoint that answered, when a router chose among several
   * (docs/providers.md): recorded on the usage row and named in the receipt. No secret.
   */
  readonly endpoint?: string;
}

/** The text provider endpoints the gateway calls. */
export type UpstreamPath = "/v1/messages" | "/v1/messages/count_tokens";

/** One text provider request. */
export interface UpstreamCall {
  readonly path: UpstreamPath;
  /** The JSON body, already serialised. */
  readonly body: string | Uint8Array;
  /** Forwarded verbatim as `anthropic-version`. */
  readonly anthropicVersion: string;
  /** Forwarded verbatim as `anthropic-beta`; "" omits the header. */
  readonly anthropicBeta: string;
  readonly signal?: AbortSignal;
  /**
   * The gateway model the call is for (its catalog id) and the model id its body names (the
   * catalog's upstream id): a router chooses the model's endpoints by `id`, and an endpoint whose
   * own id differs rewrites the body (docs/providers.md). Absent: the body goes as it is.
   */
  readonly model?: { readonly id: string; readonly sent: string };
  /**
   * The server tools the call carries, by the prefix of each tool's `type` (`web_search`,
   * `web_fetch`, `mcp_toolset`, …; `mcp_servers` for the MCP connector): only endpoints that run
   * them all may take the call.
   */
  readonly serverTools?: readonly string[];
}

/** One SSE frame as the upstream sent it. `data` is the raw data text (not re-serialised). */
export type SseFrame =
  | { readonly kind: "event"; readonly event: string; readonly data: string }
  | { readonly kind: "comment"; readonly text: string };

/** The text provider port: one request in the Anthropic wire format (AnthropicUpstream implements it). */
export interface TextUpstream {
  /**
   * Sends one request; resolves at the response headers, whatever their status. Throws
   * {@link UpstreamFailure} when there is no answer.
   */
  send(call: UpstreamCall): Promise<UpstreamResponse>;
  /**
   * A streamed answer's body as its server-sent-event frames, parsed as they arrive (no
   * buffering beyond one frame). Iterating throws {@link UpstreamFailure} ("malformed" for
   * what is not SSE, "broken" for a frame past the size limit) after the frames before the
   * fault; stopping early destroys `body`.
   */
  frames(body: UpstreamResponse["body"]): AsyncGenerator<SseFrame>;
}

/** A reference image, already checked to be PNG, JPEG or WebP. */
export interface ImageInput {
  readonly data: Uint8Array;
  readonly mimeType: string;
}

/** One image call as a provider adapter receives it. */
export interface ImageUpstreamRequest {
  /** The provider's model id (e.g. `gemini-3-pro-image-preview`). */
  readonly upstreamModel: string;
  readonly prompt: string;
  /** `1K`, `2K` or `4K`. */
  readonly size: string;
  /** e.g. `16:9`. */
  readonly aspectRatio: string;
  /** The pixel size the size and ratio imply, for providers that take pixels. */
  readonly width: number;
  readonly height: number;
  /** Reference images for an edit; empty for a generation. */
  readonly references: readonly ImageInput[];
  readonly signal?: AbortSignal | undefined;
  /** The gateway image model (its catalog id): a router chooses the model's endpoints by it. */
  readonly model?: string;
}

/** What a provider answered. Failures without an HTTP answer throw UpstreamFailure instead. */
export type ImageUpstreamOutcome =
  /** At least one image (bytes as the provider sent them; the core checks their type). */
  | {
      readonly kind: "images";
      readonly images: readonly ImageInput[];
      readonly text: string;
      /** The configured name of the endpoint that returned them, when a router chose it. */
      readonly endpoint?: string;
    }
  /** The provider declined (safety, policy): `detail` says why, in its words. */
  | { readonly kind: "refused"; readonly detail: string }
  /** A 200 without any image and without a stated refusal. */
  | { readonly kind: "empty"; readonly detail: string }
  /** A non-200 answer; `body` is its text (read up to a limit). */
  | {
      readonly kind: "http-error";
      readonly status: number;
      readonly body: string;
      readonly retryAfter: string | undefined;
    };

/** The image provider port: a provider of images in one wire format. */
export interface ImageUpstream {
  generate(request: ImageUpstreamRequest): Promise<ImageUpstreamOutcome>;
  close(): Promise<void>;
}
