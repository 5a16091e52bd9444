/**
 * The benchmark's stand-in provider, run in its own process: Anthropic messages (JSON and SSE),
 * count_tokens, and Gemini generateContent with an inline image, each after a fixed latency and
 * (for streams) at a fixed pace. A user message containing `bench:silent` gets a stream that
 * opens (`message_start`) and then stays silent until the client goes away: the idle-streams run.
 *
 * Usage: node dist/bench/fake-upstream.js [--port 0] [--latency-ms 20] [--event-gap-ms 2] [--deltas 8]
 * Prints one JSON line `{"url": "http://127.0.0.1:PORT"}` once listening.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { parseArgs } from "node:util";

const { values } = parseArgs({
  options: {
    host: { type: "string", default: "127.0.0.1" },
    port: { type: "string", default: "0" },
    "latency-ms": { type: "string", default: "20" },
    "event-gap-ms": { type: "string", default: "2" },
    deltas: { type: "string", default: "8" },
  },
});
const latencyMs = Number(values["latency-ms"]);
const eventGapMs = Number(values["event-gap-ms"]);
const deltas = Number(values.deltas);

/** A 1×1 transparent PNG: the bytes of a real image, small enough not to measure base64 throughput. */
const PNG_1x1 =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

let sequence = 0;

function message(model: string): string {
  sequence += 1;
  return JSON.stringify({
    id: `msg_bench${sequence}`,
    type: "message",
    role: "assistant",
    model,
    content: [{ type: "text", text: "Benchmark answer from the fake upstream." }],
    stop_reason: "end_turn",
    stop_sequence: null,
    usage: { input_tokens: 12, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 9 },
  });
}

function frame(event: string, data: unknown): string {
  return `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

function messageStart(model: string): string {
  sequence += 1;
  return frame("message_start", {
    type: "message_start",
    message: {
      id: `msg_bench${sequence}`,
      type: "message",
      role: "assistant",
      model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: {
        input_tokens: 12,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
        output_tokens: 1,
      },
    },
  });
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function stream(res: ServerResponse, model: string, silent: boolean): Promise<void> {
  res.writeHead(200, {
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    "request-id": `req_bench${sequence}`,
  });
  res.write(messageStart(model));
  if (silent) return; // Held open until the client goes away.
  res.write(
    frame("content_block_start", {
      type: "content_block_start",
      index: 0,
      content_block: { type: "text", text: "" },
    }),
  );
  for (let i = 0; i < deltas; i++) {
    if (eventGapMs > 0) await sleep(eventGapMs);
    if (res.destroyed) return;
    res.write(
      frame("content_block_delta", {
        type: "content_block_delta",
        index: 0,
        delta: { type: "text_delta", text: `word${i} ` },
      }),
    );
  }
  res.write(frame("content_block_stop", { type: "content_block_stop", index: 0 }));
  res.write(
    frame("message_delta", {
      type: "message_delta",
      delta: { stop_reason: "end_turn", stop_sequence: null },
      usage: { output_tokens: deltas + 1 },
    }),
  );
  res.end(frame("message_stop", { type: "message_stop" }));
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

function json(res: ServerResponse, status: number, body: string): void {
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

const server = createServer(async (req, res) => {
  const text = await readBody(req);
  let body: { model?: string; stream?: boolean } = {};
  try {
    body = JSON.parse(text) as typeof body;
  } catch {
    return json(res, 400, '{"type":"error","error":{"type":"invalid_request_error","message":"bad JSON"}}');
  }
  const path = (req.url ?? "").split("?")[0] ?? "";
  const silent = text.includes("bench:silent");
  if (!silent && latencyMs > 0) await sleep(latencyMs);
  if (req.method === "POST" && path === "/v1/messages") {
    const model = body.model ?? "claude-haiku-4-5";
    if (body.stream === true) return stream(res, model, silent);
    return json(res, 200, message(model));
  }
  if (req.method === "POST" && path === "/v1/messages/count_tokens") {
    return json(res, 200, '{"input_tokens":12}');
  }
  if (req.method === "POST" && /^\/v1beta\/models\/[^/]+:generateContent$/.test(path)) {
    return json(
      res,
      200,
      JSON.stringify({
        candidates: [
          {
            content: { role: "model", parts: [{ inlineData: { mimeType: "image/png", data: PNG_1x1 } }] },
            finishReason: "STOP",
          },
        ],
        usageMetadata: {
          promptTokenCount: 10,
          candidatesTokenCount: 1290,
          totalTokenCount: 1300,
          candidatesTokensDetails: [{ modality: "IMAGE", tokenCount: 1290 }],
        },
        modelVersion: path.slice("/v1beta/models/".length, -":generateContent".length),
      }),
    );
  }
  return json(res, 404, '{"type":"error","error":{"type":"not_found_error","message":"no such route"}}');
});
// The gateway and the proxy keep connections alive; never be the side that closes them mid-run.
server.keepAliveTimeout = 60_000;
server.headersTimeout = 0;
server.requestTimeout = 0;
server.maxConnections = 100_000;
server.listen(Number(values.port), values.host, () => {
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no TCP address");
  process.stdout.write(`${JSON.stringify({ url: `http://${values.host}:${address.port}` })}\n`);
});
process.on("SIGTERM", () => process.exit(0));
