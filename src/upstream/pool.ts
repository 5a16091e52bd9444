/**
 * A pooled HTTP client for one upstream provider, whatever its wire format. Every way a call
 * can fail without an HTTP answer — before the headers or while reading the body — surfaces as
 * one {@link UpstreamFailure} (the core's provider failure, src/core/ports/providers.ts), so
 * callers never handle undici's errors. The per-format clients (anthropic/, gemini/, openai/)
 * build their requests on it.
 */
import type { Readable } from "node:stream";
import { type Dispatcher, Pool } from "undici";
import { UpstreamFailure, type UpstreamResponse } from "../core/ports/providers.js";

/** How to reach an upstream, and how long to wait for it. */
export interface UpstreamPoolOptions {
  /** Origin, optionally with a path prefix: e.g. `https://api.anthropic.com`. */
  readonly baseUrl: string;
  readonly connectTimeoutMs: number;
  /** Time to the response headers; non-streaming responses can take minutes. */
  readonly headersTimeoutMs: number;
  /** The longest silence between two body chunks. */
  readonly idleTimeoutMs: number;
  /**
   * The longest a response may take from the request to its last byte, however busy the
   * provider keeps it (a stream that never ends, a body trickled a byte at a time); unset: no
   * bound beyond the other two.
   */
  readonly responseTimeoutMs?: number;
  /** Most connections at once; null for no limit (default 128). */
  readonly connections?: number | null;
}

/** One POST to the upstream: path (after the base URL's prefix), headers and body. */
export interface UpstreamPost {
  readonly path: string;
  /** Built by the format's client from scratch, so nothing of the caller's request leaks. */
  readonly headers: Record<string, string>;
  readonly body: string | Uint8Array;
  readonly signal?: AbortSignal | undefined;
}

const TIMEOUT_CODES = new Set([
  "UND_ERR_CONNECT_TIMEOUT",
  "UND_ERR_HEADERS_TIMEOUT",
  "UND_ERR_BODY_TIMEOUT",
  "ETIMEDOUT",
  "TOLLGATE_HEADERS_TIMEOUT",
  "TOLLGATE_IDLE_TIMEOUT",
  "TOLLGATE_RESPONSE_TIMEOUT",
]);

/** Keep-alive of idle pooled sockets: below the 5 s that common servers use, so we close first. */
const KEEP_ALIVE_MS = 4_000;

/** A keep-alive pool of connections to one upstream. */
export class UpstreamPool {
  readonly #pool: Pool;
  readonly #prefix: string;
  readonly #origin: string;
  readonly #headersTimeoutMs: number;
  readonly #idleTimeoutMs: number;
  readonly #responseTimeoutMs: number;

