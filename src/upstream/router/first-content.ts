/**
 * Holding a streamed answer back until its first content: the frames before the first
 * `content_block_start` — `message_start`, `ping`, comments — are read and kept, so that an
 * `error` event among them can still send the call to the next endpoint; once content starts,
 * the kept frames are replayed ahead of the rest. What is kept is bounded: past
 * {@link MAX_KEPT_CHARS} the answer is handed over as it is (a provider that sends that much
 * before any content is not one to fail over from).
 * docs/providers.md, "Failover before the first byte, never after".
 */
import type { SseFrame } from "../../core/ports/providers.js";

/** How a streamed answer began. */
export type StreamStart =
  /** Content started (or the kept frames reached the bound): hand it over. */
  | { readonly kind: "content"; readonly frames: AsyncGenerator<SseFrame> }
  /** An `error` event before content; `frames` replays what came, the error last. */
  | { readonly kind: "error"; readonly data: string; readonly frames: AsyncGenerator<SseFrame> }
  /** The stream ended before any content; `frames` replays what came. */
  | { readonly kind: "ended"; readonly frames: AsyncGenerator<SseFrame> };

/** Bound on the frames kept before content (their data, in characters). */
export const MAX_KEPT_CHARS = 64 * 1024;

/**
 * Reads `frames` up to the first content (any event but `message_start` and `ping`), keeping
 * what came before. Throws what `frames` throws before that (the caller fails over).
 */
export async function firstContent(
  frames: AsyncGenerator<SseFrame>,
  maxChars = MAX_KEPT_CHARS,
): Promise<StreamStart> {
  const kept: SseFrame[] = [];
  let chars = 0;
  for (;;) {
    const next = await frames.next();
    if (next.done === true) return { kind: "ended", frames: replay(kept, undefined) };
    const frame = next.value;
    kept.push(frame);
    chars += frame.kind === "event" ? frame.data.length : frame.text.length;
    if (frame.kind === "event" && frame.event === "error")
      return { kind: "error", data: frame.data, frames: replay(kept, frames) };
    const before = frame.kind === "comment" || frame.event === "message_start" || frame.event === "ping";
    if (!before || chars > maxChars) return { kind: "content", frames: replay(kept, frames) };
  }
}

/** The kept frames, then the rest of `frames` (stopping early stops `frames`). */
async function* replay(
  kept: SseFrame[],
  rest: AsyncGenerator<SseFrame> | undefined,
): AsyncGenerator<SseFrame> {
  try {
    yield* kept.splice(0);
    if (rest !== undefined) yield* rest;
  } finally {
    await rest?.return(undefined);
  }
}
