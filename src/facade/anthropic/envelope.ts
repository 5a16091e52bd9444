import type { FastifyReply, FastifyRequest } from "fastify";
import { errorHeaders, type FacadeError, toFacadeError, withWalletLink } from "../http-status.js";
import { withNamedBodyError } from "../request-body.js";

/** The Anthropic `error.type` for a status (docs/protocols.md, "Errors"). */
function errorType(status: number): string {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 402:
      return "billing_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 409:
      return "conflict_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 504:
      return "timeout_error";
    case 529:
      return "overloaded_error";
    default:
      return status < 500 ? "invalid_request_error" : "api_error";
  }
}

/** `{"type":"error","error":{"type","message"},"request_id"}` for a facade error. */
export function anthropicErrorBody(error: FacadeError, requestId: string) {
  return {
    type: "error",
    error: { type: errorType(error.status), message: error.message },
    request_id: requestId,
  };
}

/**
 * Error handler for the Anthropic-format scope. A provider's own 4xx goes out with its status
 * and body verbatim: clients (Claude Code above all) retry on the provider's wording.
 */
export function anthropicErrorHandler(error: unknown, request: FastifyRequest, reply: FastifyReply) {
  const mapped = withWalletLink(toFacadeError(withNamedBodyError(error, request)), request);
  if (mapped.status >= 500) request.log.error({ err: error }, "request failed");
  reply.headers(errorHeaders(mapped));
  const { status, body } = mapped.metadata;
  if (mapped.reason === "UPSTREAM_REJECTED" && status !== undefined && body !== undefined) {
    return reply.code(Number(status)).type("application/json").send(body);
  }
  return reply.code(mapped.status).send(anthropicErrorBody(mapped, request.id));
}