  constructor(options: UpstreamPoolOptions) {
    const url = new URL(options.baseUrl);
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new TypeError(`upstream base URL must be http:// or https://, got ${url.protocol}`);
    }
    this.#origin = url.origin;
    this.#prefix = url.pathname.replace(/\/+$/, "");
    this.#headersTimeoutMs = options.headersTimeoutMs;
    this.#idleTimeoutMs = options.idleTimeoutMs;
    this.#responseTimeoutMs = options.responseTimeoutMs ?? Number.POSITIVE_INFINITY;
    this.#pool = new Pool(url.origin, {
      connections: options.connections === undefined ? 128 : options.connections,
      connect: { timeout: options.connectTimeoutMs },
      headersTimeout: options.headersTimeoutMs,
      bodyTimeout: options.idleTimeoutMs,
      keepAliveTimeout: KEEP_ALIVE_MS,
      keepAliveMaxTimeout: KEEP_ALIVE_MS,
    });
  }

  /** Sends one POST; resolves at the response headers. Throws UpstreamFailure for no answer. */
  async post(call: UpstreamPost): Promise<UpstreamResponse> {
    // Our own deadline to the headers: undici's timers tick at about a second, too coarse for
    // short limits; its own headersTimeout stays on as a backstop. The whole response has its
    // own deadline too, from now.
    const ends = new Deadlines(Date.now(), this.#responseTimeoutMs);
    const deadline = new AbortController();
    const first = ends.next("TOLLGATE_HEADERS_TIMEOUT", this.#headersTimeoutMs);
    const timer = setTimeout(() => deadline.abort(first.error()), first.inMs);
    // Stays attached for the body: the caller's abort also cuts a response mid-stream.
    const unfollow = follow(call.signal, deadline);
    let response: Dispatcher.ResponseData;
    try {
      response = await this.#pool.request({
        method: "POST",
        path: this.#prefix + call.path,
        headers: call.headers,
        body: call.body,
        signal: deadline.signal,
      });
    } catch (error) {
      unfollow();
      throw failure(error, "request", this.#origin, call.signal);
    } finally {
      clearTimeout(timer);
    }
    return {
      status: response.statusCode,
      headers: response.headers,
      body: new UpstreamBody(response.body, this.#origin, call.signal, this.#idleTimeoutMs, ends, unfollow),
    };
  }

  /** Stops accepting calls and resolves once the calls in flight have finished. */
  close(): Promise<void> {
    return this.#pool.close();
  }

  /** Aborts the calls in flight and closes every connection at once. */
  destroy(): Promise<void> {
    return this.#pool.destroy();
  }
}

/** Wraps undici's body so consumers only ever see {@link UpstreamFailure}. */
class UpstreamBody implements AsyncIterable<Uint8Array> {
  #destroyed = false;

  constructor(
    private readonly readable: Readable,
    private readonly origin: string,
    private readonly signal: AbortSignal | undefined,
    private readonly idleTimeoutMs: number,
    private readonly ends: Deadlines,
    private readonly unfollow: () => void,
  ) {}

  async *[Symbol.asyncIterator](): AsyncGenerator<Uint8Array> {
    const chunks = this.readable[Symbol.asyncIterator]() as AsyncIterator<Uint8Array>;
    try {
      for (;;) {
        // Timed only while waiting for the upstream, not while the consumer holds a chunk: the
        // idle limit is about the upstream's silence. Precise, unlike undici's ~1 s ticks.
        const wait = this.ends.next("TOLLGATE_IDLE_TIMEOUT", this.idleTimeoutMs);
        const timer = setTimeout(() => this.readable.destroy(wait.error()), wait.inMs);
        let next: IteratorResult<Uint8Array>;
        try {
          next = await chunks.next();
        } finally {
          clearTimeout(timer);
        }
        if (next.done === true) return;
        yield next.value;
      }
    } catch (error) {
      if (this.#destroyed && !(this.signal?.aborted ?? false)) {
        throw new UpstreamFailure("aborted", `upstream ${this.origin}: response body destroyed`, {
          cause: error,
        });
      }
      throw failure(error, "body", this.origin, this.signal);
    } finally {
      this.unfollow();
      // Leaving early (break, throw, return) destroys the stream and frees its connection.
      await chunks.return?.();
    }
  }

  destroy(error?: Error): void {
    this.#destroyed = true;
    this.unfollow();
    this.readable.destroy(error);
  }
}

/**
 * Aborts `controller` with `source`'s reason when `source` aborts, until the returned function
 * is called (at most once matters; later calls do nothing). Not `AbortSignal.any`: Node 20 keeps
 * each signal it composes in WeakRefs and FinalizationRegistry cells, which V8's scavenger treats
 * as strong, so every call's signals (and what their listeners hold) outlived the call until a
 * full collection (docs/performance.md §28).
 */
function follow(source: AbortSignal | undefined, controller: AbortController): () => void {
  if (source === undefined) return NOTHING;
  if (source.aborted) {
    controller.abort(source.reason);
    return NOTHING;
  }
  const abort = () => controller.abort(source.reason);
  source.addEventListener("abort", abort, { once: true });
  return () => source.removeEventListener("abort", abort);
}

const NOTHING = () => {};

type DeadlineCode = "TOLLGATE_HEADERS_TIMEOUT" | "TOLLGATE_IDLE_TIMEOUT" | "TOLLGATE_RESPONSE_TIMEOUT";

const DEADLINE_TEXT: Readonly<Record<DeadlineCode, string>> = {
  TOLLGATE_HEADERS_TIMEOUT: "no response headers",
  TOLLGATE_IDLE_TIMEOUT: "no response data",
  TOLLGATE_RESPONSE_TIMEOUT: "the response not finished",
};

/** A deadline of ours ran out; `code` says which. */
class Deadline extends Error {
  constructor(
    readonly code: DeadlineCode,
    limitMs: number,
  ) {
    super(`${DEADLINE_TEXT[code]} within ${limitMs} ms`);
    this.name = "Deadline";
  }
}

/** One response's deadlines: each wait is bounded by its own limit and by the response's. */
class Deadlines {
  constructor(
    private readonly startedAt: number,
    private readonly responseMs: number,
  ) {}

  /** How long the next wait may last, and the error for when it runs out (built only then). */
  next(code: DeadlineCode, limitMs: number): { inMs: number; error: () => Deadline } {
    const left = Math.max(0, this.startedAt + this.responseMs - Date.now());
    if (left < limitMs)
      return { inMs: left, error: () => new Deadline("TOLLGATE_RESPONSE_TIMEOUT", this.responseMs) };
    return { inMs: limitMs, error: () => new Deadline(code, limitMs) };
  }
}

/** Maps an undici or socket error to the failure it means for the caller. */
function failure(
  error: unknown,
  phase: "request" | "body",
  origin: string,
  signal: AbortSignal | undefined,
): UpstreamFailure {
  if (error instanceof UpstreamFailure) return error;
  const code = errorCode(error);
  const detail = error instanceof Error ? error.message : String(error);
  const where = phase === "request" ? "before the response headers" : "while reading the response body";
  // The caller's signal decides first: undici rejects with the signal's reason, which can be anything.
  if (signal?.aborted === true) {
    return new UpstreamFailure("aborted", `upstream ${origin}: call aborted ${where}`, { cause: error });
  }
  if (code !== undefined && TIMEOUT_CODES.has(code)) {
    return new UpstreamFailure("timeout", `upstream ${origin}: timed out ${where}: ${detail}`, {
      cause: error,
    });
  }
  if (code === "UND_ERR_ABORTED" || isAbortError(error)) {
    return new UpstreamFailure("aborted", `upstream ${origin}: call aborted ${where}`, { cause: error });
  }
  // A malformed HTTP answer is not an unreachable upstream.
  if (phase === "request" && !code?.startsWith("HPE_")) {
    return new UpstreamFailure("unreachable", `upstream ${origin} unreachable: ${detail}`, { cause: error });
  }
  return new UpstreamFailure("broken", `upstream ${origin}: response broken ${where}: ${detail}`, {
    cause: error,
  });
}

function errorCode(error: unknown): string | undefined {
  if (typeof error !== "object" || error === null) return undefined;
  const code = (error as { code?: unknown }).code;
  return typeof code === "string" ? code : undefined;
}

function isAbortError(error: unknown): boolean {
  return error instanceof Error && error.name === "AbortError";
}
