/**
 * What renaming a platform's model id costs (docs/providers.md, "Money"): a Bedrock-style stream
 * (one message_start naming the Bedrock id, then `EVENTS` text deltas, one event per chunk) read
 * through `withModelNamed` and read as it is, `N` times each after a warm-up; the mean per event
 * in µs of each, and the difference. Every event of a Bedrock or Vertex call pays it once.
 *
 * Usage: node dist/bench/model-rename.js [N]
 */
import { bodyOf, withModelNamed } from "../src/upstream/platform-answer.js";

const N = Number(process.argv[2] ?? 2_000);
const EVENTS = 200;
const ID = "us.anthropic.claude-haiku-4-5-20251001-v1:0";
const start = `event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"${ID}","content":[],"stop_reason":null,"usage":{"input_tokens":40,"output_tokens":1}}}\n\n`;
const delta = `event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" word"}}\n\n`;
const events = [start, ...Array<string>(EVENTS).fill(delta)];

async function read(rename: boolean): Promise<number> {
  const body = bodyOf(...events);
  let bytes = 0;
  for await (const chunk of rename ? withModelNamed(body, ID, "claude-haiku-4-5-20251001") : body) {
    bytes += chunk.byteLength;
  }
  return bytes;
}

/** Mean µs per event over N reads, after N/10 to warm up. */
async function perEvent(rename: boolean): Promise<number> {
  for (let i = 0; i < N / 10; i++) await read(rename);
  const started = process.hrtime.bigint();
  for (let i = 0; i < N; i++) await read(rename);
  return Number(process.hrtime.bigint() - started) / 1_000 / N / events.length;
}

const plain = await perEvent(false);
const renamed = await perEvent(true);
console.log(
  `per event: read as it is ${plain.toFixed(2)} µs, renamed ${renamed.toFixed(2)} µs, added ${(renamed - plain).toFixed(2)} µs`,
);
