/**
 * What the cloud platforms' clients (bedrock/, vertex/) share to answer in Anthropic's terms
 * (src/upstream/endpoint.ts): a response whose body is text they wrote, a platform's error body
 * read to a limit, and the Anthropic error envelope.
 */
import type { UpstreamResponse } from "../core/ports/providers.js";

/** Anthropic's error types (docs/providers-platforms.md maps each platform's errors onto them). */
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
  const encoder = new TextEncoder();
  return {
    async *[Symbol.asyncIterator]() {
      for (const chunk of chunks) yield typeof chunk === "string" ? encoder.encode(chunk) : chunk;
    },
    destroy() {},
  };
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

/** The `anthropic-beta` header's flags as a list ("" → none). */
export function betaFlags(header: string): string[] {
  return header
    .split(",")
    .map((flag) => flag.trim())
    .filter((flag) => flag !== "");
}
