/**
 * Which failures of an endpoint send the call on to the next one: only failures before any
 * content reached the client, and only those that are the endpoint's, never the caller's.
 * docs/providers.md, "Failover before the first byte, never after".
 */

/**
 * Statuses that fail over: throttling (429), overload (529), the provider's own faults
 * (500–504), and the gateway's own credentials refused by this endpoint (401, 403: another
 * endpoint has other credentials). Every other 4xx is the caller's request and would fail
 * the same everywhere: it goes back to the caller as it is.
 */
export function failsOver(status: number): boolean {
  return (
    status === 429 || status === 529 || (status >= 500 && status <= 504) || status === 401 || status === 403
  );
}

/** Error types of an SSE `error` event before the first content block that fail over. */
const STREAM_ERRORS_FAILING_OVER = new Set(["overloaded_error", "api_error", "rate_limit_error"]);

/** Whether an SSE `error` event's data (before any content) fails over. */
export function streamErrorFailsOver(data: string): boolean {
  try {
    const type = (JSON.parse(data) as { error?: { type?: unknown } }).error?.type;
    return typeof type === "string" && STREAM_ERRORS_FAILING_OVER.has(type);
  } catch {
    return false;
  }
}

/**
 * A `retry-after` header as milliseconds from `now` (delay-seconds or an HTTP date), at most
 * `maxMs`; undefined when absent or unreadable.
 */
export function retryAfterMs(value: string, now: number, maxMs: number): number | undefined {
  const text = value.trim();
  if (text === "") return undefined;
  let ms: number;
  if (/^\d+(\.\d+)?$/.test(text)) ms = Number(text) * 1000;
  else {
    const at = Date.parse(text);
    if (Number.isNaN(at)) return undefined;
    ms = at - now;
  }
  return ms <= 0 ? undefined : Math.min(ms, maxMs);
}
