import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import { resolve } from "node:path";
import { type ChainRegistry, parseChainRegistry } from "./core/billing/chain-registry.js";
import { defaultPriceCatalog } from "./core/billing/default-catalog.js";
import { defaultChainRegistry } from "./core/billing/default-chains.js";
import { parseDecimalAmount } from "./core/billing/money.js";
import { type PriceCatalog, parsePriceCatalog } from "./core/billing/price-catalog.js";
import { IMAGE_ADAPTERS, type ImageAdapter, type ImageRoute } from "./core/images/image-models.js";
import { CLIENT_POLICIES, type ClientPolicy } from "./core/inference/client-policy.js";
import { type ClientTimeouts, DEFAULT_CLIENT_TIMEOUTS } from "./facade/client-limits.js";

/** Thrown for invalid configuration; the message always names the variable. */
export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(`${variable}: ${message}`);
    this.name = "ConfigError";
  }
}

/** The metrics port `tollgate dev` serves when TOLLGATE_METRICS_PORT is unset (Prometheus's exporter range). */
export const DEV_METRICS_PORT = 9464;

/** Everything the process is configured with; built once by {@link loadConfig}. */
export interface Config {
  /** Address the public facade binds to. */
  readonly host: string;
  /** Public HTTP/1.1 port of the facade; 0 picks a free port. */
  readonly port: number;
  /** Address the core binds to. */
  readonly coreHost: string;
  /** HTTP/2 cleartext port of the core (gRPC, gRPC-Web, Connect); 0 picks a free port. */
  readonly corePort: number;
  /**
   * Port of the Prometheus metrics endpoint (`GET /metrics`, docs/operations.md); 0 picks a free
   * port. `off` serves none; unset is the mode's default (`dev`: {@link DEV_METRICS_PORT}, else off).
   */
  readonly metricsPort: number | "off" | undefined;
  /** Address the metrics endpoint binds to. */
  readonly metricsHost: string;
  /** Directory holding the SQLite database (absolute). */
  readonly dataDir: string;
  /** When set, this process runs only the facade and calls the core at this URL. */
  readonly coreUrl: string | undefined;
  /** Operator bearer token for account management over the network; unset disables it. */
  readonly adminToken: string | undefined;
  /**
   * The service token a facade tier presents to a remote core (`x-tollgate-facade`), which then
   * trusts its client addresses and public origin; set alike on the core and its facade tiers.
   */
  readonly facadeToken: string | undefined;
  /** Redis for rate limits shared by every gateway host; unset: each process counts in memory. */
  readonly redisUrl: string | undefined;
  /**
   * `postgres://…`: the store is PostgreSQL, shared by every gateway host and chains worker
   * (docs/store.md); unset → SQLite in {@link dataDir}, the embedded default.
   */
  readonly databaseUrl: string | undefined;
  /** Connections each process keeps to PostgreSQL. */
  readonly databasePoolSize: number;
  /** How long SIGTERM waits for in-flight requests before closing connections. */
  readonly shutdownTimeoutMs: number;
  /** Fastify/pino log level. */
  readonly logLevel: "fatal" | "error" | "warn" | "info" | "debug" | "trace" | "silent";
  /** Chains callers may pay on (TOLLGATE_CHAINS file, else the shipped registry). */
  readonly chains: ChainRegistry;
  /** Prices (TOLLGATE_CATALOG file, else the shipped catalog). */
  readonly catalog: PriceCatalog;
  /** The longest a call may run; the sweeper voids holds older than this. */
  readonly maxCallMs: number;
  /** How often the hold sweeper runs after its start-up sweep. */
  readonly holdSweepIntervalMs: number;
  /** Between two background rounds of health checks (HealthService answers from the last). */
  readonly healthIntervalMs: number;
  /** The text provider (Anthropic wire format). */
  readonly anthropic: AnthropicUpstreamConfig;
  /** Requests per minute per key on billed endpoints. */
  readonly rateLimitPerMinute: number;
  /** Requests per minute per key on count_tokens. */
  readonly countTokensPerMinute: number;
  /** Failed authentications a client address may have per minute before it is blocked; 0: no throttle. */
  readonly authFailuresPerMinute: number;
  /** How long an address that went over that budget is refused, from its last counted failure. */
  readonly authBlockMs: number;
  /** Keyless billed calls (x402 offers and payments) a client address may make per minute; 0: unlimited. */
  readonly anonymousCallsPerMinute: number;
  /** Dashboard sign-in nonces a client address may ask for per minute; 0: unlimited. */
  readonly signInNoncesPerMinute: number;
  /**
   * The largest body a keyless call may send before it carries an x402 payment (an offer is all
   * it can get): messages and image generations, and image edits' uploads.
   */
  readonly unpaidBodyBytes: { readonly json: number; readonly upload: number };
  /** Live (unrevoked) API keys an account may have at once. */
  readonly maxLiveKeys: number;
  /**
   * The proxies in front of the facade whose X-Forwarded-For it believes (addresses, CIDR ranges,
   * `loopback`, `linklocal`, `uniquelocal`); empty: none, a client is the connection's peer.
   */
  readonly trustProxy: readonly string[];
  /** Which clients may make text calls. */
  readonly clientPolicy: ClientPolicy;
  /** A gateway `ping` is sent after this long without an event from a streaming provider. */
  readonly streamPingMs: number;
  /** The `max_uses` a web search tool without one is sent with (it bounds the call's hold). */
  readonly webSearchMaxUses: number;
  /** Most connections open to the text provider at once; 0 for no limit (one per call in flight). */
  readonly upstreamConnections: number;
  /** How long the facade waits for slow clients (docs/reliability.md). */
  readonly clientTimeouts: ClientTimeouts;
  /** Image providers, model routes, upload limits and `url` expiry. */
  readonly images: ImagesConfig;
  /** Onchain deposits, settlement and withdrawals (docs/chains.md). */
  readonly onchain: OnchainConfig;
}

