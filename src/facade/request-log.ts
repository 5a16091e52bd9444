import { type FastifyReply, type FastifyRequest, LogController } from "fastify";

/**
 * What the facade logs once per request, at `info`, when the response has ended, in place of
 * Fastify's two lines ("incoming request", "request completed"): the request id (the logger's
 * `requestId` field, also on every line the core logs about the request), the route as
 * registered (a pattern such as `/v1/images/files/:token`, so no token or query string lands in
 * the log), the status, the latency and the chain the call was billed on. The charge is not on
 * the line: a streamed call settles after its last byte, so at this point only the hold is
 * known; the settled charge is in the ledger under the same request id (`tollgate usage`).
 */
export interface RequestLine {
  readonly method: string;
  /** The matched route's pattern; `null` when no route matched (a 404). */
  readonly route: string | null;
  readonly status: number;
  /** From the request's arrival to the end of the response, in milliseconds. */
  readonly latencyMs: number;
  /** The chain the call was billed on; absent for an unbilled request. */
  readonly chain?: string;
  /** Why the response ended abnormally (the client went away, a stream failed). */
  readonly err?: Error;
}

/**
 * Fastify's request logging, reshaped so that each request is one `info` line
 * ({@link RequestLine}): the lines Fastify writes besides it about the same request (a 4xx from
 * its default error handler, a 404, a client closing a stream early) go to `debug`; its
 * 5xx error lines stay at `error`.
 */
export class RequestLogController extends LogController {
  constructor() {
    super({ requestIdLogLabel: "requestId" });
  }

  override incomingRequest(): void {}

  override requestCompleted(
    error: Error | null | undefined,
    request: FastifyRequest,
    reply: FastifyReply,
  ): void {
    request.log.info(requestLine(request, reply, error), "request");
  }

  override defaultErrorLog(error: Error, request: FastifyRequest, reply: FastifyReply): void {
    if (reply.statusCode >= 500) super.defaultErrorLog(error, request, reply);
    else reply.log.debug({ err: error }, error.message);
  }

  override streamError(error: Error, request: FastifyRequest, reply: FastifyReply): void {
    if ((error as NodeJS.ErrnoException).code === "ERR_STREAM_PREMATURE_CLOSE") {
      reply.log.debug("stream closed prematurely");
    } else super.streamError(error, request, reply);
  }

  override routeNotFound(request: FastifyRequest): void {
    request.log.debug("no route");
  }
}

function requestLine(
  request: FastifyRequest,
  reply: FastifyReply,
  error: Error | null | undefined,
): RequestLine {
  const chain = reply.getHeader("x-gateway-billing-chain");
  return {
    method: request.method,
    route: request.routeOptions.url ?? null,
    status: reply.statusCode,
    latencyMs: Math.round(reply.elapsedTime * 10) / 10,
    ...(typeof chain === "string" && chain !== "" ? { chain } : {}),
    ...(error ? { err: error } : {}),
  };
}
