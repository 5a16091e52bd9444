import type { ServerResponse } from "node:http";
import { ConnectError } from "@connectrpc/connect";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { errorInfo } from "../core/errors.js";

/** One answered facade request, as the metrics exporter counts it. */
export interface FinishedRequest {
  readonly requestId: string;
  /** The route pattern (`/v1/messages`), `unmatched` for a path no route serves: bounded labels. */
  readonly route: string;
  readonly method: string;
  /** The answer's status; 499 when the client went away before the answer's head. */
  readonly status: number;
  /** The core's error reason in lower case (`insufficient_funds`), Fastify's error code, `unknown`, or `none`. */
  readonly reason: string;
  /** From arrival to the end of the answer (or the client leaving). */
  readonly seconds: number;
  /** From arrival to the answer's head, when one was written. */
  readonly headSeconds: number | undefined;
  /** An event stream's first event after arrival; undefined for other answers. */
  readonly firstByteSeconds: number | undefined;
}

/** Where the facade reports its requests (src/metrics/prometheus.ts). */
export interface RequestMetrics {
  requestFinished(request: FinishedRequest): void;
}

/** The error reason of each failed request, kept from `onError` until the answer ends. */
const reasons = new WeakMap<FastifyRequest, string>();

/**
 * Counts every request when its connection is done with it, including hijacked streams (which
 * Fastify's `onResponse` never sees). The answer's head and a stream's first event are timed by
 * wrapping this response's own `writeHead` and `write`: Node has no event for either.
 */
export function addMetricsHooks(app: FastifyInstance, metrics: RequestMetrics): void {
  app.addHook("onError", async (request, _reply, error) => {
    reasons.set(request, reasonOf(error));
  });
  app.addHook("onRequest", async (request, reply) => {
    const start = performance.now();
    const raw = reply.raw;
    const timing = timeWrites(raw);
    raw.once("close", () => {
      const end = performance.now();
      const answered = raw.headersSent;
      const since = (at: number | undefined) => (at === undefined ? undefined : (at - start) / 1000);
      metrics.requestFinished({
        requestId: request.id,
        route: request.routeOptions.url ?? "unmatched",
        method: request.method,
        status: answered ? raw.statusCode : 499,
        reason: reasons.get(request) ?? (raw.statusCode >= 400 && answered ? "unknown" : "none"),
        seconds: (end - start) / 1000,
        headSeconds: since(timing.headAt),
        firstByteSeconds: timing.eventStream ? since(timing.firstWriteAt) : undefined,
      });
    });
  });
}

/** When an answer's head and first body bytes went out, and whether it is an event stream. */
interface WriteTiming {
  headAt: number | undefined;
  firstWriteAt: number | undefined;
  eventStream: boolean;
}

/** Records when `raw` first writes its head and its first body bytes. */
function timeWrites(raw: ServerResponse): WriteTiming {
  const timing: WriteTiming = { headAt: undefined, firstWriteAt: undefined, eventStream: false };
  const writeHead = raw.writeHead;
  const write = raw.write;
  raw.writeHead = function (this: ServerResponse, ...args: Parameters<ServerResponse["writeHead"]>) {
    timing.headAt ??= performance.now();
    raw.writeHead = writeHead;
    const result = writeHead.apply(this, args);
    // Headers passed to writeHead (as the SSE route does) are not readable with getHeader.
    timing.eventStream = contentTypeOf(raw, args).startsWith("text/event-stream");
    return result;
  } as ServerResponse["writeHead"];
  raw.write = function (this: ServerResponse, ...args: Parameters<ServerResponse["write"]>) {
    timing.firstWriteAt ??= performance.now();
    raw.write = write;
    return write.apply(this, args as never);
  } as ServerResponse["write"];
  return timing;
}

/** The content type set on `raw` or passed to its writeHead. */
function contentTypeOf(raw: ServerResponse, args: readonly unknown[]): string {
  const set = raw.getHeader("content-type");
  if (set !== undefined) return String(set);
  const headers = args.find((arg) => typeof arg === "object" && arg !== null && !Array.isArray(arg));
  for (const [name, value] of Object.entries(headers ?? {}))
    if (name.toLowerCase() === "content-type") return String(value);
  return "";
}

/** A failed request's reason label: the core's, else Fastify's own code, else `unknown`. */
function reasonOf(error: unknown): string {
  if (error instanceof ConnectError) {
    return errorInfo(error)?.reason.toLowerCase() ?? "unknown";
  }
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && code.startsWith("FST_") ? code.toLowerCase() : "unknown";
}
