/**
 * The floor for any Node gateway: a few lines of node:http forwarding each request to the
 * upstream over a keep-alive agent and piping the answer back, with no auth, no billing and no
 * parsing. Run in its own process; prints `{"url": …}` once listening.
 *
 * Usage: node dist/bench/passthrough-proxy.js --upstream http://127.0.0.1:PORT [--port 0]
 */
import { Agent, createServer, request } from "node:http";
import { parseArgs } from "node:util";

const { values } = parseArgs({
  options: { upstream: { type: "string" }, port: { type: "string", default: "0" } },
});
const upstream = new URL(values.upstream ?? "http://127.0.0.1:8789");
const agent = new Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY });

const server = createServer((req, res) => {
  const out = request(
    {
      agent,
      host: upstream.hostname,
      port: upstream.port,
      method: req.method,
      path: req.url,
      headers: { ...req.headers, host: upstream.host },
    },
    (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    },
  );
  out.on("error", () => res.destroy());
  // A client that goes away mid-answer (an abandoned stream) frees the upstream call too.
  res.on("close", () => {
    if (!res.writableFinished) out.destroy();
  });
  req.pipe(out);
});
server.keepAliveTimeout = 60_000;
server.headersTimeout = 0;
server.requestTimeout = 0;
server.listen(Number(values.port), "127.0.0.1", () => {
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no TCP address");
  process.stdout.write(`${JSON.stringify({ url: `http://127.0.0.1:${address.port}` })}\n`);
});
process.on("SIGTERM", () => process.exit(0));
