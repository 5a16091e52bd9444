import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { PrometheusMetrics } from "./prometheus.js";

/** The metrics port's listener: `GET /metrics` only, on a port of its own. */
export interface MetricsServer {
  /** `http://host:port/metrics`. */
  readonly url: string;
  close(): Promise<void>;
}

/**
 * Serves the exposition text on `host:port` (0 picks a free port). A plain node:http server, apart
 * from the facade: scrapes never share the public port's limits, hooks or logs, and the port can
 * stay private while the facade is public.
 */
export async function listenMetrics(
  metrics: PrometheusMetrics,
  host: string,
  port: number,
): Promise<MetricsServer> {
  const server = createServer((request, response) => {
    const path = (request.url ?? "").split("?")[0];
    if (path !== "/metrics" || (request.method !== "GET" && request.method !== "HEAD")) {
      response.writeHead(404, { "content-type": "text/plain; charset=utf-8" }).end("GET /metrics\n");
      return;
    }
    metrics.scrape().then(
      ({ text, contentType }) => response.writeHead(200, { "content-type": contentType }).end(text),
      (error: unknown) =>
        response
          .writeHead(500, { "content-type": "text/plain; charset=utf-8" })
          .end(`metrics failed: ${error instanceof Error ? error.message : String(error)}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    const refused = (error: NodeJS.ErrnoException) =>
      reject(
        error.code === "EADDRINUSE"
          ? new Error(
              `the metrics port ${host}:${port} is in use: set TOLLGATE_METRICS_PORT to another port (0: any free one) or off`,
            )
          : error,
      );
    server.once("error", refused);
    server.listen(port, host, () => {
      server.off("error", refused);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const shown = address.family === "IPv6" ? `[${address.address}]` : address.address;
  return { url: `http://${shown}:${address.port}/metrics`, close: () => closeServer(server) };
}

function closeServer(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}
