import type { Http2Server } from "node:http2";
import { createContextValues } from "@connectrpc/connect";
import { fastifyConnectPlugin } from "@connectrpc/connect-fastify";
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  LogController,
  type RawReplyDefaultExpression,
  type RawRequestDefaultExpression,
} from "fastify";
import { peerAddressKey } from "../core/auth/client-address.js";
import type { Core } from "../core/core.js";

/** The core's server: Fastify over a cleartext HTTP/2 server. */
export type CoreFastify = FastifyInstance<
  Http2Server,
  RawRequestDefaultExpression<Http2Server>,
  RawReplyDefaultExpression<Http2Server>
>;

/** The core server and what graceful shutdown needs from it. */
export interface CoreServer {
  readonly server: CoreFastify;
  /** RPCs received and not yet answered. */
  inFlight(): number;
  /** From now on, answer new requests 503 so in-flight ones can drain. */
  stopAccepting(): void;
}

/** Options for the core's network server. */
export interface CoreServerOptions {
  /** The gateway's logger; nothing is logged when absent. */
  readonly logger?: FastifyBaseLogger | undefined;
}

/**
 * The core on an HTTP/2 cleartext server: gRPC, gRPC-Web and Connect on one port. Never listens.
 * Tracks in-flight RPCs so shutdown can let them finish before sessions are closed.
 */
export async function buildCoreServer(core: Core, { logger }: CoreServerOptions = {}): Promise<CoreServer> {
  const server: CoreFastify = Fastify<Http2Server>({
    http2: true,
    ...(logger === undefined ? { logger: false } : { loggerInstance: logger }),
    // The facade logs each request once (src/facade/request-log.ts); a line per RPC would double it.
    logController: new LogController({ disableRequestLogging: true }),
    // Without it, close() waits for every idle HTTP/2 client session to go away on its own.
    forceCloseConnections: true,
  });
  // A set, not a counter: an aborted request may be reported by both hooks below.
  const inFlight = new Set<object>();
  let accepting = true;
  server.addHook("onRequest", async (request, reply) => {
    if (!accepting) return reply.code(503).header("connection", "close").send();
    inFlight.add(request);
  });
  server.addHook("onResponse", async (request) => {
    inFlight.delete(request);
  });
  server.addHook("onRequestAbort", async (request) => {
    inFlight.delete(request);
  });
  await server.register(fastifyConnectPlugin, {
    ...core.routerOptions,
    routes: core.routes,
    // Failed authentications are throttled by the caller's address (src/core/auth/auth-throttle.ts).
    contextValues: (request) => createContextValues().set(peerAddressKey, request.ip),
  });
  return {
    server,
    inFlight: () => inFlight.size,
    stopAccepting: () => {
      accepting = false;
    },
  };
}
