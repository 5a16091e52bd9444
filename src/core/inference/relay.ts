import { Code } from "@connectrpc/connect";
import type { Log } from "../ports/log.js";
import {
  type SseFrame,
  type TextUpstream,
  UpstreamFailure,
  type UpstreamResponse,
} from "../ports/providers.js";
import { withKeepAlive } from "./keep-alive.js";
import { type ProviderDeps, providerFailure } from "./provider-call.js";
import { StreamShape } from "./stream-shape.js";
import type { MessagePart } from "./text-call.js";
import type { StreamMeter } from "./usage.js";

/** What relaying a stream needs. */
export interface RelayDeps extends ProviderDeps {
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
 * ends with the gateway's own `error` event instead.
 */
export async function* relayStream(
  deps: RelayDeps,
  response: UpstreamResponse,
  meter: StreamMeter,
  signal: AbortSignal,
  requestId: string,
): AsyncGenerator<MessagePart> {
  const frames = withKeepAlive<SseFrame, "ping">(
    deps.upstream.frames(response.body),
    deps.streamPingMs,
    "ping",
  );
  const shape = new StreamShape();
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
        shape.check(frame.event, frame.data);
        yield { kind: "event", event: frame.event, data: frame.data };
        // Reached only once the consumer asked for more: this event was delivered.
        meter.delivered(frame.event, frame.data);
      }
    }
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
  }
}
