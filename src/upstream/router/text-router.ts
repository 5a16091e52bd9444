/**
 * The text router (docs/providers.md): the core's `TextUpstream` over ordered lists of
 * endpoints, one list per gateway model. A call goes to the first endpoint of its model's route
 * that can take it (its capabilities, its breaker, its cooldown); when that endpoint fails
 * before any content reached the client — no connection, no headers in time, 429, 529, 500–504,
 * or an `error` event before the first content block — the call goes on to the next, within ONE
 * deadline for the whole call. Once content has gone out the answer is the endpoint's, whatever
 * it does next. The caller's own faults (400, 413, …) go back to it unretried.
 */
import {
  type SseFrame,
  type TextUpstream,
  type UpstreamCall,
  UpstreamFailure,
  type UpstreamResponse,
} from "../../core/ports/providers.js";
import type { TextEndpoint } from "../endpoint.js";
import { encodeSseFrame, sseFrames } from "../sse.js";
import { type BreakerGrant, type BreakerSettings, Breakers, type CircuitBreaker } from "./breaker.js";
import { failsOver, retryAfterMs, streamErrorFailsOver } from "./failover-rules.js";
import { firstContent } from "./first-content.js";
import { type RouteEntry, routeOrder } from "./route-order.js";
import { type BreakerView, NO_ROUTER_EVENTS, type RouterEvents } from "./router-events.js";
import { errorAnswer } from "./synthetic-answer.js";

/** The route key of every gateway model the routes do not name. */
export const ANY_MODEL = "*";

/** What a text router is built from. */
export interface TextRouterOptions {
  readonly endpoints: readonly TextEndpoint[];
  /** Gateway model id (or {@link ANY_MODEL}) → its endpoints, by name. */
  readonly routes: ReadonlyMap<string, readonly RouteEntry[]>;
  /**
   * The call's one deadline (ms) to reach an answer it keeps — headers, and for a stream its
   * first content — across every attempt: never a timeout per attempt.
   */
  readonly deadlineMs: number;
  readonly breaker: BreakerSettings;
  /** The longest `retry-after` honoured as an endpoint's cooldown. */
  readonly maxRetryAfterMs: number;
  readonly events?: RouterEvents;
  readonly now?: () => number;
  readonly random?: () => number;
}

/** Why an attempt was abandoned by the router's own deadline. */
const DEADLINE_PASSED = Object.freeze(new Error("the call's failover deadline passed"));

/** A streamed answer held back until its first content, replayed: its frames are parsed already. */
class ReplayBody implements AsyncIterable<Uint8Array> {
  constructor(
    readonly frames: AsyncGenerator<SseFrame>,
    private readonly inner: UpstreamResponse["body"],
  ) {}

  async *[Symbol.asyncIterator](): AsyncGenerator<Uint8Array> {
    for await (const frame of this.frames) yield Buffer.from(encodeSseFrame(frame));
  }

  destroy(error?: Error): void {
    this.inner.destroy(error);
    void this.frames.return(undefined);
  }
}

/** One attempt's outcome: keep the answer, or go on (with what to give the caller if nothing is left). */
type Attempt =
  | { readonly kind: "answer"; readonly response: UpstreamResponse }
  | {
      readonly kind: "failed";
      readonly last: (() => UpstreamResponse) | UpstreamFailure;
      readonly reason: string;
    };

/** Routes text calls over several endpoints, failing over before the first byte. */
export class TextRouter implements TextUpstream {
  readonly #endpoints: ReadonlyMap<string, TextEndpoint>;
  readonly #routes: ReadonlyMap<string, readonly RouteEntry[]>;
  readonly #breakers: Breakers;
  /** Which endpoint produced a body handed out as it came (its frames are that endpoint's). */
  readonly #origins = new WeakMap<object, TextEndpoint>();
  readonly #options: TextRouterOptions;
  readonly #events: RouterEvents;
  readonly #now: () => number;
  readonly #random: () => number;

