/**
 * A local stand-in for the upstream provider, used by `tollgate dev-upstream` and the tests
 * (there is no internet). It speaks the Anthropic wire format on a real socket, but it is a
 * development aid, not a model: its output is deterministic and labelled as generated.
 *
 * POST /v1/messages answers "[tollgate dev-upstream: generated text, not a model] You said: …"
 * (the first 12 words of the last user message; "You sent N tool results." for a message of
 * tool results only), preceded by a labelled thinking block when `thinking` is enabled or
 * adaptive, or replaced by a tool_use block (input built from the tool's required properties)
 * when `tool_choice` is `any` or names a client tool. Output is cut at `max_tokens` words
 * (thinking first), so output_tokens never exceeds max_tokens; a tool call that does not fit is
 * left out. Usage counts tokens with {@link countRequestTokens} and splits input by prompt
 * caching per the rule in dev-tokens.ts (an in-memory cache per server). Streams emit one word
 * per text or thinking delta, so k text deltas carry exactly k tokens.
 *
 * It also speaks what the provider bills beyond the four token counts, in non-streaming answers
 * and streams alike: usage always says `service_tier`, `inference_geo` and `speed`; web search,
 * web fetch and the advisor run in a server-side loop of sampling passes whose input is summed
 * into the top-level counts (`server_tool_use` counts the searches and fetches); an advisor
 * call, a compaction and a declined primary (`fallbacks`, when the last user text contains
 * "[decline]") are passes of their own, reported in `usage.iterations`. dev-server-tools.ts
 * reads what a request switches on (and answers the real API's 400s: fast mode or residency on
 * a model without it); dev-messages.ts runs the passes and builds the message and its events.
 *
 * Claude Code's WebSearch (CLI 2.1.197, captured against this server): its main request carries
 * a client tool `WebSearch` (input `{query, allowed_domains?, blocked_domains?}`). When the last
 * user text asks to "search the web for Q" and that tool is offered (and the message is not a
 * tool result), the answer is a tool_use of WebSearch with `{query: Q}`. Headless (`-p`), the
 * CLI runs it only with `--allowedTools WebSearch` (otherwise the tool result is an error:
 * "Claude requested permissions to use WebSearch, but you haven't granted it yet."). It then
 * sends its own streamed POST /v1/messages?beta=true: same model, max_tokens 64000,
 * `thinking: {type: "disabled"}`, `output_config: {effort: "high"}`, a three-block system
 * ("x-anthropic-billing-header: …", "You are a Claude agent, built on Anthropic's Claude Agent
 * SDK.", "You are an assistant for performing a web search tool use"), one user message "Perform
 * a web search for the query: Q", `tools: [{type: "web_search_20250305", name: "web_search",
 * max_uses: 8}]` and `tool_choice: {type: "tool", name: "web_search"}`; this server answers it
 * with 3 searches, and the CLI turns their results into the tool_result of its next main request.
 *
 * It also speaks the image formats (../gemini/dev-images.ts): Gemini `generateContent`
 * (`POST /v1beta/models/{model}:generateContent`) and the OpenAI images routes, answering with
 * deterministic PNGs labelled as generated, at the pixel size the request implies. The key, when
 * set, is also accepted as `x-goog-api-key`.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { newId } from "../../core/ids.js";
import { encodeSseFrame } from "../../upstream/sse.js";
import { type DevImageAnswer, devGenerateContent, devOpenaiImages } from "./dev-images.js";
import {
  messageEvents,
  messageJson,
  readConversation,
  runCall,
  validateMessagesRequest,
} from "./dev-messages.js";
import { type DevFeatures, InvalidDevRequest, readDevFeatures } from "./dev-server-tools.js";
import { countRequestTokens, DevPromptCache } from "./dev-tokens.js";

export { DEV_TEXT_LABEL } from "./dev-messages.js";

/** How to run the dev upstream. */
export interface DevUpstreamOptions {
  /** Default 127.0.0.1. */
  readonly host?: string;
  /** Default 0 (a free port). */
  readonly port?: number;
  /** When set, requests without this key (`x-api-key`, or `authorization: Bearer`) get 401 authentication_error. */
  readonly apiKey?: string;
  /** Pause between streamed events (default 0). */
  readonly eventDelayMs?: number;
  /**
   * Tests: answer a request yourself. Return undefined to get the default behaviour. A promise
   * is awaited first, so a test can do slow work (stop a database) before the answer without
   * blocking the server's event loop.
   */
  readonly script?: (
    request: RecordedRequest,
  ) => ScriptedReply | undefined | Promise<ScriptedReply | undefined>;
}

