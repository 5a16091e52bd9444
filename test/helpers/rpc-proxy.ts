import { createServer, type Server } from "node:http";

/** When a proxied raw transaction is reported: before it is forwarded, or once the chain answered. */
export type BroadcastPhase = "before" | "after";

/**
 * A pass-through JSON-RPC proxy between a gateway and its chain, for kill -9 tests. On a raw
 * transaction (`method`: EVM's `eth_sendRawTransaction` unless told otherwise, Solana's
 * `sendTransaction`) it asks `onSend("before")` before forwarding and `onSend("after", answer)`
 * once the chain has answered (`answer`: the chain's JSON-RPC response as text); when either
 * returns true the caller (killed meanwhile) never hears back.
 */
export function rpcProxy(
  target: string,
  onSend: (phase: BroadcastPhase, answer?: string) => Promise<boolean>,
  method = "eth_sendRawTransaction",
): Promise<Server> {
  const server = createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (chunk: string) => {
      body += chunk;
    });
    req.on("end", async () => {
      try {
        const sending = body.includes(`"${method}"`);
        if (sending && (await onSend("before"))) return void res.destroy();
        const upstream = await fetch(target, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body,
        });
        const text = await upstream.text();
        if (sending && (await onSend("after", text))) return void res.destroy();
        res.writeHead(upstream.status, { "content-type": "application/json" }).end(text);
      } catch {
        res.destroy();
      }
    });
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}
