import { type FastifyInstance, type FastifyReply, type FastifyRequest, LogController } from "fastify";

/**
 * What the facade logs once per request, at `info`, when the response has ended, in place of
 * Fastify's two lines ("incoming request", "request completed"): the request id (the logger's
 * `requestId` field, also on every line the core logs about the request), the route as
 * registered (a pattern such as `/v1/images/files/:token`, so no token or query string lands in
 * the log), the status, the latency, the chain the call was billed on and what it was charged
 * (the core's last part of a call, kept on the request as `charge` by the route that read it).
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
  /**
   * What the call was charged, in the chain's ledger units (µ$ on the shipped chains), as
   * integer text; absent when nothing was billed, and for a stream whose client went away
   * before its end (settled after; the core logs that charge on a line of its own).
   */
  readonly charge?: string;
  /** Why the response ended abnormally (the client went away, a stream failed). */
  readonly err?: Error;
}

declare module "fastify" {
  interface FastifyRequest {
    /** What the request's call was charged (its settled part), for its request line; null before. */
    charge: bigint | null;
  }
}

/** Requests whose line was written: a response may both fail to write and close. */
const logged = new WeakSet<FastifyRequest>();
/**
 * A response closed before its end: the client went away. Shared and not frozen (pino tags the
 * errors it serialises); its stack is only its message, since where it was made says nothing.
 */
const CLIENT_GONE = new Error("the client went away before the response ended");
CLIENT_GONE.stack = `Error: ${CLIENT_GONE.message}`;

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
    logRequest(request, reply, error);
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

/**
 * Writes the request line of a response its client left before it ended. Fastify reports a
 * request once its response finished (or failed to write): a closed, unfinished response —
 * a stream whose client went away — it never reports.
 */
export function addClientGoneLog(app: FastifyInstance): void {
  app.addHook("onRequest", async (request, reply) => {
    reply.raw.once("close", () => {
      if (!reply.raw.writableFinished) logRequest(request, reply, CLIENT_GONE);
    });
  });
}

function logRequest(request: FastifyRequest, reply: FastifyReply, error: Error | null | undefined): void {
  if (logged.has(request)) return;
  logged.add(request);
  request.log.info(requestLine(request, reply, error), "request");
}

function requestLine(
  request: FastifyRequest,
  reply: FastifyReply,
  error: Error | null | undefined,
): RequestLine {
  const chain = reply.getHeader("x-gateway-billing-chain");
  const { charge } = request;
  return {
    method: request.method,
    route: request.routeOptions.url ?? null,
    status: reply.statusCode,
    latencyMs: Math.round(reply.elapsedTime * 10) / 10,
    ...(typeof chain === "string" && chain !== "" ? { chain } : {}),
    ...(typeof charge === "bigint" ? { charge: `${charge}` } : {}),
    ...(error ? { err: error } : {}),
  };
}
