/**
 * How long the facade waits for a client (docs/reliability.md, "Slow and broken clients"):
 * headers that trickle in (slowloris), a body that trickles in, and a stream the client stops
 * reading. Each is bounded, so a slow or hostile client holds a socket, a hold and a provider
 * connection for a bounded time only.
 */
import type { Server, ServerOptions } from "node:http";
import type { Socket } from "node:net";
import type { FastifyHttpOptions } from "fastify";
import { newRequestId } from "../core/ids.js";

/** The facade's limits on clients, in milliseconds (TOLLGATE_CLIENT_*_TIMEOUT_MS). */
export interface ClientTimeouts {
  /** From the connection's first byte to the end of the request headers. */
  readonly headersMs: number;
  /** From the first byte to the end of the request body (uploads included). */
  readonly requestMs: number;
  /** The longest a stream waits for a client that reads nothing before it is ended. */
  readonly stallMs: number;
}

export const DEFAULT_CLIENT_TIMEOUTS: ClientTimeouts = {
  headersMs: 15_000,
  requestMs: 120_000,
  stallMs: 30_000,
};

/**
 * How often Node looks for requests past their headers or request timeout. Node's default is
 * 30 s, which would let a slowloris connection live 30 s past its limit; a check a second over
 * the open connections is cheap.
 */
const CHECK_INTERVAL_MS = 1_000;

/** The Fastify options that enforce the header and request timeouts. */
export function clientTimeoutOptions(timeouts: ClientTimeouts): Partial<FastifyHttpOptions<Server>> {
  const http: ServerOptions = {
    // Node requires headersTimeout <= requestTimeout.
    headersTimeout: Math.min(timeouts.headersMs, timeouts.requestMs),
    requestTimeout: timeouts.requestMs,
    connectionsCheckingInterval: Math.min(CHECK_INTERVAL_MS, timeouts.headersMs),
  };
  return {
    http,
    // Fastify copies its own requestTimeout onto the server (its default 0 would turn Node's off).
    requestTimeout: timeouts.requestMs,
    clientErrorHandler: answerClientError,
  };
}

/**
 * Answers what Node refuses before a request reaches Fastify (a timeout, headers too large,
 * malformed HTTP) in the primary format's error envelope, with a request id like every other
 * answer, then closes the connection.
 */
function answerClientError(error: NodeJS.ErrnoException, socket: Socket): void {
  if (error.code === "ECONNRESET" || socket.destroyed) return;
  const [status, reason, type, message] =
    error.code === "ERR_HTTP_REQUEST_TIMEOUT"
      ? [
          408,
          "Request Timeout",
          "timeout_error",
          "The request was not received in time; the connection is closed.",
        ]
      : error.code === "HPE_HEADER_OVERFLOW"
        ? [
            431,
            "Request Header Fields Too Large",
            "invalid_request_error",
            "The request headers are too large.",
          ]
        : [400, "Bad Request", "invalid_request_error", "The request is not valid HTTP/1.1."];
  const id = newRequestId();
  const body = JSON.stringify({ type: "error", error: { type, message }, request_id: id });
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${reason}\r\nConnection: close\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nx-request-id: ${id}\r\nrequest-id: ${id}\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}

/**
 * Waits until `raw` can take more (its buffer drained) or closes. A client that reads nothing
 * for `stallMs` has its connection destroyed: the caller's loop then stops, and the call is
 * settled for what was delivered.
 */
export function waitForDrain(
  raw: NodeJS.WritableStream & { destroy(): void; destroyed: boolean },
  stallMs: number,
): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      raw.off("drain", done);
      raw.off("close", done);
      resolve();
    };
    const timer = setTimeout(() => {
      raw.destroy();
      done();
    }, stallMs);
    raw.on("drain", done);
    raw.on("close", done);
  });
}
