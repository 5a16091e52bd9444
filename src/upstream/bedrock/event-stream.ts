/**
 * Bedrock's streamed answer (`application/vnd.amazon.eventstream`) converted to the Messages SSE
 * stream Anthropic would have sent (docs/providers.md, "Amazon Bedrock"). Frames are split by their
 * length prelude and decoded (both CRCs checked) by `@smithy/core`'s event-stream codec. A `chunk`
 * event's payload `{"bytes":"<base64>"}` holds one Messages event, which becomes
 * `event: <type>\ndata: <json>\n\n` with the event's JSON text as Bedrock sent it (re-serialised
 * only to drop Bedrock's own `amazon-bedrock-invocationMetrics`); an exception frame becomes an
 * SSE `error` event in Anthropic's envelope (./errors.ts maps its type).
 */
import { EventStreamCodec, type Message } from "@smithy/core/event-streams";
import { UpstreamFailure, type UpstreamResponse } from "../../core/ports/providers.js";
import { type AnthropicErrorType, anthropicErrorJson } from "../platform-answer.js";
import { mapBedrockError } from "./errors.js";

/** The field Bedrock adds to the last event of a stream; Anthropic's stream has no such field. */
const BEDROCK_METRICS = "amazon-bedrock-invocationMetrics";
/** Largest frame accepted (Bedrock's own frames stay far below; a bigger prelude is garbage). */
const MAX_FRAME_BYTES = 16 * 1024 * 1024;
/** A frame's prelude (total length, headers length, prelude CRC) plus its message CRC. */
const MIN_FRAME_BYTES = 16;

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8");
const codec = new EventStreamCodec(
  (bytes: Uint8Array) => decoder.decode(bytes),
  (text: string) => encoder.encode(text),
);

/** The eventstream body as a body of Messages SSE bytes; destroying it destroys the original. */
export function eventStreamAsSse(body: UpstreamResponse["body"]): UpstreamResponse["body"] {
  return {
    [Symbol.asyncIterator]: () => sseBytes(body),
    destroy: (error?: Error) => body.destroy(error),
  };
}

async function* sseBytes(body: AsyncIterable<Uint8Array>): AsyncGenerator<Uint8Array> {
  let pending: Uint8Array = new Uint8Array(0);
  for await (const chunk of body) {
    pending = pending.byteLength === 0 ? chunk : concat(pending, chunk);
    let offset = 0;
    while (pending.byteLength - offset >= 4) {
      const view = new DataView(pending.buffer, pending.byteOffset + offset, 4);
      const length = view.getUint32(0, false);
      if (length < MIN_FRAME_BYTES || length > MAX_FRAME_BYTES) {
        throw new UpstreamFailure("malformed", `Bedrock event stream: a frame of ${length} bytes`);
      }
      if (pending.byteLength - offset < length) break;
      const text = sseOf(decodeFrame(pending.subarray(offset, offset + length)));
      offset += length;
      if (text !== undefined) yield encoder.encode(text);
    }
    pending = pending.subarray(offset);
  }
  if (pending.byteLength > 0) {
    throw new UpstreamFailure(
      "broken",
      `Bedrock event stream cut inside a frame (${pending.byteLength} bytes)`,
    );
  }
}

function decodeFrame(frame: Uint8Array): Message {
  try {
    return codec.decode(frame);
  } catch (error) {
    throw new UpstreamFailure("malformed", `Bedrock event stream: ${String(error)}`, { cause: error });
  }
}

/** One frame as SSE text; undefined for a frame that carries no Messages event. */
function sseOf(frame: Message): string | undefined {
  const messageType = stringHeader(frame, ":message-type");
  if (messageType === "event") {
    if (stringHeader(frame, ":event-type") !== "chunk") return undefined;
    return chunkEvent(decoder.decode(frame.body));
  }
  if (messageType === "exception") {
    const name = stringHeader(frame, ":exception-type");
    const message = messageOf(decoder.decode(frame.body)) ?? name ?? "Bedrock stream exception";
    return sseError(mapBedrockError(name, 500).type, message, name);
  }
  if (messageType === "error") {
    const code = stringHeader(frame, ":error-code");
    const message = stringHeader(frame, ":error-message") ?? code ?? "Bedrock stream error";
    return sseError(mapBedrockError(code, 500).type, message, code);
  }
  return undefined;
}

/** A `chunk` payload `{"bytes":"<base64>"}` as its Messages event's SSE text. */
function chunkEvent(payload: string): string | undefined {
  let event: Record<string, unknown>;
  let json: string;
  try {
    const bytes = (JSON.parse(payload) as { bytes?: unknown }).bytes;
    if (typeof bytes !== "string") throw new Error("no bytes");
    json = Buffer.from(bytes, "base64").toString("utf8");
    event = JSON.parse(json) as Record<string, unknown>;
  } catch (error) {
    throw new UpstreamFailure("malformed", "Bedrock chunk is not a Messages event", { cause: error });
  }
  // A payload without a type names no SSE event (a keep-alive): dropped, as the SDK does.
  if (typeof event !== "object" || event === null || typeof event.type !== "string") return undefined;
  if (BEDROCK_METRICS in event) {
    const { [BEDROCK_METRICS]: _metrics, ...anthropic } = event;
    json = JSON.stringify(anthropic);
  } else if (json.includes("\n") || json.includes("\r")) {
    // SSE data must be one line; JSON's own whitespace can go.
    json = JSON.stringify(event);
  }
  return `event: ${event.type}\ndata: ${json}\n\n`;
}

function sseError(type: AnthropicErrorType, message: string, name: string | undefined): string {
  const text = name === undefined ? message : `${name}: ${message}`;
  return `event: error\ndata: ${anthropicErrorJson(type, text)}\n\n`;
}

function messageOf(body: string): string | undefined {
  try {
    const parsed = JSON.parse(body) as { message?: unknown; Message?: unknown };
    const message = parsed.message ?? parsed.Message;
    return typeof message === "string" ? message : undefined;
  } catch {
    return body === "" ? undefined : body;
  }
}

function stringHeader(frame: Message, name: string): string | undefined {
  const header = frame.headers[name];
  return header?.type === "string" ? header.value : undefined;
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.byteLength + b.byteLength);
  out.set(a, 0);
  out.set(b, a.byteLength);
  return out;
}
