import { CLIENT_POLICIES, type ClientPolicy } from "../core/inference/admission.js";
import { type Env, integer, oneOf, optional, url } from "./read.js";

/** How patiently the gateway waits on a provider. */
export interface UpstreamTimeouts {
  readonly connectTimeoutMs: number;
  /** Longest wait for the response headers (a non-streaming answer can take minutes). */
  readonly headersTimeoutMs: number;
  /** Longest silence between two chunks of a response body. */
  readonly idleTimeoutMs: number;
  /** Longest a provider response may run in all; below maxCallMs, so the call settles first. */
  readonly responseTimeoutMs: number;
}

/** Where text calls go, and how patiently. */
export interface AnthropicUpstreamConfig extends UpstreamTimeouts {
  /**
   * The provider's base URL (without /v1). Undefined when neither TOLLGATE_ANTHROPIC_URL nor
   * TOLLGATE_ANTHROPIC_API_KEY is set: `tollgate dev` then runs the built-in dev upstream, and
   * `serve` (unless facade-only) refuses to start.
   */
  readonly url: string | undefined;
  /** Sent as x-api-key; "" when unset. */
  readonly apiKey: string;
}

/** Text calls: the provider, its connections, and the call policies. */
export interface TextConfig {
  /** The text provider (Anthropic wire format). */
  readonly anthropic: AnthropicUpstreamConfig;
  /** Which clients may make text calls. */
  readonly clientPolicy: ClientPolicy;
  /** A gateway `ping` is sent after this long without an event from a streaming provider. */
  readonly streamPingMs: number;
  /** The `max_uses` a web search tool without one is sent with (it bounds the call's hold). */
  readonly webSearchMaxUses: number;
  /**
   * The tokens a server tool's result is held for before it arrives, in a call held pass by pass
   * (a larger result is topped up when it arrives: docs/billing.md, "Holding pass by pass").
   */
  readonly toolResultTokens: number;
  /** Most connections open to the text provider at once; 0 for no limit (one per call in flight). */
  readonly upstreamConnections: number;
}

const DEFAULT_ANTHROPIC_URL = "https://api.anthropic.com";

export function textConfig(env: Env, maxCallMs: number): TextConfig {
  return {
    anthropic: anthropicUpstream(env, maxCallMs),
    clientPolicy: oneOf(env, "TOLLGATE_CLIENT_POLICY", CLIENT_POLICIES, "any"),
    streamPingMs: integer(env, "TOLLGATE_STREAM_PING_MS", 10_000, 10, 290_000),
    webSearchMaxUses: integer(env, "TOLLGATE_WEB_SEARCH_MAX_USES", 5, 1, 100),
    toolResultTokens: integer(env, "TOLLGATE_TOOL_RESULT_TOKENS", 50_000, 1_000, 10_000_000),
    upstreamConnections: integer(env, "TOLLGATE_UPSTREAM_CONNECTIONS", 0, 0, 1_000_000),
  };
}

function anthropicUpstream(env: Env, maxCallMs: number): AnthropicUpstreamConfig {
  const apiKey = optional(env, "TOLLGATE_ANTHROPIC_API_KEY") ?? "";
  const set = url(env, "TOLLGATE_ANTHROPIC_URL");
  return {
    // Clients append /v1/…; a trailing /v1 or slash in the setting would double it.
    url:
      set !== undefined
        ? set.raw.replace(/\/+$/, "").replace(/\/v1$/, "")
        : apiKey !== ""
          ? DEFAULT_ANTHROPIC_URL
          : undefined,
    apiKey,
    ...upstreamTimeouts(env, "TOLLGATE_UPSTREAM", maxCallMs, {
      connectTimeoutMs: 10_000,
      headersTimeoutMs: 600_000,
      idleTimeoutMs: 300_000,
      // The call must still settle before the sweeper may void its hold (at maxCallMs).
      responseTimeoutMs: maxCallMs - Math.min(60_000, Math.floor(maxCallMs / 10)),
    }),
  };
}

/**
 * A provider's timeouts: `<prefix>_CONNECT_TIMEOUT_MS`, `_HEADERS_TIMEOUT_MS`,
 * `_IDLE_TIMEOUT_MS` and `_RESPONSE_TIMEOUT_MS`, each `defaults`' when unset. A response must end
 * before `maxCallMs`, so the call settles before the sweeper may void its hold.
 */
export function upstreamTimeouts(
  env: Env,
  prefix: string,
  maxCallMs: number,
  defaults: UpstreamTimeouts,
): UpstreamTimeouts {
  return {
    connectTimeoutMs: integer(env, `${prefix}_CONNECT_TIMEOUT_MS`, defaults.connectTimeoutMs, 1, 600_000),
    headersTimeoutMs: integer(env, `${prefix}_HEADERS_TIMEOUT_MS`, defaults.headersTimeoutMs, 1, 3_600_000),
    idleTimeoutMs: integer(env, `${prefix}_IDLE_TIMEOUT_MS`, defaults.idleTimeoutMs, 1, 3_600_000),
    responseTimeoutMs: integer(
      env,
      `${prefix}_RESPONSE_TIMEOUT_MS`,
      defaults.responseTimeoutMs,
      1,
      maxCallMs - 1,
    ),
  };
}
