/**
 * What the cloud platforms' clients (bedrock/, vertex/) share to answer in Anthropic's terms
 * (src/upstream/endpoint.ts): the call's body and its model's platform id, a response whose body
 * is text they wrote, a platform's error body read to a limit, the Anthropic error envelope, and
 * the answer naming the model as the call sent it.
 */
import type { UpstreamCall, UpstreamResponse } from "../core/ports/providers.js";
import type { EndpointModels } from "./endpoint.js";

/** Anthropic's error types (docs/providers.md maps each platform's errors onto them). */
export type AnthropicErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "permission_error"
  | "not_found_error"
  | "request_too_large"
  | "rate_limit_error"
  | "api_error"
  | "overloaded_error"
  | "timeout_error";

/** How much of a platform's error body is read: enough for any message it writes. */
const ERROR_BODY_LIMIT = 64 * 1024;

/** The Anthropic error envelope's JSON text. */
export function anthropicErrorJson(type: AnthropicErrorType, message: string): string {
  return JSON.stringify({ type: "error", error: { type, message } });
}

/** A body that yields `chunks` (already in memory); destroying it is a no-op. */
export function bodyOf(...chunks: (string | Uint8Array)[]): UpstreamResponse["body"] {
  return new ChunksBody(chunks);
}

/** {@link bodyOf}'s body (a class: no generator function per body, docs/performance.md §28). */
class ChunksBody {
  constructor(private readonly chunks: readonly (string | Uint8Array)[]) {}

  async *[Symbol.asyncIterator](): AsyncGenerator<Uint8Array> {
    const encoder = new TextEncoder();
    for (const chunk of this.chunks) yield typeof chunk === "string" ? encoder.encode(chunk) : chunk;
  }

  destroy(): void {}
}

/** An answer in Anthropic's error envelope, with this status and these headers kept. */
export function anthropicError(
  status: number,
  type: AnthropicErrorType,
  message: string,
  headers: UpstreamResponse["headers"] = {},
): UpstreamResponse {
  return {
    status,
    headers: { ...headers, "content-type": "application/json" },
    body: bodyOf(anthropicErrorJson(type, message)),
  };
}

/**
 * A platform's (error) body as text, up to a limit; a body that breaks off yields what came. The
 * connection is freed either way.
 */
export async function readErrorBody(body: UpstreamResponse["body"]): Promise<string> {
  const decoder = new TextDecoder("utf-8");
  let text = "";
  try {
    for await (const chunk of body) {
      text += decoder.decode(chunk, { stream: true });
      if (text.length >= ERROR_BODY_LIMIT) {
        body.destroy();
        break;
      }
    }
  } catch {
    // What came before the fault is still the platform's message.
  }
  return text.slice(0, ERROR_BODY_LIMIT);
}

