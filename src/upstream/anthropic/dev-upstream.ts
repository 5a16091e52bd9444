/**
 * A local stand-in for the upstream provider, used by `tollgate dev-upstream` and the tests
 * (there is no internet). It speaks the Anthropic wire format on a real socket, but it is a
 * development aid, not a model: its output is deterministic and labelled as generated.
 *
 * POST /v1/messages answers "[tollgate dev-upstream: generated text, not a model] You said: …"
 * (the first 12 words of the last user message), preceded by a labelled thinking block when
 * `thinking` is enabled or adaptive, or replaced by a tool_use block (input built from the
 * tool's required properties) when `tool_choice` is `any` or names a tool. Output is cut at
 * `max_tokens` words (thinking first), so output_tokens never exceeds max_tokens; a tool call
 * that does not fit is left out. Usage counts tokens with {@link countRequestTokens} and splits
 * input by prompt caching per the rule in dev-tokens.ts (an in-memory cache per server).
 * Streams emit one word per text or thinking delta, so k text deltas carry exactly k tokens.
 *
 * It also speaks the image formats (../gemini/dev-images.ts): Gemini `generateContent`
 * (`POST /v1beta/models/{model}:generateContent`) and the OpenAI images routes, answering with
 * deterministic PNGs labelled as generated, at the pixel size the request implies. The key, when
 * set, is also accepted as `x-goog-api-key`.
 */
import { createHash } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { newId } from "../../core/ids.js";
import { type DevImageAnswer, devGenerateContent, devOpenaiImages } from "../gemini/dev-images.js";
import { countRequestTokens, DevPromptCache, devTokenCount, type InputUsage } from "./dev-tokens.js";
import { encodeSseFrame } from "./sse.js";

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
  /** Tests: answer a request yourself. Return undefined to get the default behaviour. */
  readonly script?: (request: RecordedRequest) => ScriptedReply | undefined;
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
  | { readonly kind: "destroy" };

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