/** One request as the dev upstream received it. */
export interface RecordedRequest {
  readonly method: string;
  /** The request target as sent, query string included (e.g. `/v1/messages?beta=true`). */
  readonly path: string;
  readonly headers: Record<string, string | string[] | undefined>;
  /** The parsed JSON body, or undefined when empty or not JSON. */
  readonly body: unknown;
  readonly rawBody: string;
}

/** A test's own answer to a request. */
export type ScriptedReply =
  /** `body` is JSON-serialised, except a string, which is sent verbatim. */
  | {
      readonly kind: "json";
      readonly status: number;
      readonly body: unknown;
      readonly headers?: Record<string, string>;
    }
  /** HTTP 200 text/event-stream with these events. */
  | { readonly kind: "stream"; readonly events: readonly ScriptedEvent[] }
  /** Accept the request and never answer. */
  | { readonly kind: "hang" }
  /** Close the socket without answering. */
  | { readonly kind: "destroy" }
  /** Reset the connection (TCP RST) without answering. */
  | { readonly kind: "reset" }
  /**
   * Anything on the wire, for a misbehaving provider: `status` (default 200) and `headers`
   * (none by default: no content type), then `chunks` verbatim, `chunkDelayMs` apart (none
   * before the first), then `ending`: end the response (default), close the connection (a body cut
   * short), reset it (TCP RST), hang silent, or write `repeat` every `everyMs` until the client
   * goes away (a stream that never ends).
   */
  | {
      readonly kind: "raw";
      readonly status?: number;
      readonly headers?: Record<string, string>;
      readonly chunks?: readonly (string | Uint8Array)[];
      readonly chunkDelayMs?: number;
      readonly ending?: RawEnding;
    };

/** How a scripted raw answer ends. */
export type RawEnding =
  | "end"
  | "close"
  | "reset"
  | "hang"
  | { readonly repeat: string | Uint8Array; readonly everyMs: number };

/**
 * One step of a scripted stream. Object data is JSON-serialised, string data sent verbatim;
 * `delayMs` is waited before the event (default: the server's eventDelayMs, none before the first).
 */
export type ScriptedEvent =
  | {
      readonly event: string;
      readonly data: unknown;
      readonly delayMs?: number;
      readonly comment?: undefined;
      readonly destroy?: undefined;
    }
  | {
      readonly comment: string;
      readonly event?: undefined;
      readonly data?: undefined;
      readonly destroy?: undefined;
    }
  /** Cut the connection mid-stream. */
  | {
      readonly destroy: true;
      readonly event?: undefined;
      readonly data?: undefined;
      readonly comment?: undefined;
    };

/** A running dev upstream. */
export interface DevUpstream {
  /** e.g. "http://127.0.0.1:PORT". */
  readonly url: string;
  /** Every request received, in order (tests count upstream calls). */
  readonly requests: readonly RecordedRequest[];
  /** Requests to POST /v1/messages only. */
  messageRequests(): readonly RecordedRequest[];
  /** Streams whose client went away before they ended — shows that the gateway aborted the upstream. */
  readonly abortedStreams: number;
  /** Closes the listener and every connection, hanging ones included. */
  close(): Promise<void>;
}

/** Image edits carry up to 14 references, base64-encoded in the Gemini format. */
const MAX_REQUEST_BYTES = 128 * 1024 * 1024;
const MODELS = ["dev-upstream-model"] as const;

