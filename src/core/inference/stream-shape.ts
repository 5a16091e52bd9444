/**
 * The shape of an Anthropic message stream (docs/protocols.md, "The message stream"), checked
 * event by event before an event is relayed: a provider that turns to garbage is cut off with the
 * gateway's own `error` event instead of being passed on as `event: message` frames the client's
 * SDK cannot read.
 */
import { UpstreamFailure } from "../ports/providers.js";

/**
 * Follows one stream's events. Every event must name itself (`event: X`, never the SSE default
 * `message`) and carry a JSON object whose `type` is that name; `message_start` comes first (only
 * `ping` and `error` may precede it) and once; after the final `message_delta` (the one with a
 * stop reason) only `message_stop` may follow. Event types the gateway does not know pass when
 * they keep these rules: the format says new ones may appear.
 */
export class StreamShape {
  private started = false;
  private closing = false;
  /** `message_stop` or `error` was checked: the stream is over, nothing after it is relayed. */
  ended = false;

  /** Checks one event; throws UpstreamFailure "malformed" naming the first rule it breaks. */
  check(event: string, data: string): void {
    const problem = this.problem(event, data);
    if (problem !== undefined) {
      throw new UpstreamFailure(
        "malformed",
        `upstream stream is not an Anthropic message stream: ${problem}`,
      );
    }
  }

  private problem(event: string, data: string): string | undefined {
    if (event === "message") return "an event without an event name";
    let parsed: unknown;
    try {
      parsed = JSON.parse(data);
    } catch {
      return `${event}: its data is not JSON`;
    }
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
      return `${event}: its data is not a JSON object`;
    const body = parsed as Record<string, unknown>;
    if (body.type !== event) return `${event}: its data's type is ${JSON.stringify(body.type) ?? "missing"}`;
    if (event === "ping") return undefined;
    if (event === "error") {
      this.ended = true;
      return undefined;
    }
    if (!this.started) {
      if (event !== "message_start") return `${event} before message_start`;
      this.started = true;
      return undefined;
    }
    if (event === "message_start") return "a second message_start";
    if (this.closing && event !== "message_stop") return `${event} after the final message_delta`;
    if (event === "message_delta") {
      const delta = body.delta as { stop_reason?: unknown } | null | undefined;
      if (typeof delta === "object" && delta !== null && delta.stop_reason != null) this.closing = true;
    }
    if (event === "message_stop") this.ended = true;
    return undefined;
  }
}
