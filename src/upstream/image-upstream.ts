/**
 * What the image provider adapters (gemini/, openai/) share beyond the pooled HTTP client. The
 * port they implement, `ImageUpstream`, is the core's (src/core/ports/providers.ts).
 */
import { readBody } from "../core/inference/read-body.js";
import type { ImageUpstreamOutcome, UpstreamResponse } from "../core/ports/providers.js";

/** A non-200 answer as an outcome: its body read (up to 1 MiB) and its `retry-after`. */
export async function httpErrorOutcome(response: UpstreamResponse): Promise<ImageUpstreamOutcome> {
  const body = await readBody(response.body, 1024 * 1024).catch(() => "");
  const retryAfter = response.headers["retry-after"];
  return {
    kind: "http-error",
    status: response.status,
    body,
    retryAfter: Array.isArray(retryAfter) ? retryAfter[0] : retryAfter,
  };
}
