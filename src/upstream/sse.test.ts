import { describe, expect, it } from "vitest";
import { UpstreamFailure } from "../core/ports/providers.js";
import { encodeSseFrame, type SseFrame, sseFrames } from "./sse.js";

/** A typical Anthropic stream, as the API frames it. */
const TRANSCRIPT = [
  'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":1}}}\n\n',
  'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n',
  'event: ping\ndata: {"type": "ping"}\n\n',
  'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Grüße, 世界 🌍"}}\n\n',
  'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" — done"}}\n\n',
  'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
  'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}\n\n',
  'event: message_stop\ndata: {"type":"message_stop"}\n\n',
].join("");

async function* chunked(bytes: Uint8Array, sizes: () => number): AsyncGenerator<Uint8Array> {
  for (let at = 0; at < bytes.length; ) {
    const size = Math.max(1, sizes());
    yield bytes.subarray(at, at + size);
    at += size;
  }
}

async function collect(frames: AsyncIterable<SseFrame>): Promise<SseFrame[]> {
  const out: SseFrame[] = [];
  for await (const frame of frames) out.push(frame);
  return out;
}

/** A small deterministic PRNG (mulberry32), so a failure can be replayed. */
function prng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe("sseFrames", () => {
  const bytes = new TextEncoder().encode(TRANSCRIPT);

  it("parses a transcript and re-encodes it byte for byte", async () => {
    const frames = await collect(sseFrames(chunked(bytes, () => bytes.length)));
    expect(frames).toHaveLength(8);
    expect(frames[2]).toEqual({ kind: "event", event: "ping", data: '{"type": "ping"}' });
    expect(frames.map(encodeSseFrame).join("")).toBe(TRANSCRIPT);
  });

  it("parses identically at every split point, inside multi-byte characters included", async () => {
    const whole = await collect(sseFrames(chunked(bytes, () => bytes.length)));
    const emoji = TRANSCRIPT.indexOf("🌍");
    const emojiByte = new TextEncoder().encode(TRANSCRIPT.slice(0, emoji)).length;
    // Every split inside the 4-byte emoji, and single bytes throughout.
    for (const first of [emojiByte + 1, emojiByte + 2, emojiByte + 3]) {
      let calls = 0;
      const frames = await collect(sseFrames(chunked(bytes, () => (calls++ === 0 ? first : bytes.length))));
      expect(frames).toEqual(whole);
    }
    expect(await collect(sseFrames(chunked(bytes, () => 1)))).toEqual(whole);
    for (let seed = 1; seed <= 25; seed++) {
      const random = prng(seed);
      expect(await collect(sseFrames(chunked(bytes, () => Math.floor(random() * 40))))).toEqual(whole);
    }
  });

  it("handles comments, default event names, multi-line data and CRLF", async () => {
    const wire = ": keep-alive\n\ndata: first\r\ndata: second\r\n\r\nevent: x\ndata:\n\n";
    const frames = await collect(sseFrames(chunked(new TextEncoder().encode(wire), () => 3)));
    expect(frames).toEqual([
      { kind: "comment", text: "keep-alive" },
      { kind: "event", event: "message", data: "first\nsecond" },
      { kind: "event", event: "x", data: "" },
    ]);
    expect(encodeSseFrame(frames[1]!)).toBe("event: message\ndata: first\ndata: second\n\n");
    expect(encodeSseFrame(frames[0]!)).toBe(": keep-alive\n\n");
  });

  it("yields each frame as soon as it is complete", async () => {
    let release: () => void = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    async function* body(): AsyncGenerator<Uint8Array> {
      yield new TextEncoder().encode("event: a\ndata: 1\n\nevent: b\nda");
      await gate;
      yield new TextEncoder().encode("ta: 2\n\n");
    }
    const frames = sseFrames(body());
    expect((await frames.next()).value).toEqual({ kind: "event", event: "a", data: "1" });
    release();
    expect((await frames.next()).value).toEqual({ kind: "event", event: "b", data: "2" });
    expect((await frames.next()).done).toBe(true);
  });

  it("drops a trailing frame without its blank line and passes failures through", async () => {
    const cut = await collect(
      sseFrames(chunked(new TextEncoder().encode("event: a\ndata: 1\n\nevent: b\ndata: 2"), () => 5)),
    );
    expect(cut).toEqual([{ kind: "event", event: "a", data: "1" }]);
    async function* broken(): AsyncGenerator<Uint8Array> {
      yield new TextEncoder().encode("event: a\ndata: 1\n\n");
      throw new UpstreamFailure("broken", "cut");
    }
    await expect(collect(sseFrames(broken()))).rejects.toMatchObject({ kind: "broken" });
  });

  it.each([
    ["garbage bytes", "\u0000\u00ff<html>\n"],
    ["an unknown field", "foo: bar\n"],
    ["a bad retry", "retry: soon\n"],
  ])(
    "fails as malformed at a line of %s, after the frames before it, never those after",
    async (_name, bad) => {
      const wire = `event: a\ndata: 1\n\n${bad}\nevent: b\ndata: 2\n\n`;
      const seen: SseFrame[] = [];
      let failure: unknown;
      try {
        for await (const frame of sseFrames(chunked(new TextEncoder().encode(wire), () => wire.length)))
          seen.push(frame);
      } catch (error) {
        failure = error;
      }
      expect(seen).toEqual([{ kind: "event", event: "a", data: "1" }]);
      expect(failure).toBeInstanceOf(UpstreamFailure);
      expect((failure as UpstreamFailure).kind).toBe("malformed");
    },
  );
});