  constructor(options: TextRouterOptions) {
    this.#options = options;
    this.#endpoints = new Map(options.endpoints.map((endpoint) => [endpoint.name, endpoint]));
    this.#routes = options.routes;
    this.#events = options.events ?? NO_ROUTER_EVENTS;
    this.#now = options.now ?? Date.now;
    this.#breakers = new Breakers(options.breaker, this.#now);
    this.#random = options.random ?? Math.random;
    for (const [model, entries] of options.routes) {
      for (const entry of entries) {
        if (!this.#endpoints.has(entry.endpoint))
          throw new TypeError(`route ${model}: no endpoint named ${entry.endpoint}`);
      }
    }
  }

  /** Sends the call to its model's endpoints in turn; resolves with the answer it keeps. */
  async send(call: UpstreamCall): Promise<UpstreamResponse> {
    const model = call.model?.id ?? ANY_MODEL;
    const entries = this.#routes.get(model) ?? this.#routes.get(ANY_MODEL);
    if (entries === undefined || entries.length === 0)
      return errorAnswer(404, "not_found_error", `model: ${model} is not routed to any provider endpoint`);
    const capable = this.#capable(call, model, entries);
    if (!Array.isArray(capable)) return capable;
    const startedAt = this.#now();
    const deadline = startedAt + this.#options.deadlineMs;
    let last: Attempt | undefined;
    for (let i = 0; i < capable.length; i++) {
      const endpoint = capable[i]!;
      const breaker = this.#breakers.of(endpoint.name, model);
      const grant = breaker.acquire();
      if (grant === undefined) continue;
      if (last !== undefined && last.kind === "failed") discard(last);
      const attempt = await this.#attempt(endpoint, model, call, breaker, grant, deadline);
      if (attempt.kind === "answer") return attempt.response;
      last = attempt;
      const more = capable.slice(i + 1).some((next) => this.#breakers.of(next.name, model).available);
      if (call.signal?.aborted === true || !more || this.#now() >= deadline) break;
      this.#events.failedOver(endpoint.name, model);
    }
    if (last === undefined) return this.#allResting(model, capable);
    if (last.kind === "answer") return last.response;
    if (last.last instanceof UpstreamFailure) throw last.last;
    return last.last();
  }

  /** A streamed answer's frames (those of the endpoint that gave it). */
  frames(body: UpstreamResponse["body"]): AsyncGenerator<SseFrame> {
    if (body instanceof ReplayBody) return body.frames;
    const origin = this.#origins.get(body);
    return origin === undefined ? sseFrames(body) : origin.frames(body);
  }

  /** Every endpoint-and-model breaker so far, for health and metrics. */
  breakers(): BreakerView[] {
    return this.#breakers.views();
  }

  /** Stops every endpoint; resolves once their calls in flight have finished. */
  async close(): Promise<void> {
    await Promise.all([...this.#endpoints.values()].map((endpoint) => endpoint.close()));
  }

  /**
   * The route's endpoints that can take this call, in this call's order; a 400 naming why when
   * none can (count_tokens, or a server tool, that no endpoint of the model supports).
   */
  #capable(
    call: UpstreamCall,
    model: string,
    entries: readonly RouteEntry[],
  ): TextEndpoint[] | UpstreamResponse {
    const ordered = routeOrder(entries, this.#random).map((entry) => this.#endpoints.get(entry.endpoint)!);
    const counting = call.path === "/v1/messages/count_tokens";
    const tools = call.serverTools ?? [];
    const capable = ordered.filter(
      (endpoint) =>
        (!counting || endpoint.capabilities.countTokens) &&
        tools.every((tool) => endpoint.capabilities.serverTools.some((prefix) => tool.startsWith(prefix))),
    );
    if (capable.length > 0) return capable;
    const names = ordered.map((endpoint) => `${endpoint.name} (${endpoint.kind})`).join(", ");
    const why = counting
      ? "count_tokens is"
      : `the server tool${tools.length > 1 ? "s" : ""} ${tools.join(", ")} ${tools.length > 1 ? "are" : "is"}`;
    const missing = counting && tools.length > 0 ? ` (with ${tools.join(", ")})` : "";
    return errorAnswer(
      400,
      "invalid_request_error",
      `${why}${missing} not available for ${model}: none of its provider endpoints supports it: ${names}`,
    );
  }

  /** Every capable endpoint is cooling down or has its breaker open: 529 until the first is back. */
  #allResting(model: string, capable: readonly TextEndpoint[]): UpstreamResponse {
    const at = Math.min(...capable.map((endpoint) => this.#breakers.of(endpoint.name, model).availableAt));
    const seconds = Number.isFinite(at) ? Math.max(1, Math.ceil((at - this.#now()) / 1000)) : 1;
    return errorAnswer(
      529,
      "overloaded_error",
      `every provider endpoint for ${model} is resting after failures; retry in ${seconds} s`,
      { "retry-after": `${seconds}` },
    );
  }

  /** One attempt at `endpoint`, bounded by the call's deadline until it has an answer to keep. */
  async #attempt(
    endpoint: TextEndpoint,
    model: string,
    call: UpstreamCall,
    breaker: CircuitBreaker,
    grant: BreakerGrant,
    deadline: number,
  ): Promise<Attempt> {
    const name = endpoint.name;
    this.#events.attempted(name, model);
    // The attempt's own abort: the caller's, or the deadline's until the answer is kept.
    const abort = new AbortController();
    const caller = call.signal;
    const onCaller = () => abort.abort(caller?.reason);
    caller?.addEventListener("abort", onCaller, { once: true });
    if (caller?.aborted === true) onCaller();
    let timedOut = false;
    const timer = setTimeout(
      () => {
        timedOut = true;
        abort.abort(DEADLINE_PASSED);
      },
      Math.max(0, deadline - this.#now()),
    );
    let kept = false;
    const keep = (response: UpstreamResponse): Attempt => {
      breaker.succeeded();
      kept = true;
      return { kind: "answer", response };
    };
    const fail = (last: Attempt & { kind: "failed" }): Attempt => {
      breaker.failed();
      this.#events.failed(name, model, last.reason);
      return last;
    };
    // The endpoint threw: the caller's leaving goes back to it, anything else fails the attempt.
    const thrown = (error: unknown): Attempt => {
      if (caller?.aborted === true) {
        breaker.released(grant);
        throw error;
      }
      const failure = timedOut ? deadlineFailure(name, error) : asFailure(error);
      return fail({ kind: "failed", last: failure, reason: failure.kind });
    };
    try {
      let response: UpstreamResponse;
      try {
        response = await endpoint.send({ ...call, signal: abort.signal });
      } catch (error) {
        return thrown(error);
      }
      const tagged = { ...response, endpoint: name };
      if (response.status !== 200) {
        const retryAfter = retryAfterMs(
          headerText(response.headers["retry-after"]),
          this.#now(),
          this.#options.maxRetryAfterMs,
        );
        if (retryAfter !== undefined) breaker.coolUntil(this.#now() + retryAfter);
        this.#origins.set(response.body, endpoint);
        if (!failsOver(response.status)) return keep(tagged);
        return fail({ kind: "failed", last: () => tagged, reason: `${response.status}` });
      }
      if (!isEventStream(response.headers["content-type"])) {
        this.#origins.set(response.body, endpoint);
        return keep(tagged);
      }
      let start: Awaited<ReturnType<typeof firstContent>>;
      try {
        start = await firstContent(endpoint.frames(response.body));
      } catch (error) {
        return thrown(error);
      }
      const replayed = { ...tagged, body: new ReplayBody(start.frames, response.body) };
      if (start.kind === "content" || (start.kind === "error" && !streamErrorFailsOver(start.data)))
        return keep(replayed);
      return fail({
        kind: "failed",
        last: () => replayed,
        reason: start.kind === "error" ? "stream_error" : "stream_ended",
      });
    } finally {
      clearTimeout(timer);
      // A kept answer's body still follows the caller: leaving it cuts the endpoint's response.
      if (!kept) caller?.removeEventListener("abort", onCaller);
    }
  }
}

/** Most of a failed attempt's error body read to keep its connection; past it the connection is closed. */
const DISCARD_LIMIT = 64 * 1024;

/**
 * Frees a failed attempt's connection once another attempt is made: its (small) error body is
 * read to its end, or, past {@link DISCARD_LIMIT}, left — leaving the iteration destroys it.
 */
function discard(attempt: Attempt & { kind: "failed" }): void {
  if (attempt.last instanceof UpstreamFailure) return;
  const { body } = attempt.last();
  void (async () => {
    let read = 0;
    try {
      for await (const chunk of body) {
        read += chunk.byteLength;
        if (read > DISCARD_LIMIT) break;
      }
    } catch {
      // A failed attempt's body failing too changes nothing.
    }
  })();
}

function asFailure(error: unknown): UpstreamFailure {
  return error instanceof UpstreamFailure
    ? error
    : new UpstreamFailure("unreachable", "the provider endpoint failed", { cause: error });
}

function deadlineFailure(name: string, cause: unknown): UpstreamFailure {
  return new UpstreamFailure("timeout", `no answer from ${name} within the call's failover deadline`, {
    cause,
  });
}

function headerText(value: string | string[] | undefined): string {
  return (Array.isArray(value) ? value[0] : value) ?? "";
}

function isEventStream(value: string | string[] | undefined): boolean {
  return headerText(value).toLowerCase().startsWith("text/event-stream");
}
