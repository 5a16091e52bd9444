/**
 * The dev chain's websocket subscriptions, on the RPC's own port (HTTP upgrade): the ones
 * @solana/web3.js 1.x uses to confirm transactions (`signatureSubscribe`, which
 * `confirmTransaction` and `sendAndConfirmTransaction` wait on) and `slotSubscribe`. web3.js
 * guesses a websocket port of the HTTP port + 1, so clients pass
 * `new Connection(rpcUrl, { wsEndpoint: wsUrl })`. The gateway's adapter does not need it: it
 * polls statuses.
 */
import type { IncomingMessage, Server } from "node:http";
import type { Duplex } from "node:stream";
import { type WebSocket, WebSocketServer } from "ws";
import { type Commitment, type DevSvm, RPC_ERROR } from "./dev-svm.js";

type Subscription =
  | { readonly kind: "signature"; readonly signature: string; readonly commitment: Commitment }
  | { readonly kind: "slot"; lastSlot: number };

const SUBSCRIBE: Record<string, Subscription["kind"]> = {
  signatureSubscribe: "signature",
  slotSubscribe: "slot",
};
const UNSUBSCRIBE = new Set(["signatureUnsubscribe", "slotUnsubscribe"]);

/** Serves subscriptions on `server`'s websocket upgrades until the returned close() is called. */
export function attachDevWebsocket(server: Server, chain: DevSvm): { close(): void } {
  const wss = new WebSocketServer({ noServer: true, maxPayload: 1024 * 1024 });
  const sockets = new Map<WebSocket, Map<number, Subscription>>();
  let nextId = 1;

  const deliver = (socket: WebSocket, subs: Map<number, Subscription>): void => {
    for (const [id, sub] of subs) {
      if (sub.kind === "slot") {
        const slot = chain.processedSlot;
        if (slot === sub.lastSlot) continue;
        sub.lastSlot = slot;
        notify(socket, "slotNotification", id, { parent: slot - 1, root: chain.slotAt("finalized"), slot });
        continue;
      }
      const tx = chain.transaction(sub.signature);
      if (tx === undefined || tx.slot > chain.slotAt(sub.commitment)) continue;
      // A signature subscription ends with its one notification, as on Solana.
      subs.delete(id);
      notify(socket, "signatureNotification", id, {
        context: { slot: chain.processedSlot },
        value: { err: tx.err },
      });
    }
  };
  const stopListening = chain.onChange(() => {
    for (const [socket, subs] of sockets) deliver(socket, subs);
  });

  const onUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer): void => {
    wss.handleUpgrade(req, socket, head, (ws) => {
      const subs = new Map<number, Subscription>();
      sockets.set(ws, subs);
      ws.on("close", () => sockets.delete(ws));
      ws.on("message", (data) => {
        let request: { id?: unknown; method?: unknown; params?: unknown };
        try {
          request = JSON.parse(data.toString());
        } catch {
          reply(ws, null, undefined, { code: RPC_ERROR.parse, message: "Parse error" });
          return;
        }
        // Notifications (no id), such as web3.js's keep-alive "ping", need no answer.
        if (request.id === undefined || request.id === null) return;
        const params = Array.isArray(request.params) ? request.params : [];
        const method = String(request.method);
        const kind = SUBSCRIBE[method];
        if (kind === "signature") {
          const commitment =
            (params[1] as { commitment?: Commitment } | undefined)?.commitment ?? "finalized";
          if (
            typeof params[0] !== "string" ||
            !["processed", "confirmed", "finalized"].includes(commitment)
          ) {
            reply(ws, request.id, undefined, { code: RPC_ERROR.invalidParams, message: "Invalid params" });
            return;
          }
          const id = nextId++;
          subs.set(id, { kind, signature: params[0], commitment });
          reply(ws, request.id, id);
          deliver(ws, subs);
        } else if (kind === "slot") {
          const id = nextId++;
          subs.set(id, { kind, lastSlot: chain.processedSlot });
          reply(ws, request.id, id);
        } else if (UNSUBSCRIBE.has(method)) {
          reply(ws, request.id, subs.delete(Number(params[0])));
        } else {
          reply(ws, request.id, undefined, {
            code: RPC_ERROR.methodNotFound,
            message: `Method not found: ${method}`,
          });
        }
      });
    });
  };
  server.on("upgrade", onUpgrade);

  return {
    close: () => {
      stopListening();
      server.off("upgrade", onUpgrade);
      for (const ws of sockets.keys()) ws.terminate();
      wss.close();
    },
  };
}

function reply(ws: WebSocket, id: unknown, result: unknown, error?: { code: number; message: string }): void {
  ws.send(
    JSON.stringify(error === undefined ? { jsonrpc: "2.0", id, result } : { jsonrpc: "2.0", id, error }),
  );
}

function notify(ws: WebSocket, method: string, subscription: number, result: unknown): void {
  ws.send(JSON.stringify({ jsonrpc: "2.0", method, params: { result, subscription } }));
}