/** How the gateway meets the chains (docs/chains.md). */
export interface OnchainConfig {
  /**
   * `dev`: `tollgate dev` starts local dev chains for the registry and watches those
   * (TOLLGATE_CHAINS unset, or TOLLGATE_DEV_CHAINS=on; `worker`, and `serve` unless facade-only,
   * refuse to start without a configured registry); `configured`: watch and settle on the registry's own RPCs
   * (TOLLGATE_CHAINS set; needs the master secret); `off`: no chain is contacted, onchain RPCs
   * refuse (TOLLGATE_DEV_CHAINS=off).
   */
  readonly mode: "dev" | "configured" | "off";
  /** TOLLGATE_MASTER_SECRET (hex, at least 32 bytes); every deposit and treasury key derives from it. */
  readonly masterSecret: Uint8Array | undefined;
  /** `per-call`: one transfer per charged call; `batch`: one per (account, chain) per window. */
  readonly settlementMode: "per-call" | "batch";
  /** Batch mode: the longest a call's settlement waits for others of its batch. */
  readonly batchWindowMs: number;
  /** Pause between two deposit scans, and between two settlement passes, per chain. */
  readonly pollMs: number;
  /** The most blocks (or slots) one deposit scan asks the RPC for. */
  readonly scanRange: number;
  /**
   * Withdrawals an account's own callers (keys, dashboard sessions) may make per hour, over
   * every chain; counted where rate limits are (Redis when TOLLGATE_REDIS_URL is set).
   */
  readonly withdrawalsPerHour: number;
  /**
   * TOLLGATE_X402 (`on` by default, `off`): whether billed calls without an API key may pay per
   * request with x402 on the EVM chains that run (docs/x402.md). Off, they get 401 as before.
   */
  readonly x402: boolean;
  /**
   * TOLLGATE_X402_FACILITATOR_URL: a remote x402 facilitator that verifies and settles
   * payments; unset, the gateway's own facilitator does it on the configured chains' RPCs.
   */
  readonly x402FacilitatorUrl: string | undefined;
  /**
   * TOLLGATE_X402_MAX_AUTHORISATION (dollars, default 25; `none` for no cap), in micro-dollars:
   * the largest worst case an x402 text call is served with. A stream is delivered before it is
   * collected, so this bounds what a payer who moves its funds meanwhile can cost the gateway.
   */
  readonly x402MaxAuthorisation: bigint | undefined;
}

