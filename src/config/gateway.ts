import { isIP } from "node:net";
import { resolve } from "node:path";
import { type ClientTimeouts, DEFAULT_CLIENT_TIMEOUTS } from "../facade/client-limits.js";
import { ConfigError, type Env, integer, oneOf, optional, port, token, url } from "./read.js";

/** Where the gateway listens, who it is, and how it treats its clients. */
export interface GatewayConfig {
  /** Address the public facade binds to. */
  readonly host: string;
  /** Public HTTP/1.1 port of the facade; 0 picks a free port. */
  readonly port: number;
  /** Address the core binds to. */
  readonly coreHost: string;
  /** HTTP/2 cleartext port of the core (gRPC, gRPC-Web, Connect); 0 picks a free port. */
  readonly corePort: number;
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
  /**
   * TOLLGATE_PUBLIC_URL: the gateway's public origin (behind a proxy), without a trailing slash.
   * Receipts and x402 payments name it, dashboard sign-ins must, and `url` images are served
   * under it; unset, the request's own origin (and `serve` refuses to start).
   */
  readonly publicUrl: string | undefined;
  /** How long SIGTERM waits for in-flight requests before closing connections. */
  readonly shutdownTimeoutMs: number;
  /** Fastify/pino log level. */
  readonly logLevel: "fatal" | "error" | "warn" | "info" | "debug" | "trace" | "silent";
  /**
   * The proxies in front of the facade whose X-Forwarded-For it believes (addresses, CIDR ranges,
   * `loopback`, `linklocal`, `uniquelocal`); empty: none, a client is the connection's peer.
   */
  readonly trustProxy: readonly string[];
  /** How long the facade waits for slow clients (docs/reliability.md). */
  readonly clientTimeouts: ClientTimeouts;
}

const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const;

export function gatewayConfig(env: Env, cwd: string): GatewayConfig {
  return {
    host: optional(env, "TOLLGATE_HOST") ?? "127.0.0.1",
    port: port(env, "TOLLGATE_PORT", 8787),
    coreHost: optional(env, "TOLLGATE_CORE_HOST") ?? "127.0.0.1",
    corePort: port(env, "TOLLGATE_CORE_PORT", 8788),
    dataDir: resolve(cwd, optional(env, "TOLLGATE_DATA_DIR") ?? "data"),
    coreUrl: url(env, "TOLLGATE_CORE_URL")?.raw,
    adminToken: token(env, "TOLLGATE_ADMIN_TOKEN", 32),
    facadeToken: token(env, "TOLLGATE_FACADE_TOKEN", 32),
    publicUrl: url(env, "TOLLGATE_PUBLIC_URL", {
      origin: true,
      problem: "must be an http:// or https:// origin without a path",
    })?.url.origin,
    shutdownTimeoutMs: integer(env, "TOLLGATE_SHUTDOWN_TIMEOUT_MS", 10_000, 0, 600_000),
    logLevel: oneOf(env, "TOLLGATE_LOG_LEVEL", LOG_LEVELS, "info"),
    trustProxy: trustProxy(env),
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
  };
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
