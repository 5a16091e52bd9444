/**
 * Server-sent-events framing of a provider's stream: bytes to frames as they arrive (the text
 * adapter answers the core's TextUpstream.frames with it; the core meters the frames), and frames back to wire bytes (the dev upstream and
 * tests), keeping each event's data text exactly as the provider sent it.
 */
import { createParser } from "eventsource-parser";
import { type SseFrame, UpstreamFailure } from "../core/ports/providers.js";

export type { SseFrame };

/** Largest partial frame held while waiting for its end: a stream past it is not Anthropic's. */
const MAX_FRAME_CHARS = 16 * 1024 * 1024;

/**
 * Parses a byte stream into frames as they arrive (no buffering beyond one frame). A trailing
 * frame without its blank line is dropped, as the SSE spec says. A line that is no SSE field
 * (`event`, `data`, `id`, `retry` or a comment) is not a stream at all: it fails the parse
 * ("malformed") instead of being skipped, so garbage never passes for a quiet provider. Stopping
 * early ends `body`'s iteration, which destroys it.
 */
export async function* sseFrames(body: AsyncIterable<Uint8Array>): AsyncGenerator<SseFrame> {
  const ready: SseFrame[] = [];
  let problem: { failure: UpstreamFailure; after: number } | undefined;
  const parser = createParser({
    // The SSE default event type; eventsource-parser leaves it undefined.
    onEvent: (message) =>
      ready.push({ kind: "event", event: message.event ?? "message", data: message.data }),
    onComment: (text) => ready.push({ kind: "comment", text }),
    onError: (error) => {
      const failure =
        error.type === "max-buffer-size-exceeded"
          ? new UpstreamFailure("broken", `upstream SSE frame exceeds ${MAX_FRAME_CHARS} characters`)
          : new UpstreamFailure("malformed", `upstream stream is not server-sent events: ${error.message}`);
      // The frames before the fault are still the provider's; none after it are.
      problem ??= { failure, after: ready.length };
    },
    maxBufferSize: MAX_FRAME_CHARS,
  });
  // Stream mode keeps a multi-byte character split across chunks whole.
  const decoder = new TextDecoder("utf-8");
  for await (const chunk of body) {
    parser.feed(decoder.decode(chunk, { stream: true }));
    yield* drain(ready, problem);
  }
  const rest = decoder.decode();
  if (rest !== "") parser.feed(rest);
  yield* drain(ready, problem);
}

/**
 * The frames parsed so far, taken out of `ready`; with a `problem`, those before it, then its
 * failure. Module-level, as every generator function here (docs/performance.md §28).
 */
function* drain(
  ready: SseFrame[],
  problem: { failure: UpstreamFailure; after: number } | undefined,
): Generator<SseFrame> {
  if (problem !== undefined) {
    yield* ready.splice(0, problem.after);
    throw problem.failure;
  }
  while (ready.length > 0) yield ready.shift()!;
}

/**
 * Serialises a frame back to wire bytes: "event: X\ndata: …\n\n" (multi-line data → one data:
 * line per line), or ": text\n\n" for a comment.
 */
export function encodeSseFrame(frame: SseFrame): string {
  if (frame.kind === "comment") return `: ${frame.text}\n\n`;
  const data = frame.data
    .split("\n")
    .map((line) => `data: ${line}\n`)
    .join("");
  return `event: ${frame.event}\n${data}\n`;
}