/** Where image calls go, what uploads may weigh, and how long `url` images live. */
export interface ImagesConfig {
  /** A Gemini-format provider; url undefined when neither its URL nor its key is set. */
  readonly gemini: ImageProviderConfig;
  /** An OpenAI-images-compatible provider; url undefined when neither its URL nor its key is set. */
  readonly openai: ImageProviderConfig;
  /** Per-model overrides of the shipped routes (TOLLGATE_IMAGE_MODELS). */
  readonly routes: Readonly<Record<string, ImageRoute>>;
  /** How long an image returned as `url` is served. */
  readonly urlTtlMs: number;
  /** Largest reference image accepted by `POST /v1/images/edits`. */
  readonly maxFileBytes: number;
  /** Largest `POST /v1/images/edits` body. */
  readonly maxRequestBytes: number;
  /** The public origin `url` images are named under (behind a proxy); else the request's own. */
  readonly publicUrl: string | undefined;
}

/** One image provider's base URL (without its version path) and key. */
export interface ImageProviderConfig {
  readonly url: string | undefined;
  /** "" when unset. */
  readonly apiKey: string;
}

/** Where text calls go, and how patiently. */
export interface AnthropicUpstreamConfig {
  /**
   * The provider's base URL (without /v1). Undefined when neither TOLLGATE_ANTHROPIC_URL nor
   * TOLLGATE_ANTHROPIC_API_KEY is set: `tollgate dev` then runs the built-in dev upstream, and
   * `serve` (unless facade-only) refuses to start.
   */
  readonly url: string | undefined;
  /** Sent as x-api-key; "" when unset. */
  readonly apiKey: string;
  readonly connectTimeoutMs: number;
  /** Longest wait for the response headers (a non-streaming answer can take minutes). */
  readonly headersTimeoutMs: number;
  /** Longest silence between two chunks of a response body. */
  readonly idleTimeoutMs: number;
  /** Longest a provider response may run in all; below maxCallMs, so the call settles first. */
  readonly responseTimeoutMs: number;
}

type Env = Readonly<Record<string, string | undefined>>;

const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const;
const DEFAULT_ANTHROPIC_URL = "https://api.anthropic.com";

/**
 * Reads and validates the configuration. The only place in the project that reads the
 * environment; everything else receives a {@link Config}.
 */