/** A header's first value, or undefined. */
export function headerOf(headers: UpstreamResponse["headers"], name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** The request body as a JSON object, or undefined when it is not one. */
export function jsonObjectOf(body: string | Uint8Array): Record<string, unknown> | undefined {
  try {
    const parsed: unknown = JSON.parse(typeof body === "string" ? body : new TextDecoder().decode(body));
    return typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)
      ? (parsed as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

/** What a platform client sends a call with: its body as JSON, and the platform's id for its model. */
export interface PlatformTarget {
  readonly messages: Record<string, unknown>;
  readonly modelId: string;
}

/**
 * The call's body and its model's platform id (the gateway model the core says the call is for;
 * a body alone names it by its own `model`), or `refused`, the answer when the body is not a JSON
 * object (400) or `endpoint` (e.g. "the Bedrock endpoint east") does not serve the model (404).
 */
export function platformTarget(
  call: UpstreamCall,
  modelIds: EndpointModels,
  endpoint: string,
): PlatformTarget | { readonly refused: UpstreamResponse } {
  const messages = jsonObjectOf(call.body);
  if (messages === undefined) {
    return { refused: anthropicError(400, "invalid_request_error", "the request body is not a JSON object") };
  }
  const model = call.model?.id ?? messages.model;
  const modelId = typeof model === "string" ? modelIds.get(model) : undefined;
  if (modelId === undefined) {
    return {
      refused: anthropicError(
        404,
        "not_found_error",
        `model ${JSON.stringify(model)} is not served by ${endpoint}`,
      ),
    };
  }
  return { messages, modelId };
}

/** The `anthropic-beta` header's flags as a list ("" → none). */
export function betaFlags(header: string): string[] {
  return header
    .split(",")
    .map((flag) => flag.trim())
    .filter((flag) => flag !== "");
}

/**
 * `body` with every `"model": "<platformId>"` naming `sent` instead: a platform may answer with
 * its own model id (Bedrock's `us.anthropic.…-v1:0`, Vertex's `…@date`), where Anthropic names
 * the model the call sent; the core prices each pass by the model its answer names, so the
 * gateway model's listed price holds whatever endpoint served (docs/providers.md, "Money"). Read
 * in whole lines (SSE events and JSON keep a `"model"` field on one line): lines without the id
 * pass as the same bytes, the others are rewritten. Destroying it destroys the original.
 */
export function withModelNamed(
  body: UpstreamResponse["body"],
  platformId: string,
  sent: string,
): UpstreamResponse["body"] {
  if (platformId === sent) return body;
  return new RenamedBody(body, platformId, sent);
}

/** {@link withModelNamed}'s body (a class: no generator function per body, docs/performance.md §28). */
class RenamedBody {
  readonly #needle: Buffer;
  readonly #pattern: RegExp;
  readonly #named: string;

  constructor(
    private readonly body: UpstreamResponse["body"],
    platformId: string,
    sent: string,
  ) {
    const quoted = JSON.stringify(platformId);
    this.#needle = Buffer.from(quoted, "utf8");
    this.#pattern = new RegExp(`"model"(\\s*):(\\s*)${quoted.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`, "g");
    this.#named = JSON.stringify(sent);
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<Uint8Array> {
    // The bytes after the last newline so far, kept as chunks (joined once a line ends).
    let pending: Buffer[] = [];
    for await (const chunk of this.body) {
      const bytes = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
      const cut = bytes.lastIndexOf(0x0a) + 1;
      if (cut === 0) {
        pending.push(bytes);
        continue;
      }
      const lines =
        pending.length === 0 ? bytes.subarray(0, cut) : Buffer.concat([...pending, bytes.subarray(0, cut)]);
      pending = cut < bytes.length ? [bytes.subarray(cut)] : [];
      yield this.#rename(lines);
    }
    if (pending.length > 0) yield this.#rename(Buffer.concat(pending));
  }

  destroy(error?: Error): void {
    this.body.destroy(error);
  }

  /** Whole lines: a newline byte is never inside a UTF-8 sequence, so the text decodes whole. */
  #rename(lines: Buffer): Uint8Array {
    if (!lines.includes(this.#needle)) return lines;
    const named = this.#named;
    return Buffer.from(
      lines
        .toString("utf8")
        .replace(this.#pattern, (_all, before: string, after: string) => `"model"${before}:${after}${named}`),
      "utf8",
    );
  }
}

/**
 * A platform's answer to a call for `model`, named as the call sent it, as Anthropic would (the
 * core prices by the answer's model): a 200's body through {@link withModelNamed}, its
 * `content-length` dropped; anything else, or a call that names no model, as it is.
 */
export function namedAsSent(
  answered: UpstreamResponse,
  modelId: string,
  model: UpstreamCall["model"],
): UpstreamResponse {
  if (answered.status !== 200 || model === undefined) return answered;
  const { "content-length": _length, ...kept } = answered.headers;
  return { ...answered, headers: kept, body: withModelNamed(answered.body, modelId, model.sent) };
}
