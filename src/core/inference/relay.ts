import { Code } from "@connectrpc/connect";
import type { BillingCounters } from "../billing/billing-counters.js";
import type { Log } from "../ports/log.js";
import {
  type SseFrame,
  type TextUpstream,
  UpstreamFailure,
  type UpstreamResponse,
} from "../ports/providers.js";
import { withKeepAlive } from "./keep-alive.js";
import { type PassRaiser, passBoundary, pausedTurnEnding } from "./passes.js";
import { type ProviderDeps, type ProviderRequest, providerFailure } from "./provider-call.js";
import type { MessagePart } from "./text-call.js";
import type { StreamMeter } from "./usage.js";

/** What relaying a stream needs. */
export interface RelayDeps extends ProviderDeps {
  /** Where a turn paused at a pass boundary is counted. */
  readonly counters: BillingCounters;
  readonly upstream: TextUpstream;
  /** Silence from a streaming provider after which the gateway sends its own `ping`. */
  readonly streamPingMs: number;
  readonly log: Log;
}

const GATEWAY_PING = JSON.stringify({ type: "ping" });

/**
 * Relays events as they arrive, recording each one the consumer took in `meter`. Each event is
 * checked to be the format's before it goes out ({@link StreamShape}); `message_stop` or `error`
 * ends the relay (whatever follows is read and dropped). A stream that turns to garbage, breaks,
 * stalls past the idle timeout, runs past the response timeout or ends before `message_stop`
 * ends with the gateway's own `error` event instead. With `raise` (a call held pass by pass),
 * each boundary between sampling passes ({@link passBoundary}) is held for before it is relayed;
 * a raise declined ends the turn there, paused ({@link pausedTurnEnding}).
 */
export async function* relayStream(
  deps: RelayDeps,
  response: UpstreamResponse,
  provider: ProviderRequest,
  meter: StreamMeter,
  signal: AbortSignal,
  requestId: string,
  raise?: PassRaiser,
): AsyncGenerator<MessagePart> {
  const frames = withKeepAlive<SseFrame, "ping">(
    deps.upstream.frames(response.body),
    deps.streamPingMs,
    "ping",
  );
  const shape = new StreamShape();
  // Read to its end, the provider's connection is free; a relay that stops before (the end
  // read, a failure, the caller gone) frees it before the call settles.
  let drained = false;
  try {
    for await (const frame of frames) {
      if (shape.ended) {
        // Read to its end, so the connection can be reused; a provider silent past one ping
        // interval after the end is left (the abort at the call's end closes it).
        if (frame === "ping") return;
        continue;
      }
      if (frame === "ping") {
        yield { kind: "event", event: "ping", data: GATEWAY_PING };
      } else if (frame.kind === "comment") {
        yield { kind: "comment", text: frame.text };
      } else {
        const boundary = raise === undefined ? undefined : passBoundary(frame.event, frame.data);
        if (boundary !== undefined && !(await raise!(boundary))) {
          // Paused: nothing of the next pass goes out, and the provider is read no further.
          meter.paused = true;
          deps.counters.add("paused_turn");
          deps.log.info({ requestId, boundary }, "a raise of the hold was declined: the turn ends paused");
          for (const end of pausedTurnEnding(meter.outputEstimate())) yield { kind: "event", ...end };
          return;
        }
        shape.check(frame.event, frame.data);
        yield { kind: "event", event: frame.event, data: frame.data };
        // Reached only once the consumer asked for more: this event was delivered.
        meter.delivered(frame.event, frame.data);
      }
    }
    drained = true;
    if (!shape.ended) throw new UpstreamFailure("broken", "upstream stream ended before message_stop");
  } catch (error) {
    // After message_stop the client has its whole answer: what the provider does next is its own.
    if (signal.aborted || shape.ended) return;
    const failure = providerFailure(deps, error, signal, requestId);
    deps.log.error({ err: error, requestId }, "provider stream broke off");
    const data = JSON.stringify({
      type: "error",
      error: {
        type: failure.code === Code.DeadlineExceeded ? "timeout_error" : "api_error",
        message: failure.rawMessage.replace("nothing was charged", "only what was delivered is charged"),
      },
    });
    yield { kind: "event", event: "error", data };
    meter.delivered("error", data);
  } finally {
    if (!drained) provider.end();
  }
}

/**
 * The shape of an Anthropic message stream (docs/protocols.md, "The message stream"), followed
 * event by event before an event is relayed: a provider that turns to garbage is cut off with the
 * gateway's own `error` event instead of being passed on as `event: message` frames the client's
 * SDK cannot read. Every event must name itself (`event: X`, never the SSE default
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