export function loadConfig(env: Env = process.env, cwd: string = process.cwd()): Config {
  const coreUrl = optional(env, "TOLLGATE_CORE_URL");
  if (coreUrl !== undefined) {
    let url: URL;
    try {
      url = new URL(coreUrl);
    } catch {
      throw new ConfigError("TOLLGATE_CORE_URL", `not a URL: ${JSON.stringify(coreUrl)}`);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new ConfigError("TOLLGATE_CORE_URL", "must be an http:// or https:// URL");
    }
  }
  const redisUrl = optional(env, "TOLLGATE_REDIS_URL");
  if (redisUrl !== undefined) {
    let protocol: string;
    try {
      protocol = new URL(redisUrl).protocol;
    } catch {
      throw new ConfigError("TOLLGATE_REDIS_URL", "not a URL (redis://[:password@]host:port[/db])");
    }
    if (protocol !== "redis:" && protocol !== "rediss:") {
      throw new ConfigError("TOLLGATE_REDIS_URL", "must be a redis:// or rediss:// URL");
    }
  }
  const databaseUrl = optional(env, "TOLLGATE_DATABASE_URL");
  if (databaseUrl !== undefined) {
    let protocol: string;
    try {
      protocol = new URL(databaseUrl).protocol;
    } catch {
      throw new ConfigError(
        "TOLLGATE_DATABASE_URL",
        "not a URL (postgres://user:password@host:port/database)",
      );
    }
    if (protocol !== "postgres:" && protocol !== "postgresql:") {
      throw new ConfigError(
        "TOLLGATE_DATABASE_URL",
        "must be a postgres:// or postgresql:// URL (unset it for SQLite in TOLLGATE_DATA_DIR)",
      );
    }
  }
  const adminToken = optional(env, "TOLLGATE_ADMIN_TOKEN");
  if (adminToken !== undefined && adminToken.length < 32) {
    throw new ConfigError("TOLLGATE_ADMIN_TOKEN", "must be at least 32 characters");
  }
  const facadeToken = optional(env, "TOLLGATE_FACADE_TOKEN");
  if (facadeToken !== undefined && facadeToken.length < 32) {
    throw new ConfigError("TOLLGATE_FACADE_TOKEN", "must be at least 32 characters");
  }
  const maxCallMs = integer(env, "TOLLGATE_MAX_CALL_MS", 900_000, 1_000, 86_400_000);
  const config: Config = {
    host: optional(env, "TOLLGATE_HOST") ?? "127.0.0.1",
    port: port(env, "TOLLGATE_PORT", 8787),
    coreHost: optional(env, "TOLLGATE_CORE_HOST") ?? "127.0.0.1",
    corePort: port(env, "TOLLGATE_CORE_PORT", 8788),
    metricsPort:
      optional(env, "TOLLGATE_METRICS_PORT") === "off" ? "off" : optionalPort(env, "TOLLGATE_METRICS_PORT"),
    metricsHost: optional(env, "TOLLGATE_METRICS_HOST") ?? "127.0.0.1",
    dataDir: resolve(cwd, optional(env, "TOLLGATE_DATA_DIR") ?? "data"),
    coreUrl,
    adminToken,
    facadeToken,
    redisUrl,
    databaseUrl,
    databasePoolSize: integer(env, "TOLLGATE_DATABASE_POOL_SIZE", 10, 1, 1_000),
    shutdownTimeoutMs: integer(env, "TOLLGATE_SHUTDOWN_TIMEOUT_MS", 10_000, 0, 600_000),
    logLevel: oneOf(env, "TOLLGATE_LOG_LEVEL", LOG_LEVELS, "info"),
    chains: jsonFile(env, cwd, "TOLLGATE_CHAINS", parseChainRegistry) ?? defaultChainRegistry(),
    catalog: jsonFile(env, cwd, "TOLLGATE_CATALOG", parsePriceCatalog) ?? defaultPriceCatalog(),
    maxCallMs,
    holdSweepIntervalMs: integer(env, "TOLLGATE_HOLD_SWEEP_INTERVAL_MS", 60_000, 100, 3_600_000),
    healthIntervalMs: integer(env, "TOLLGATE_HEALTH_INTERVAL_S", 10, 1, 3_600) * 1000,
    anthropic: anthropicUpstream(env, maxCallMs),
    rateLimitPerMinute: integer(env, "TOLLGATE_RATE_LIMIT_RPM", 600, 1, 1_000_000),
    countTokensPerMinute: integer(env, "TOLLGATE_COUNT_TOKENS_RPM", 6_000, 1, 1_000_000),
    authFailuresPerMinute: integer(env, "TOLLGATE_AUTH_FAILURES_PER_MINUTE", 30, 0, 1_000_000),
    authBlockMs: integer(env, "TOLLGATE_AUTH_BLOCK_S", 60, 1, 86_400) * 1000,
    anonymousCallsPerMinute: integer(env, "TOLLGATE_ANONYMOUS_CALLS_PER_MINUTE", 300, 0, 1_000_000),
    signInNoncesPerMinute: integer(env, "TOLLGATE_SIGN_IN_NONCES_PER_MINUTE", 30, 0, 1_000_000),
    unpaidBodyBytes: {
      // Anthropic's request limit is 32 MiB; an unpaid call is an offer only.
      json: integer(env, "TOLLGATE_X402_UNPAID_BODY_BYTES", 1024 * 1024, 1024, 32 * 1024 * 1024),
      upload: integer(
        env,
        "TOLLGATE_X402_UNPAID_UPLOAD_BYTES",
        4 * 1024 * 1024,
        1024,
        MAX_IMAGE_REQUEST_BYTES,
      ),
    },
    maxLiveKeys: integer(env, "TOLLGATE_MAX_LIVE_KEYS", 20, 1, 100_000),
    trustProxy: trustProxy(env),
    clientPolicy: oneOf(env, "TOLLGATE_CLIENT_POLICY", CLIENT_POLICIES, "any"),
    streamPingMs: integer(env, "TOLLGATE_STREAM_PING_MS", 10_000, 10, 290_000),
    webSearchMaxUses: integer(env, "TOLLGATE_WEB_SEARCH_MAX_USES", 5, 1, 100),
    upstreamConnections: integer(env, "TOLLGATE_UPSTREAM_CONNECTIONS", 0, 0, 1_000_000),
    clientTimeouts: {
      headersMs: integer(
        env,
        "TOLLGATE_CLIENT_HEADERS_TIMEOUT_MS",
        DEFAULT_CLIENT_TIMEOUTS.headersMs,
        100,
        600_000,
      ),
      requestMs: integer(
        env,
        "TOLLGATE_CLIENT_REQUEST_TIMEOUT_MS",
        DEFAULT_CLIENT_TIMEOUTS.requestMs,
        100,
        3_600_000,
      ),
      stallMs: integer(
        env,
        "TOLLGATE_CLIENT_STALL_TIMEOUT_MS",
        DEFAULT_CLIENT_TIMEOUTS.stallMs,
        100,
        3_600_000,
      ),
    },
    images: imagesConfig(env),
    onchain: onchainConfig(env),
  };
  checkImageRoutes(config);
  return config;
}

