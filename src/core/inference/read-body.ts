import { UpstreamFailure } from "../ports/providers.js";

/**
 * Reads a whole provider response body as UTF-8 text, failing (UpstreamFailure "broken") past
 * limitBytes. The core reads its provider answers with it, and so do the image adapters.
 */
export async function readBody(body: AsyncIterable<Uint8Array>, limitBytes: number): Promise<string> {
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    // Throwing out of the loop ends the iteration, which destroys the body.
    for await (const chunk of body) {
      total += chunk.byteLength;
      if (total > limitBytes) {
        throw new UpstreamFailure("broken", `upstream response body exceeds ${limitBytes} bytes`);
      }
      chunks.push(chunk);
    }
  } catch (error) {
    if (error instanceof UpstreamFailure) throw error;
    throw new UpstreamFailure("broken", `upstream response body unreadable: ${String(error)}`, {
      cause: error,
    });
  }
  return Buffer.concat(chunks, total).toString("utf8");
}
