/**
 * withModelNamed (src/upstream/platform-answer.ts): a platform's model id in an answer renamed to
 * the id the call sent, wherever the chunks split, and nothing else touched.
 */
import { describe, expect, it } from "vitest";
import { bodyOf, withModelNamed } from "../../src/upstream/platform-answer.js";

const ID = "us.anthropic.claude-haiku-4-5-20251001-v1:0";
const SENT = "claude-haiku-4-5-20251001";

async function text(body: AsyncIterable<Uint8Array>): Promise<string> {
  const chunks: Uint8Array[] = [];
  for await (const chunk of body) chunks.push(chunk);
  return Buffer.concat(chunks).toString("utf8");
}

/** `source` cut into chunks of `size` bytes (through multi-byte characters too). */
function chunked(source: string, size: number): Uint8Array[] {
  const bytes = Buffer.from(source, "utf8");
  const chunks: Uint8Array[] = [];
  for (let i = 0; i < bytes.length; i += size) chunks.push(bytes.subarray(i, i + size));
  return chunks;
}

describe("withModelNamed", () => {
  const stream = [
    `event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","model":"${ID}","content":[]}}\n\n`,
    // The id quoted inside text is the model's words, not a field: left alone.
    `event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"type":"text_delta","text":"é \\"model\\":\\"${ID}\\" ü"}}\n\n`,
    `event: message_delta\ndata: {"type":"message_delta","usage":{"iterations":[{"model" : "${ID}"}]}}\n\n`,
  ].join("");
  const expected = stream
    .replace(`"model":"${ID}"`, `"model":"${SENT}"`)
    .replace(`"model" : "${ID}"`, `"model" : "${SENT}"`);

  it("renames every model field naming the platform's id, however the chunks split", async () => {
    expect(expected).not.toBe(stream);
    expect(expected).toContain(`\\"model\\":\\"${ID}\\"`);
    for (const size of [1, 3, 7, 64, stream.length]) {
      expect(await text(withModelNamed(bodyOf(...chunked(stream, size)), ID, SENT))).toBe(expected);
    }
  });

  it("renames a JSON answer without a final newline, and passes lines without the id as the same bytes", async () => {
    const json = `{"id":"msg_1","type":"message","model":"${ID}","content":[{"type":"text","text":"hi"}]}`;
    expect(await text(withModelNamed(bodyOf(...chunked(json, 5)), ID, SENT))).toBe(json.replace(ID, SENT));
    const line = Buffer.from('event: ping\ndata: {"type":"ping"}\n\n');
    const out: Uint8Array[] = [];
    for await (const chunk of withModelNamed(bodyOf(line), ID, SENT)) out.push(chunk);
    expect(out).toHaveLength(1);
    expect(out[0]!.buffer).toBe(line.buffer);
  });
});