/** The core reads at most this much per RPC message; an edit body must fit with room to spare. */
const MAX_IMAGE_REQUEST_BYTES = 60 * 1024 * 1024;

function imagesConfig(env: Env): ImagesConfig {
  const maxRequestBytes = integer(
    env,
    "TOLLGATE_IMAGE_MAX_REQUEST_BYTES",
    50 * 1024 * 1024,
    1024,
    MAX_IMAGE_REQUEST_BYTES,
  );
  // The default per-file limit never exceeds a lowered per-request limit.
  const maxFileBytes = integer(
    env,
    "TOLLGATE_IMAGE_MAX_FILE_BYTES",
    Math.min(10 * 1024 * 1024, maxRequestBytes),
    1024,
    maxRequestBytes,
  );
  return {
    gemini: imageProvider(env, "GEMINI", "https://generativelanguage.googleapis.com", /\/v1(beta)?$/),
    openai: imageProvider(env, "OPENAI_IMAGES", "https://api.openai.com", /\/v1$/),
    routes: imageRoutes(env),
    urlTtlMs: integer(env, "TOLLGATE_IMAGE_URL_TTL_S", 3_600, 1, 7 * 86_400) * 1000,
    maxFileBytes,
    maxRequestBytes,
    publicUrl: publicUrl(env),
  };
}

/** TOLLGATE_PUBLIC_URL: an origin (scheme, host, optional port), without a trailing slash. */
function publicUrl(env: Env): string | undefined {
  const variable = "TOLLGATE_PUBLIC_URL";
  const problem = "must be an http:// or https:// origin without a path";
  const parsed = httpUrl(env, variable, problem);
  if (parsed === undefined) return undefined;
  if (parsed.pathname !== "/") throw new ConfigError(variable, problem);
  return parsed.origin;
}

/**
 * An optional http(s) URL variable, parsed; a value that is not one stops the process naming it
 * (`problem` says what another scheme is told).
 */
