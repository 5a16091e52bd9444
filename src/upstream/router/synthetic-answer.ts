/**
 * Answers a router gives itself, in Anthropic's error format, when no endpoint is asked: none
 * can take the call (400 naming why), the model has no route (404), or every endpoint is
 * cooling down or has its breaker open (529, with `retry-after`).
 */
import type { UpstreamResponse } from "../../core/ports/providers.js";

/** An Anthropic error answer of `status` with `type` and `message`, read like a provider's. */
export function errorAnswer(
  status: number,
  type: string,
  message: string,
  headers: Record<string, string> = {},
): UpstreamResponse {
  return {
    status,
    headers: { "content-type": "application/json", ...headers },
    body: new OnceBody(Buffer.from(JSON.stringify({ type: "error", error: { type, message } }))),
  };
}

/** A body read at most once (a class: no generator function per answer, docs/performance.md §28). */
class OnceBody {
  #done = false;

  constructor(private readonly bytes: Uint8Array) {}

  async *[Symbol.asyncIterator](): AsyncGenerator<Uint8Array> {
    if (this.#done) return;
    this.#done = true;
    yield this.bytes;
  }

  destroy(): void {
    this.#done = true;
  }
}
