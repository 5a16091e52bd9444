import type { FastifyReply, FastifyRequest } from "fastify";
import { errorHeaders, type FacadeError, toFacadeError, withWalletLink } from "../http-status.js";
import { withNamedBodyError } from "../request-body.js";

/** The OpenAI `error.type` for a status. */
function errorType(status: number): string {
  switch (status) {
    case 401:
      return "authentication_error";
    case 402:
      return "billing_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    default:
      return status < 500 ? "invalid_request_error" : "server_error";
  }
}

/** `{"error":{"message","type","param","code"}}` for a facade error; all four keys always present. */
export function openaiErrorBody(error: FacadeError) {
  return {
    error: {
      message: error.message,
      type: errorType(error.status),
      param: error.field ?? null,
      code: error.reason?.toLowerCase() ?? null,
    },
  };
}

/** Error handler for the OpenAI-format (images) scope. */
export function openaiErrorHandler(error: unknown, request: FastifyRequest, reply: FastifyReply) {
  const mapped = withWalletLink(toFacadeError(withNamedBodyError(error, request)), request);
  if (mapped.status >= 500) request.log.error({ err: error }, "request failed");
  return reply.code(mapped.status).headers(errorHeaders(mapped)).send(openaiErrorBody(mapped));
}