function httpUrl(
  env: Env,
  variable: string,
  problem = "must be an http:// or https:// URL",
): URL | undefined {
  const raw = optional(env, variable);
  if (raw === undefined) return undefined;
  let parsed: URL;
  try {
    parsed = new URL(raw);
  } catch {
    throw new ConfigError(variable, `not a URL: ${JSON.stringify(raw)}`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new ConfigError(variable, problem);
  return parsed;
}

/** The named ranges TOLLGATE_TRUST_PROXY takes besides addresses and CIDR ranges (Fastify's). */
const PROXY_RANGES = ["loopback", "linklocal", "uniquelocal"];

/** TOLLGATE_TRUST_PROXY: the proxies in front of the facade, comma-separated. */
function trustProxy(env: Env): string[] {
  const variable = "TOLLGATE_TRUST_PROXY";
  const raw = optional(env, variable);
  if (raw === undefined) return [];
  return raw.split(",").map((part) => {
    const entry = part.trim();
    if (!PROXY_RANGES.includes(entry) && !isAddressOrRange(entry)) {
      throw new ConfigError(
        variable,
        `expected the proxies' addresses or CIDR ranges (e.g. 10.0.0.0/8,127.0.0.1) or ${PROXY_RANGES.join(", ")}; got ${JSON.stringify(entry)}`,
      );
    }
    return entry;
  });
}

/** `192.0.2.1`, `10.0.0.0/8`, `2001:db8::/32`. */
function isAddressOrRange(entry: string): boolean {
  const [address = "", prefix, ...rest] = entry.split("/");
  const family = isIP(address);
  if (family === 0 || rest.length > 0) return false;
  return prefix === undefined || (/^\d+$/.test(prefix) && Number(prefix) <= (family === 4 ? 32 : 128));
}

/** TOLLGATE_<name>_URL and TOLLGATE_<name>_API_KEY; a key alone means the public endpoint. */
function imageProvider(
  env: Env,
  name: string,
  publicUrl: string,
  versionSuffix: RegExp,
): ImageProviderConfig {
  const apiKey = optional(env, `TOLLGATE_${name}_API_KEY`) ?? "";
  const variable = `TOLLGATE_${name}_URL`;
  const raw = optional(env, variable);
  if (raw === undefined) return { url: apiKey === "" ? undefined : publicUrl, apiKey };
  let parsed: URL;
  try {
    parsed = new URL(raw);
  } catch {
    throw new ConfigError(variable, `not a URL: ${JSON.stringify(raw)}`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
    throw new ConfigError(variable, "must be an http:// or https:// URL");
  }
  // The client appends the version path itself; a trailing one in the setting would double it.
  return { url: raw.replace(/\/+$/, "").replace(versionSuffix, ""), apiKey };
}

/** TOLLGATE_IMAGE_MODELS: `model=adapter:provider-model`, comma-separated. */
function imageRoutes(env: Env): Record<string, ImageRoute> {
  const variable = "TOLLGATE_IMAGE_MODELS";
  const raw = optional(env, variable);
  const routes: Record<string, ImageRoute> = {};
  if (raw === undefined) return routes;
  for (const entry of raw.split(",").map((part) => part.trim())) {
    const match = /^([a-z0-9][a-z0-9.-]*)=([a-z]+):([A-Za-z0-9._\-/]+)$/.exec(entry);
    if (match === null) {
      throw new ConfigError(
        variable,
        `expected model=adapter:provider-model (e.g. image-2=openai:gpt-image-1), got ${JSON.stringify(entry)}`,
      );
    }
    const [, model = "", adapter = "", upstreamModel = ""] = match;
    if (!(IMAGE_ADAPTERS as readonly string[]).includes(adapter)) {
      throw new ConfigError(
        variable,
        `adapter must be one of ${IMAGE_ADAPTERS.join(", ")}, got ${JSON.stringify(adapter)}`,
      );
    }
    routes[model] = { adapter: adapter as ImageAdapter, upstreamModel };
  }
  return routes;
}

/** Every routed image model must be priced: the gateway never serves what it cannot bill. */
function checkImageRoutes(config: Config): void {
  for (const model of Object.keys(config.images.routes)) {
    if (!config.catalog.images.has(model)) {
      const priced = [...config.catalog.images.keys()].join(", ");
      throw new ConfigError(
        "TOLLGATE_IMAGE_MODELS",
        `${model} is not an image model of the catalog (${priced})`,
      );
    }
  }
}

const DEV_CHAINS = ["auto", "on", "off"] as const;
const SETTLEMENT_MODES = ["per-call", "batch"] as const;

function onchainConfig(env: Env): OnchainConfig {
  const devChains = oneOf(env, "TOLLGATE_DEV_CHAINS", DEV_CHAINS, "auto");
  const configured = optional(env, "TOLLGATE_CHAINS") !== undefined;
  const raw = optional(env, "TOLLGATE_MASTER_SECRET");
  let masterSecret: Uint8Array | undefined;
  if (raw !== undefined) {
    const hex = raw.startsWith("0x") ? raw.slice(2) : raw;
    if (!/^[0-9a-fA-F]+$/.test(hex) || hex.length % 2 !== 0 || hex.length < 64) {
      throw new ConfigError("TOLLGATE_MASTER_SECRET", "must be hex of at least 32 bytes (64 hex digits)");
    }
    masterSecret = new Uint8Array(Buffer.from(hex, "hex"));
  }
  return {
    mode: devChains === "off" ? "off" : devChains === "on" || !configured ? "dev" : "configured",
    masterSecret,
    settlementMode: oneOf(env, "TOLLGATE_SETTLEMENT_MODE", SETTLEMENT_MODES, "batch"),
    batchWindowMs: integer(env, "TOLLGATE_SETTLEMENT_BATCH_WINDOW_MS", 60_000, 0, 86_400_000),
    pollMs: integer(env, "TOLLGATE_CHAIN_POLL_MS", 2_000, 10, 600_000),
    scanRange: integer(env, "TOLLGATE_CHAIN_SCAN_RANGE", 2_000, 1, 1_000_000),
    withdrawalsPerHour: integer(env, "TOLLGATE_WITHDRAWALS_PER_HOUR", 10, 1, 1_000_000),
    x402: oneOf(env, "TOLLGATE_X402", ON_OFF, "on") === "on",
    x402FacilitatorUrl: facilitatorUrl(env),
    x402MaxAuthorisation: dollars(env, "TOLLGATE_X402_MAX_AUTHORISATION", "25"),
  };
}

/** A dollar amount ("25", "0.05") in micro-dollars; `none` is no amount at all. */
function dollars(env: Env, name: string, fallback: string): bigint | undefined {
  const raw = optional(env, name) ?? fallback;
  if (raw === "none") return undefined;
  let amount: bigint;
  try {
    amount = parseDecimalAmount(raw, 6);
  } catch {
    throw new ConfigError(
      name,
      `expected a dollar amount with at most 6 decimals (e.g. 25 or 0.05) or none, got ${JSON.stringify(raw)}`,
    );
  }
  if (amount === 0n) throw new ConfigError(name, "must be above 0 (or none for no cap)");
  return amount;
}

const ON_OFF = ["on", "off"] as const;

/** TOLLGATE_X402_FACILITATOR_URL: an http(s) URL, the facilitator's base (it serves /verify, /settle, /supported). */
function facilitatorUrl(env: Env): string | undefined {
  return httpUrl(env, "TOLLGATE_X402_FACILITATOR_URL")?.href.replace(/\/+$/, "");
}

/**
 * The master secret the chains run on: the configured one, or in dev mode `devSecret` (a
 * labelled, public dev-only value). Outside dev mode a missing secret refuses to start.
 */
export function requireMasterSecret(onchain: OnchainConfig, devSecret: Uint8Array): Uint8Array {
  if (onchain.masterSecret !== undefined) return onchain.masterSecret;
  if (onchain.mode === "dev") return devSecret;
  throw new ConfigError(
    "TOLLGATE_MASTER_SECRET",
    "is required when TOLLGATE_CHAINS is set: deposit addresses and settlement keys derive from it " +
      "(generate one with `openssl rand -hex 32` and keep it safe; set TOLLGATE_DEV_CHAINS=off to run without chains)",
  );
}

function anthropicUpstream(env: Env, maxCallMs: number): AnthropicUpstreamConfig {
  const apiKey = optional(env, "TOLLGATE_ANTHROPIC_API_KEY") ?? "";
  let url = optional(env, "TOLLGATE_ANTHROPIC_URL");
  if (url !== undefined) {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw new ConfigError("TOLLGATE_ANTHROPIC_URL", `not a URL: ${JSON.stringify(url)}`);
    }
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
      throw new ConfigError("TOLLGATE_ANTHROPIC_URL", "must be an http:// or https:// URL");
    }
    // Clients append /v1/…; a trailing /v1 or slash in the setting would double it.
    url = url.replace(/\/+$/, "").replace(/\/v1$/, "");
  } else if (apiKey !== "") {
    url = DEFAULT_ANTHROPIC_URL;
  }
  return {
    url,
    apiKey,
    connectTimeoutMs: integer(env, "TOLLGATE_UPSTREAM_CONNECT_TIMEOUT_MS", 10_000, 1, 600_000),
    headersTimeoutMs: integer(env, "TOLLGATE_UPSTREAM_HEADERS_TIMEOUT_MS", 600_000, 1, 3_600_000),
    idleTimeoutMs: integer(env, "TOLLGATE_UPSTREAM_IDLE_TIMEOUT_MS", 300_000, 1, 3_600_000),
    // The call must still settle before the sweeper may void its hold (at maxCallMs).
    responseTimeoutMs: integer(
      env,
      "TOLLGATE_UPSTREAM_RESPONSE_TIMEOUT_MS",
      maxCallMs - Math.min(60_000, Math.floor(maxCallMs / 10)),
      1,
      maxCallMs - 1,
    ),
  };
}

/** Reads and validates the JSON file named by variable `name` (relative to `cwd`), if set. */
function jsonFile<T>(env: Env, cwd: string, name: string, parse: (json: unknown) => T): T | undefined {
  const raw = optional(env, name);
  if (raw === undefined) return undefined;
  const path = resolve(cwd, raw);
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    throw new ConfigError(name, `cannot read ${path}: ${(error as Error).message}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new ConfigError(name, `${path} is not valid JSON: ${(error as Error).message}`);
  }
  try {
    return parse(json);
  } catch (error) {
    throw new ConfigError(name, `${path}: ${(error as Error).message}`);
  }
}

function optional(env: Env, name: string): string | undefined {
  const value = env[name];
  return value === undefined || value.trim() === "" ? undefined : value.trim();
}

function port(env: Env, name: string, fallback: number): number {
  return integer(env, name, fallback, 0, 65_535);
}

function optionalPort(env: Env, name: string): number | undefined {
  return optional(env, name) === undefined ? undefined : port(env, name, 0);
}

function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = optional(env, name);
  if (raw === undefined) return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(name, `expected a whole number, got ${JSON.stringify(raw)}`);
  const value = Number(raw);
  if (value < min || value > max)
    throw new ConfigError(name, `must be between ${min} and ${max}, got ${value}`);
  return value;
}

function oneOf<const T extends readonly string[]>(
  env: Env,
  name: string,
  allowed: T,
  fallback: T[number],
): T[number] {
  const raw = optional(env, name);
  if (raw === undefined) return fallback;
  if (!allowed.includes(raw))
    throw new ConfigError(name, `must be one of ${allowed.join(", ")}, got ${JSON.stringify(raw)}`);
  return raw as T[number];
}

/**
 * The metrics port a gateway serves: the configured one, else {@link DEV_METRICS_PORT} in dev
 * mode; undefined when off (the default of `serve`).
 */
export function metricsPortOf(config: Config, devMode: boolean): number | undefined {
  if (config.metricsPort === "off") return undefined;
  return config.metricsPort ?? (devMode ? DEV_METRICS_PORT : undefined);
}
