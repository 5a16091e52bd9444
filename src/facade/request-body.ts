/**
 * What the facade answers about a request body it will not take: one over a limit (413), one
 * of a type the route does not read (415), and any answer given before the body was read in
 * full (a 413 known from content-length, an upload refused mid-way, a key refused before the
 * body). Such an answer closes the connection, but a socket closed while the client is still
 * sending makes the client's kernel see a reset: the client's write fails (EPIPE, ECONNRESET)
 * and it may never read the answer — the official SDKs then retry the whole upload. So the
 * rest of the body is read and thrown away, for a bounded number of bytes and a bounded time,
 * before the socket is closed: the client finishes writing and reads the answer.
 */
import type { IncomingMessage } from "node:http";
import type { FastifyReply, FastifyRequest } from "fastify";

/** How much of an unread body is still read (and discarded) after the answer, at most. */
export interface DrainLimits {
  readonly maxBytes: number;
  readonly maxMs: number;
}

/**
 * 128 MiB or 10 s, whichever comes first: twice the largest upload limit (60 MiB), so a client
 * that sends up to that much more than it may still reads its 413, and at 100 Mbit/s about the
 * time such a body takes. The bytes cost bandwidth only (nothing is kept).
 */
export const DRAIN_LIMITS: DrainLimits = { maxBytes: 128 * 1024 * 1024, maxMs: 10_000 };

/**
 * The facade's onSend hook: a 413 carries `x-should-retry: false` (the same body would be
 * refused again) and `connection: close`; any answer sent while the request body is still
 * arriving closes the connection too, once the rest of the body is drained within `limits`.
 */
export function unreadBodyHook(limits: DrainLimits = DRAIN_LIMITS) {
  return async (request: FastifyRequest, reply: FastifyReply, payload: unknown) => {
    if (reply.statusCode === 413) reply.header("x-should-retry", "false").header("connection", "close");
    if (!request.raw.complete) {
      reply.header("connection", "close");
      drainThenClose(request.raw, limits);
    }
    return payload;
  };
}

/**
 * Reads and discards the rest of `request`'s body, then closes the socket: when the body has
 * ended, when `maxBytes` more were read, or after `maxMs`, whichever comes first.
 *
 * Node ends a `connection: close` response by calling the socket's `destroySoon()`, which
 * destroys it as soon as the answer is flushed — with the client's bytes still unread, the
 * reset this avoids. While draining, that call is put off: the socket stays open both ways,
 * so the client sees an ordinary exchange (it finishes its upload, reads the answer, which
 * says how long it is, then the close), and is closed when draining stops.
 */
function drainThenClose(request: IncomingMessage, limits: DrainLimits): void {
  const socket = request.socket;
  const destroySoon = socket.destroySoon;
  let answered = false;
  let read = 0;
  const stop = () => {
    clearTimeout(timer);
    request.off("data", onData);
    request.off("end", stop);
    socket.off("close", stop);
    socket.destroySoon = destroySoon;
    // The answer is out (Node asked to close): close now. Otherwise Node closes after it.
    if (answered) socket.destroySoon();
  };
  const onData = (chunk: Buffer) => {
    read += chunk.byteLength;
    if (read > limits.maxBytes) stop();
  };
  const timer = setTimeout(stop, limits.maxMs).unref();
  socket.destroySoon = () => {
    answered = true;
  };
  // Whatever was reading the body (a multipart parser that refused it) lets go of it.
  request.unpipe();
  request.on("data", onData);
  request.on("end", stop);
  socket.on("close", stop);
  request.resume();
}

/**
 * Fastify's own refusals of a body, named like the gateway's: a body over the route's
 * `bodyLimit` ("Request body is too large") names the limit, a content type no parser takes
 * ("Unsupported Media Type") names the type and the one to send. Other errors pass as they are.
 */
export function withNamedBodyError(error: unknown, request: FastifyRequest): unknown {
  switch ((error as { code?: unknown } | null)?.code) {
    case "FST_ERR_CTP_BODY_TOO_LARGE": {
      const limit = formatBytes(request.routeOptions.bodyLimit);
      return refusal(413, `The request body exceeds the limit of ${limit}.`);
    }
    case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
      // The format routes outside the images scope (which checks its own) all read JSON.
      return unsupportedType(request, "application/json");
    default:
      return error;
  }
}

/** A 415 naming the route, the media type it takes and the Content-Type that was sent. */
export function unsupportedType(request: FastifyRequest, mediaType: string): Error {
  const sent = request.headers["content-type"];
  const got = sent === undefined ? "no Content-Type" : `Content-Type ${JSON.stringify(sent)}`;
  const route = `${request.method} ${request.routeOptions.url ?? request.url}`;
  return refusal(415, `${route} takes ${mediaType}; got ${got}.`);
}

function refusal(statusCode: number, message: string): Error {
  return Object.assign(new Error(message), { statusCode });
}

/** A byte count as the limits are configured: whole MiB or KiB when it is one, else bytes. */
export function formatBytes(bytes: number): string {
  if (bytes % (1024 * 1024) === 0) return `${bytes / (1024 * 1024)} MiB`;
  return bytes % 1024 === 0 ? `${bytes / 1024} KiB` : `${bytes} bytes`;
}
