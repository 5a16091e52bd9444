/**
 * Vertex AI's errors in Anthropic's terms (docs/providers.md, "Google Vertex AI"): an error from the model
 * itself already comes in Anthropic's envelope and passes as it is; one from Google's front end
 * comes as `{"error": {"code", "message", "status"}}` (sometimes in a one-element list) and maps
 * through the table below.
 */
import type { AnthropicErrorType } from "../platform-answer.js";

/** What a Google error becomes: the HTTP status and the Anthropic error type. */
export interface MappedError {
  readonly status: number;
  readonly type: AnthropicErrorType;
}

/**
 * Google status → Anthropic. Quota is the endpoint's rate limit (429); an unavailable model is
 * overload (529, the router fails over); refused credentials are the gateway's own (401/403,
 * never the caller's fault); a model missing from the project is the endpoint's
 * misconfiguration (500), a bad argument the caller's (400).
 */
const STATUSES: Readonly<Record<string, MappedError>> = {
  INVALID_ARGUMENT: { status: 400, type: "invalid_request_error" },
  FAILED_PRECONDITION: { status: 400, type: "invalid_request_error" },
  OUT_OF_RANGE: { status: 400, type: "invalid_request_error" },
  UNAUTHENTICATED: { status: 401, type: "authentication_error" },
  PERMISSION_DENIED: { status: 403, type: "permission_error" },
  NOT_FOUND: { status: 500, type: "api_error" },
  RESOURCE_EXHAUSTED: { status: 429, type: "rate_limit_error" },
  UNAVAILABLE: { status: 529, type: "overloaded_error" },
  INTERNAL: { status: 500, type: "api_error" },
  UNKNOWN: { status: 500, type: "api_error" },
  DEADLINE_EXCEEDED: { status: 504, type: "timeout_error" },
};

/** A Google error body's status and message; undefined when the body is not one. */
export function googleError(text: string): { status: string; message: string } | undefined {
  try {
    let parsed: unknown = JSON.parse(text);
    if (Array.isArray(parsed)) parsed = parsed[0];
    const error = (parsed as { error?: { status?: unknown; message?: unknown } } | null)?.error;
    if (typeof error?.status !== "string") return undefined;
    return {
      status: error.status,
      message: typeof error.message === "string" ? error.message : error.status,
    };
  } catch {
    return undefined;
  }
}

/** Whether `text` is already Anthropic's error envelope. */
export function isAnthropicError(text: string): boolean {
  try {
    const parsed = JSON.parse(text) as { type?: unknown; error?: { type?: unknown } } | null;
    return parsed?.type === "error" && typeof parsed.error?.type === "string";
  } catch {
    return false;
  }
}

/** The mapping of Google status `status`, or of the HTTP status for one not in the table. */
export function mapVertexError(status: string | undefined, httpStatus: number): MappedError {
  const known = status === undefined ? undefined : STATUSES[status];
  if (known !== undefined) return known;
  if (httpStatus === 429) return { status: 429, type: "rate_limit_error" };
  if (httpStatus === 503) return { status: 529, type: "overloaded_error" };
  if (httpStatus === 401) return { status: 401, type: "authentication_error" };
  if (httpStatus === 403) return { status: 403, type: "permission_error" };
  if (httpStatus === 413) return { status: 413, type: "request_too_large" };
  if (httpStatus >= 400 && httpStatus < 500) return { status: 400, type: "invalid_request_error" };
  return { status: httpStatus >= 500 && httpStatus <= 504 ? httpStatus : 500, type: "api_error" };
}
