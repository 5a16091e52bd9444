/**
 * Bedrock's errors in Anthropic's terms (docs/providers.md, "Amazon Bedrock", has the table and why):
 * a non-200 answer names its exception in `x-amzn-ErrorType` with `{"message": …}` as the body;
 * a stream's exception frame names it in `:exception-type`. Both map through one table so an
 * exception means the same whether it arrives before the headers or inside the stream.
 */
import type { AnthropicErrorType } from "../platform-answer.js";

/** What a Bedrock exception becomes: the HTTP status and the Anthropic error type. */
export interface MappedError {
  readonly status: number;
  readonly type: AnthropicErrorType;
}

/**
 * Bedrock exception → Anthropic. Throttling and quotas are the endpoint's rate limit (429);
 * a busy or not-yet-ready model is overload (529, the router fails over); refused credentials
 * or signatures are the gateway's own key (403, never the caller's fault); a malformed request
 * is the caller's (400); the platform's and the model's own faults are api_error (500), a
 * model timeout 504.
 */
const EXCEPTIONS: Readonly<Record<string, MappedError>> = {
  ValidationException: { status: 400, type: "invalid_request_error" },
  ThrottlingException: { status: 429, type: "rate_limit_error" },
  ServiceQuotaExceededException: { status: 429, type: "rate_limit_error" },
  ServiceUnavailableException: { status: 529, type: "overloaded_error" },
  ModelNotReadyException: { status: 529, type: "overloaded_error" },
  AccessDeniedException: { status: 403, type: "permission_error" },
  UnrecognizedClientException: { status: 403, type: "permission_error" },
  InvalidSignatureException: { status: 403, type: "permission_error" },
  ExpiredTokenException: { status: 403, type: "permission_error" },
  ResourceNotFoundException: { status: 500, type: "api_error" },
  InternalServerException: { status: 500, type: "api_error" },
  ModelErrorException: { status: 500, type: "api_error" },
  ModelStreamErrorException: { status: 500, type: "api_error" },
  ModelTimeoutException: { status: 504, type: "timeout_error" },
};

/**
 * The mapping of exception `name` (either case of its first letter: the stream's frames say
 * `throttlingException`, the headers `ThrottlingException`), or, for a name not in the table,
 * the mapping of the HTTP status it came with.
 */
export function mapBedrockError(name: string | undefined, status: number): MappedError {
  if (name !== undefined && name !== "") {
    const known = EXCEPTIONS[name.charAt(0).toUpperCase() + name.slice(1)];
    if (known !== undefined) return known;
  }
  return byStatus(status);
}

/** The exception's name from `x-amzn-ErrorType` (`Name:http://internal…` → `Name`). */
export function errorTypeOf(header: string | undefined): string | undefined {
  return header?.split(":")[0]?.trim();
}

function byStatus(status: number): MappedError {
  if (status === 429) return { status: 429, type: "rate_limit_error" };
  if (status === 503) return { status: 529, type: "overloaded_error" };
  if (status === 401 || status === 403) return { status: 403, type: "permission_error" };
  if (status === 413) return { status: 413, type: "request_too_large" };
  if (status >= 400 && status < 500) return { status: 400, type: "invalid_request_error" };
  return { status: status >= 500 && status <= 504 ? status : 500, type: "api_error" };
}
