/**
 * The image router (docs/providers.md, "Images"): the same endpoint lists, breakers and one
 * deadline per call as the text router, for the image routes. A call goes on to the next
 * endpoint when the current one fails before an image was returned — no connection, no answer
 * in time, 429, 529, 500–504 (and 401/403: the gateway's own credentials there) — never on a
 * refusal, an empty answer, or the caller's 4xx.
 */
import {
  type ImageUpstream,
  type ImageUpstreamOutcome,
  type ImageUpstreamRequest,
  UpstreamFailure,
} from "../../core/ports/providers.js";
import { type BreakerSettings, Breakers, type CircuitBreaker } from "./breaker.js";
import { failsOver, retryAfterMs } from "./failover-rules.js";
import { type RouteEntry, routeOrder } from "./route-order.js";
import { type BreakerView, NO_ROUTER_EVENTS, type RouterEvents } from "./router-events.js";

/** An image endpoint: an image client with its configured name and its own model ids. */
export interface ImageEndpoint extends ImageUpstream {
  readonly name: string;
  /** Gateway image model → the endpoint's own model id. */
  readonly models: ReadonlyMap<string, string>;
}

/** What an image router is built from. */
export interface ImageRouterOptions {
  readonly endpoints: readonly ImageEndpoint[];
  /** Gateway image model → its endpoints, by name. */
  readonly routes: ReadonlyMap<string, readonly RouteEntry[]>;
  /** The call's one deadline (ms) for an image, across every attempt. */
  readonly deadlineMs: number;
  readonly breaker: BreakerSettings;
  readonly maxRetryAfterMs: number;
  readonly events?: RouterEvents;
  readonly now?: () => number;
  readonly random?: () => number;
}

/** Routes image calls over several endpoints, failing over before an image is returned. */
export class ImageRouter {
  readonly #endpoints: ReadonlyMap<string, ImageEndpoint>;
  readonly #breakers: Breakers;
  readonly #options: ImageRouterOptions;
  readonly #events: RouterEvents;
  readonly #now: () => number;

  constructor(options: ImageRouterOptions) {
    this.#options = options;
    this.#endpoints = new Map(options.endpoints.map((endpoint) => [endpoint.name, endpoint]));
    this.#events = options.events ?? NO_ROUTER_EVENTS;
    this.#now = options.now ?? Date.now;
    this.#breakers = new Breakers(options.breaker, this.#now);
  }

  /**
   * The image provider port for one wire format's slot: the models the routes name go through
   * the endpoints, any other to `fallback` (the single provider of the variables), if any.
   */
  upstream(fallback: ImageUpstream | undefined): ImageUpstream {
    return {
      generate: (request) => this.generate(request, fallback),
      close: async () => {},
    };
  }

  /** Sends an image call to its model's endpoints in turn. */
  async generate(request: ImageUpstreamRequest, fallback?: ImageUpstream): Promise<ImageUpstreamOutcome> {
    const model = request.model ?? "";
    const entries = this.#options.routes.get(model);
    if (entries === undefined) {
      if (fallback !== undefined) return fallback.generate(request);
      return httpError(404, `model: ${model} is not routed to any image endpoint`);
    }
    const ordered = routeOrder(entries, this.#options.random ?? Math.random);
    const deadline = this.#now() + this.#options.deadlineMs;
    let last: ImageUpstreamOutcome | UpstreamFailure | undefined;
    for (const [i, entry] of ordered.entries()) {
      const endpoint = this.#endpoints.get(entry.endpoint)!;
      const breaker = this.#breakers.of(endpoint.name, model);
      const grant = breaker.acquire();
      if (grant === undefined) continue;
      const outcome = await this.#attempt(endpoint, model, request, breaker, deadline);
      if (outcome === "cancelled") {
        breaker.released(grant);
        throw new UpstreamFailure("aborted", "the caller cancelled the call");
      }
      if (outcome.kind === "kept") return outcome.outcome;
      last = outcome.last;
      const more = ordered.slice(i + 1).some((next) => this.#breakers.of(next.endpoint, model).available);
      if (!more || this.#now() >= deadline) break;
      this.#events.failedOver(endpoint.name, model);
    }
    if (last === undefined)
      return httpError(529, `every image endpoint for ${model} is resting after failures`);
    if (last instanceof UpstreamFailure) throw last;
    return last;
  }

  /** Every endpoint-and-model breaker so far. */
  breakers(): BreakerView[] {
    return this.#breakers.views();
  }

  /** Stops every endpoint. */
  async close(): Promise<void> {
    await Promise.all([...this.#endpoints.values()].map((endpoint) => endpoint.close()));
  }

  async #attempt(
    endpoint: ImageEndpoint,
    model: string,
    request: ImageUpstreamRequest,
    breaker: CircuitBreaker,
    deadline: number,
  ): Promise<
    | { kind: "kept"; outcome: ImageUpstreamOutcome }
    | { kind: "failed"; last: ImageUpstreamOutcome | UpstreamFailure }
    | "cancelled"
  > {
    const name = endpoint.name;
    this.#events.attempted(name, model);
    const timeout = AbortSignal.timeout(Math.max(1, deadline - this.#now()));
    const signal = request.signal === undefined ? timeout : AbortSignal.any([request.signal, timeout]);
    const upstreamModel = endpoint.models.get(model) ?? request.upstreamModel;
    const failed = (last: ImageUpstreamOutcome | UpstreamFailure, reason: string) => {
      breaker.failed();
      this.#events.failed(name, model, reason);
      return { kind: "failed", last } as const;
    };
    let outcome: ImageUpstreamOutcome;
    try {
      outcome = await endpoint.generate({ ...request, upstreamModel, signal });
    } catch (error) {
      if (request.signal?.aborted === true) return "cancelled";
      const failure = timeout.aborted
        ? new UpstreamFailure("timeout", `no image from ${name} within the call's failover deadline`, {
            cause: error,
          })
        : error instanceof UpstreamFailure
          ? error
          : new UpstreamFailure("unreachable", "the image endpoint failed", { cause: error });
      return failed(failure, failure.kind);
    }
    if (outcome.kind === "http-error") {
      const pause = retryAfterMs(outcome.retryAfter ?? "", this.#now(), this.#options.maxRetryAfterMs);
      if (pause !== undefined) breaker.coolUntil(this.#now() + pause);
      if (failsOver(outcome.status)) return failed(outcome, `${outcome.status}`);
    }
    breaker.succeeded();
    return { kind: "kept", outcome: outcome.kind === "images" ? { ...outcome, endpoint: name } : outcome };
  }
}

/** An answer the router gives itself, as a provider's non-200 would read. */
function httpError(status: number, message: string): ImageUpstreamOutcome {
  return {
    kind: "http-error",
    status,
    body: JSON.stringify({ error: { message } }),
    retryAfter: undefined,
  };
}