/** What every generated answer starts with, so nobody mistakes it for a model's output. */
export const DEV_TEXT_LABEL = "[tollgate dev-upstream: generated text, not a model]";
const DEV_THINKING_LABEL = "[tollgate dev-upstream: generated thinking, not a model]";
const ECHO_WORDS = 12;
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

    const scripted = options.script?.(recorded);
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
    if (route === "POST /v1/messages/count_tokens") {
      if (!Array.isArray(body.messages)) {
        return sendError(res, requestId, 400, "invalid_request_error", "messages: Field required");
      }
      return sendJson(res, requestId, 200, { input_tokens: countRequestTokens(body) });
    }

    const invalid = validate(body);
    if (invalid !== undefined) return sendError(res, requestId, 400, "invalid_request_error", invalid);
    const request = body as unknown as MessagesRequest;
    const answer = generate(request);
    const usage = cache.account(body);
    const message = { id: newId("msg_dev"), type: "message", role: "assistant", model: request.model };
    if (body.stream !== true) {
      return sendJson(res, requestId, 200, {
        ...message,
        content: answer.blocks.map(blockJson),
        stop_reason: answer.stopReason,
        stop_sequence: null,
        usage: fullUsage(usage, answer.outputTokens),
      });
    }
    const steps = streamEvents(message, answer, usage).map((event) => ({
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

/** The fields of a Messages request the dev upstream reads, after {@link validate}. */
interface MessagesRequest {
  readonly model: string;
  readonly max_tokens: number;
  readonly messages: readonly unknown[];
  readonly tools?: unknown;
  readonly tool_choice?: unknown;
  readonly thinking?: unknown;
  readonly stream?: unknown;
}

type GeneratedBlock =
  | { readonly type: "thinking"; readonly words: readonly string[]; readonly signature: string }
  | { readonly type: "text"; readonly words: readonly string[] }
  | { readonly type: "tool_use"; readonly id: string; readonly name: string; readonly input: unknown };

interface Answer {
  readonly blocks: readonly GeneratedBlock[];
  readonly stopReason: "end_turn" | "max_tokens" | "tool_use";
  readonly outputTokens: number;
}

/** The minimal checks of the real API; undefined when the request is acceptable. */
function validate(body: Record<string, unknown>): string | undefined {
  if (typeof body.model !== "string" || body.model === "") return "model: Field required";
  if (typeof body.max_tokens !== "number" || !Number.isInteger(body.max_tokens) || body.max_tokens < 1) {
    return "max_tokens: Input should be a positive integer";
  }
  if (!Array.isArray(body.messages)) return "messages: Field required";
  if (body.messages.length === 0) return "messages: at least one message is required";
  const choice = body.tool_choice;
  if (isRecord(choice) && (choice.type === "any" || choice.type === "tool")) {
    const tools = toolNames(body.tools);
    if (tools.length === 0) return "tool_choice: requires tools";
    if (choice.type === "tool" && !tools.includes(String(choice.name))) {
      return `tool_choice.name: tool ${JSON.stringify(choice.name)} not found in tools`;
    }
  }
  return undefined;
}

/** The deterministic answer to a request. */
function generate(request: MessagesRequest): Answer {
  const blocks: GeneratedBlock[] = [];
  let budget = request.max_tokens;
  let truncated = false;
  const userWords = words(lastUserText(request.messages));
  const thinking = isRecord(request.thinking) ? request.thinking.type : undefined;
  if (thinking === "enabled" || thinking === "adaptive") {
    const all = words(`${DEV_THINKING_LABEL} The last user message has ${userWords.length} words.`);
    const taken = all.slice(0, budget);
    budget -= taken.length;
    truncated = taken.length < all.length;
    const signature = createHash("sha256").update(taken.join(" ")).digest("base64");
    blocks.push({ type: "thinking", words: taken, signature });
  }
  const tool = chosenTool(request);
  if (!truncated && tool !== undefined) {
    const input = sampleInput(tool.input_schema);
    const tokens = devTokenCount(JSON.stringify(input));
    // A tool call is whole or absent: half a JSON input helps nobody.
    if (tokens <= budget) {
      budget -= tokens;
      blocks.push({ type: "tool_use", id: newId("toolu_dev"), name: String(tool.name), input });
    } else truncated = true;
  } else if (!truncated) {
    const echo =
      userWords.length === 0 ? "You sent no text." : `You said: ${userWords.slice(0, ECHO_WORDS).join(" ")}`;
    const all = words(`${DEV_TEXT_LABEL} ${echo}`);
    const taken = all.slice(0, budget);
    budget -= taken.length;
    truncated = taken.length < all.length;
    if (taken.length > 0) blocks.push({ type: "text", words: taken });
  }
  const stopReason = truncated ? "max_tokens" : tool !== undefined ? "tool_use" : "end_turn";
  return { blocks, stopReason, outputTokens: request.max_tokens - budget };
}

function blockJson(block: GeneratedBlock): Record<string, unknown> {
  switch (block.type) {
    case "thinking":
      return { type: "thinking", thinking: block.words.join(" "), signature: block.signature };
    case "text":
      return { type: "text", text: block.words.join(" ") };
    case "tool_use":
      return { type: "tool_use", id: block.id, name: block.name, input: block.input };
  }
}

/** The Anthropic event sequence for an answer; each event's `type` is its SSE event name. */
function streamEvents(
  message: Record<string, unknown>,
  answer: Answer,
  usage: InputUsage,
): { readonly type: string; readonly [field: string]: unknown }[] {
  const events: { readonly type: string; readonly [field: string]: unknown }[] = [
    {
      type: "message_start",
      message: {
        ...message,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: fullUsage(usage, 1),
      },
    },
  ];
  if (answer.blocks.length === 0) events.push({ type: "ping" });
  for (const [index, block] of answer.blocks.entries()) {
    const delta = (payload: Record<string, unknown>) =>
      events.push({ type: "content_block_delta", index, delta: payload });
    const start =
      block.type === "thinking"
        ? { type: "thinking", thinking: "", signature: "" }
        : block.type === "text"
          ? { type: "text", text: "" }
          : { type: "tool_use", id: block.id, name: block.name, input: {} };
    events.push({ type: "content_block_start", index, content_block: start });
    if (index === 0) events.push({ type: "ping" });
    switch (block.type) {
      case "thinking":
        for (const [i, word] of block.words.entries())
          delta({ type: "thinking_delta", thinking: spaced(word, i) });
        delta({ type: "signature_delta", signature: block.signature });
        break;
      case "text":
        for (const [i, word] of block.words.entries()) delta({ type: "text_delta", text: spaced(word, i) });
        break;
      case "tool_use": {
        delta({ type: "input_json_delta", partial_json: "" });
        for (const piece of pieces(JSON.stringify(block.input))) {
          delta({ type: "input_json_delta", partial_json: piece });
        }
        break;
      }
    }
    events.push({ type: "content_block_stop", index });
  }
  events.push({
    type: "message_delta",
    delta: { stop_reason: answer.stopReason, stop_sequence: null },
    usage: {
      input_tokens: usage.input_tokens,
      cache_creation_input_tokens: usage.cache_creation_input_tokens,
      cache_read_input_tokens: usage.cache_read_input_tokens,
      output_tokens: answer.outputTokens,
    },
  });
  events.push({ type: "message_stop" });
  return events;
}

function fullUsage(usage: InputUsage, outputTokens: number): Record<string, unknown> {
  return {
    input_tokens: usage.input_tokens,
    output_tokens: outputTokens,
    cache_creation_input_tokens: usage.cache_creation_input_tokens,
    cache_read_input_tokens: usage.cache_read_input_tokens,
    cache_creation: { ...usage.cache_creation },
    service_tier: "standard",
  };
}

/** A word as a delta: its leading space, except the first, so the deltas concatenate to the text. */
function spaced(word: string, index: number): string {
  return index === 0 ? word : ` ${word}`;
}

/** Splits JSON text into 2–3 pieces, as the real API streams tool input in fragments. */
function pieces(json: string): string[] {
  if (json.length < 3) return [json];
  const count = json.length < 12 ? 2 : 3;
  const size = Math.ceil(json.length / count);
  const out: string[] = [];
  for (let start = 0; start < json.length; start += size) out.push(json.slice(start, start + size));
  return out;
}

function words(text: string): string[] {
  return text.match(/\S+/g) ?? [];
}

/** The text of the last user message: its string content or its text blocks. */
function lastUserText(messages: readonly unknown[]): string {
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i];
    if (!isRecord(message) || message.role !== "user") continue;
    if (typeof message.content === "string") return message.content;
    if (!Array.isArray(message.content)) return "";
    return message.content
      .filter(
        (block): block is { text: string } =>
          isRecord(block) && block.type === "text" && typeof block.text === "string",
      )
      .map((block) => block.text)
      .join(" ");
  }
  return "";
}

function toolNames(tools: unknown): string[] {
  if (!Array.isArray(tools)) return [];
  return tools.filter(isRecord).map((tool) => String(tool.name));
}

/** The tool `tool_choice` forces: the named one, or the first for `any`; undefined otherwise. */
function chosenTool(request: MessagesRequest): Record<string, unknown> | undefined {
  const choice = request.tool_choice;
  if (!isRecord(choice) || !Array.isArray(request.tools)) return undefined;
  const tools = request.tools.filter(isRecord);
  if (choice.type === "any") return tools[0];
  if (choice.type === "tool") return tools.find((tool) => tool.name === choice.name);
  return undefined;
}

/** A small deterministic input: the schema's required properties, each with a placeholder value. */
function sampleInput(schema: unknown): Record<string, unknown> {
  const input: Record<string, unknown> = {};
  if (!isRecord(schema) || !isRecord(schema.properties) || !Array.isArray(schema.required)) return input;
  for (const name of schema.required) {
    if (typeof name === "string") input[name] = sampleValue(schema.properties[name]);
  }
  return input;
}

function sampleValue(schema: unknown): unknown {
  if (!isRecord(schema)) return "dev-upstream";
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
  switch (schema.type) {
    case "number":
    case "integer":
      return 1;
    case "boolean":
      return true;
    case "array":
      return [];
    case "object":
      return sampleInput(schema);
    case "null":
      return null;
    default:
      return "dev-upstream";
  }
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
async function write(res: ServerResponse, text: string): Promise<void> {
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
