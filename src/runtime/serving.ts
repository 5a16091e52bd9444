import { setTimeout as sleep } from "node:timers/promises";
import type { Transport } from "@connectrpc/connect";
import { metricsPortOf } from "../config/config.js";
import type { Core } from "../core/core.js";
import { createInProcessTransport } from "../serving/in-process-transport.js";
import { remoteCoreTransport } from "./remote-core.js";
import type { Assembly } from "./resources.js";

/**
 * The Prometheus endpoint (TOLLGATE_METRICS_PORT; on by default in dev mode), when configured.
 * Not listening yet: `main` starts its listener; closing the runtime stops it.
 */
export async function openMetrics(a: Assembly): Promise<void> {
  const port = metricsPortOf(a.config, a.mode === "dev");
  if (port === undefined) return;
  // Loaded only by the gateways that serve metrics: prom-client stays out of the CLI.
  const { openMetricsEndpoint } = await import("../metrics/endpoint.js");
  const endpoint = openMetricsEndpoint(port);
  a.parts.metrics = endpoint;
  a.stack.defer(() => endpoint.close());
}

/**
 * The core's HTTP/2 server (not listening yet) and the in-process transport the facade calls it
 * through without a protobuf round trip. The server's drain is deferred here: it runs after the
 * facade's (the reverse of this order), so calls in flight through the facade still reach the
 * core in process, and network callers get the same drain budget.
 */
export async function openCoreServer(a: Assembly, core: Core): Promise<void> {
  a.parts.transport = createInProcessTransport(core.routes, core.routerOptions.interceptors ?? []);
  const { buildCoreServer } = await import("../serving/server.js");
  const coreServer = await buildCoreServer(core, { logger: a.logger });
  a.parts.core = coreServer;
  a.stack.defer(async ({ deadline }) => {
    coreServer.stopAccepting();
    while (coreServer.inFlight() > 0 && Date.now() < deadline) await sleep(10);
    await coreServer.server.close();
  });
}

/** Builds the facade (not listening yet) and defers its drain: the first thing closed. */
export async function openFacade(
  a: Assembly,
  transport: Transport,
  coreLocation: string,
  x402: boolean,
): Promise<void> {
  const { config, parts } = a;
  // Fastify and the facade's routes: loaded only by the runtimes that serve them.
  const { buildFacade } = await import("../facade/facade.js");
  // x402's door lifts a keyless call's small body limit for a payment its payer signed, checked
  // locally on the chains configured (a facade-only tier included: no secret is needed).
  const x402PaymentSigned = x402
    ? (await import("../chains/x402/payment-signature.js")).createPaymentSignatureCheck(config.chains.chains)
    : undefined;
  const facade = await buildFacade({
    transport,
    coreLocation,
    metrics: parts.metrics?.registry,
    logger: a.logger,
    images: config.images,
    publicUrl: config.publicUrl === undefined ? undefined : new URL(config.publicUrl),
    clientTimeouts: config.clientTimeouts,
    trustProxy: config.trustProxy,
    x402,
    unpaidBodyBytes: config.unpaidBodyBytes,
    x402PaymentSigned,
  });
  parts.facade = facade;
  a.stack.defer(async ({ deadline, reason }) => {
    const timeoutMs = Math.max(deadline - Date.now(), 0);
    facade.log.info({ reason, timeoutMs }, "shutting down: draining in-flight requests");
    const force = setTimeout(() => facade.server.closeAllConnections(), timeoutMs);
    force.unref();
    // A connection whose request finishes during the drain turns idle but stays kept alive;
    // close those as they appear instead of waiting for the client's keep-alive to lapse.
    const reap = setInterval(() => facade.server.closeIdleConnections(), 25);
    // Fastify's close stops the listener, answers 503 on kept-alive connections and waits for
    // in-flight requests; the timer above bounds that wait.
    try {
      await facade.close();
    } finally {
      clearInterval(reap);
      clearTimeout(force);
    }
  });
}

/**
 * A facade-only tier: its facade calls the core at TOLLGATE_CORE_URL over gRPC, proving itself
 * with the facade token. The remote core decides whether it takes x402; the door is served when
 * configured so.
 */
export async function openFacadeOnly(a: Assembly, coreUrl: string): Promise<void> {
  a.parts.transport = remoteCoreTransport(coreUrl, undefined, a.config.facadeToken);
  await openFacade(a, a.parts.transport, coreUrl, a.config.onchain.x402);
}