/** Starts the dev upstream on a real socket; resolves once it listens. */
export async function startDevUpstream(options: DevUpstreamOptions = {}): Promise<DevUpstream> {
  const requests: RecordedRequest[] = [];
  const cache = new DevPromptCache();
  const eventDelayMs = options.eventDelayMs ?? 0;
  let abortedStreams = 0;

  /** Writes `frames` as an SSE response, stopping (and counting it) when the client goes away. */
  async function stream(res: ServerResponse, requestId: string, steps: readonly StreamStep[]): Promise<void> {
    res.writeHead(200, {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache",
      "request-id": requestId,
    });
    // Headers now, so the client sees the response start before the first event.
    res.flushHeaders();
    let ended = false;
    let closed = false;
    res.once("close", () => {
      closed = true;
      if (!ended) abortedStreams++;
    });
    for (const [index, step] of steps.entries()) {
      const delay = step.delayMs ?? (index > 0 ? eventDelayMs : 0);
      if (delay > 0) await sleep(delay);
      if (closed) return;
      if (step.destroy === true) {
        // Our own cut, not the client going away.
        ended = true;
        res.socket?.destroy();
        return;
      }
      await write(res, step.text ?? "");
      if (closed) return;
    }
    ended = true;
    res.end();
  }

  /** Writes a scripted raw answer (see ScriptedReply "raw"), stopping when the client goes away. */
  async function raw(
    res: ServerResponse,
    requestId: string,
    reply: Extract<ScriptedReply, { kind: "raw" }>,
  ): Promise<void> {
    res.writeHead(reply.status ?? 200, { "request-id": requestId, ...reply.headers });
    res.flushHeaders();
    let closed = false;
    res.once("close", () => {
      closed = true;
    });
    for (const [index, chunk] of (reply.chunks ?? []).entries()) {
      if (index > 0 && (reply.chunkDelayMs ?? 0) > 0) await sleep(reply.chunkDelayMs);
      if (closed) return;
      await write(res, chunk);
    }
    const ending = reply.ending ?? "end";
    if (closed || ending === "hang") return;
    if (ending === "end") res.end();
    else if (ending === "close") res.socket?.end();
    else if (ending === "reset") res.socket?.resetAndDestroy();
    else {
      while (!closed) {
        await sleep(ending.everyMs);
        if (!closed) await write(res, ending.repeat);
      }
    }
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const requestId = newId("req_dev");
    const rawBody = await readRequest(req);
    if (rawBody === undefined) {
      return sendError(
        res,
        requestId,
        413,
        "request_too_large",
        `request exceeds ${MAX_REQUEST_BYTES} bytes`,
      );
    }
    let body: unknown;
    let bodyIsJson = true;
    try {
      body = rawBody === "" ? undefined : JSON.parse(rawBody);
    } catch {
      bodyIsJson = false;
    }
    const recorded: RecordedRequest = {
      method: req.method ?? "GET",
      path: req.url ?? "/",
      headers: req.headers,
      body,
      rawBody,
    };
    requests.push(recorded);

    const scripted = await options.script?.(recorded);
    if (scripted !== undefined) return replyScripted(req, res, requestId, scripted);

    // The official SDK (1.x) sends its API key as a bearer token; Anthropic's gateway takes both.
    if (
      options.apiKey !== undefined &&
      req.headers["x-api-key"] !== options.apiKey &&
      req.headers["x-goog-api-key"] !== options.apiKey &&
      req.headers.authorization !== `Bearer ${options.apiKey}`
    ) {
      return sendError(res, requestId, 401, "authentication_error", "invalid x-api-key");
    }
    const pathname = new URL(recorded.path, "http://dev-upstream").pathname;
    const route = `${recorded.method} ${pathname}`;
    if (route === "GET /v1/models") return sendJson(res, requestId, 200, modelList());
    const image = imageRoute(route, rawBody, body);
    if (image !== undefined) return sendJson(res, requestId, image.status, image.body);
    if (route !== "POST /v1/messages" && route !== "POST /v1/messages/count_tokens") {
      return sendError(res, requestId, 404, "not_found_error", `${route} not found`);
    }
    if (!bodyIsJson || !isRecord(body)) {
      return sendError(res, requestId, 400, "invalid_request_error", "the request body is not a JSON object");
    }
    const counting = route === "POST /v1/messages/count_tokens";
    const invalid = counting
      ? Array.isArray(body.messages)
        ? undefined
        : "messages: Field required"
      : validateMessagesRequest(body);
    if (invalid !== undefined) return sendError(res, requestId, 400, "invalid_request_error", invalid);
    let features: DevFeatures;
    try {
      features = readDevFeatures(body);
    } catch (error) {
      if (!(error instanceof InvalidDevRequest)) throw error;
      return sendError(res, requestId, 400, "invalid_request_error", error.message);
    }
    if (counting) {
      return sendJson(res, requestId, 200, {
        input_tokens: countRequestTokens(readConversation(body, features)),
      });
    }

    const call = runCall(body, features, cache);
    const id = newId("msg_dev");
    if (body.stream !== true) return sendJson(res, requestId, 200, messageJson(id, call));
    const steps = messageEvents(id, call).map((event) => ({
      text: encodeSseFrame({ kind: "event", event: event.type, data: JSON.stringify(event) }),
    }));
    return stream(res, requestId, steps);
  }

  async function replyScripted(
    req: IncomingMessage,
    res: ServerResponse,
    requestId: string,
    reply: ScriptedReply,
  ): Promise<void> {
    switch (reply.kind) {
      case "json": {
        const text = typeof reply.body === "string" ? reply.body : JSON.stringify(reply.body);
        res.writeHead(reply.status, {
          "content-type": "application/json",
          "request-id": requestId,
          ...reply.headers,
        });
        res.end(text);
        return;
      }
      case "hang":
        return;
      case "destroy":
        req.socket.destroy();
        return;
      case "reset":
        req.socket.resetAndDestroy();
        return;
      case "raw":
        return raw(res, requestId, reply);
      case "stream": {
        const steps: StreamStep[] = reply.events.map((event) => {
          if (event.destroy === true) return { destroy: true };
          if (event.comment !== undefined) {
            return { text: encodeSseFrame({ kind: "comment", text: event.comment }) };
          }
          const data = typeof event.data === "string" ? event.data : JSON.stringify(event.data);
          return {
            text: encodeSseFrame({ kind: "event", event: event.event, data }),
            delayMs: event.delayMs,
          };
        });
        return stream(res, requestId, steps);
      }
    }
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      const message = error instanceof Error ? error.message : String(error);
      sendError(res, newId("req_dev"), 500, "api_error", `dev-upstream failed: ${message}`);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, options.host ?? "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const host = address.address.includes(":") ? `[${address.address}]` : address.address;

  return {
    url: `http://${host}:${address.port}`,
    requests,
    messageRequests: () =>
      requests.filter(
        (r) => r.method === "POST" && new URL(r.path, "http://dev-upstream").pathname === "/v1/messages",
      ),
    get abortedStreams() {
      return abortedStreams;
    },
    close: () =>
      new Promise<void>((resolve) => {
        // Ignores "not running", so closing twice is harmless.
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** One write of a stream: wire text, or cutting the connection. */
interface StreamStep {
  readonly text?: string;
  readonly destroy?: true;
  readonly delayMs?: number | undefined;
}

function modelList(): Record<string, unknown> {
  const data = MODELS.map((id) => ({
    type: "model",
    id,
    display_name: "tollgate dev-upstream (not a model)",
    created_at: "2025-01-01T00:00:00Z",
  }));
  return { data, has_more: false, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null };
}

/** The image formats' routes (Gemini generateContent, OpenAI images); undefined for others. */
function imageRoute(route: string, rawBody: string, body: unknown): DevImageAnswer | undefined {
  const gemini = /^POST \/v1beta\/models\/([^/:]+):generateContent$/.exec(route);
  if (gemini !== null) return devGenerateContent(decodeURIComponent(gemini[1] ?? ""), body);
  if (route === "POST /v1/images/generations") return devOpenaiImages("generations", rawBody, body);
  if (route === "POST /v1/images/edits") return devOpenaiImages("edits", rawBody, body);
  return undefined;
}

/** The request body as text, or undefined past {@link MAX_REQUEST_BYTES}. */
async function readRequest(req: IncomingMessage): Promise<string | undefined> {
  const chunks: Buffer[] = [];
  let total = 0;
  // Reads to the end even past the limit: leaving the loop early would destroy the socket
  // before the 413 goes out.
  for await (const chunk of req) {
    total += (chunk as Buffer).byteLength;
    if (total <= MAX_REQUEST_BYTES) chunks.push(chunk as Buffer);
  }
  return total > MAX_REQUEST_BYTES ? undefined : Buffer.concat(chunks).toString("utf8");
}

/** Writes and waits until the text is handed to the socket, so a cut right after still sends it. */
async function write(res: ServerResponse, text: string | Uint8Array): Promise<void> {
  await new Promise<void>((resolve) => {
    const done = () => {
      res.off("close", done);
      resolve();
    };
    res.on("close", done);
    res.write(text, done);
  });
}

function sendJson(res: ServerResponse, requestId: string, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json", "request-id": requestId });
  res.end(JSON.stringify(body));
}

/** Answers in the Anthropic error envelope. */
function sendError(
  res: ServerResponse,
  requestId: string,
  status: number,
  type: string,
  message: string,
): void {
  sendJson(res, requestId, status, { type: "error", error: { type, message }, request_id: requestId });
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
