import { type ChainRegistry, parseChainRegistry } from "../core/billing/chain-registry.js";
import { defaultChainRegistry } from "../core/billing/default-chains.js";
import { ConfigError, dollars, type Env, integer, jsonFile, oneOf, onOff, optional, url } from "./read.js";

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

/** Chains callers may pay on: the TOLLGATE_CHAINS file, else the shipped registry. */
export function chainRegistry(env: Env, cwd: string): ChainRegistry {
  return jsonFile(env, cwd, "TOLLGATE_CHAINS", parseChainRegistry) ?? defaultChainRegistry();
}

const DEV_CHAINS = ["auto", "on", "off"] as const;
const SETTLEMENT_MODES = ["per-call", "batch"] as const;

export function onchainConfig(env: Env): OnchainConfig {
  const devChains = oneOf(env, "TOLLGATE_DEV_CHAINS", DEV_CHAINS, "auto");
  const configured = optional(env, "TOLLGATE_CHAINS") !== undefined;
  return {
    mode: devChains === "off" ? "off" : devChains === "on" || !configured ? "dev" : "configured",
    masterSecret: masterSecret(env),
    settlementMode: oneOf(env, "TOLLGATE_SETTLEMENT_MODE", SETTLEMENT_MODES, "batch"),
    batchWindowMs: integer(env, "TOLLGATE_SETTLEMENT_BATCH_WINDOW_MS", 60_000, 0, 86_400_000),
    pollMs: integer(env, "TOLLGATE_CHAIN_POLL_MS", 2_000, 10, 600_000),
    scanRange: integer(env, "TOLLGATE_CHAIN_SCAN_RANGE", 2_000, 1, 1_000_000),
    withdrawalsPerHour: integer(env, "TOLLGATE_WITHDRAWALS_PER_HOUR", 10, 1, 1_000_000),
    x402: onOff(env, "TOLLGATE_X402", "on"),
    // The facilitator's base: it serves /verify, /settle, /supported.
    x402FacilitatorUrl: url(env, "TOLLGATE_X402_FACILITATOR_URL")?.url.href.replace(/\/+$/, ""),
    x402MaxAuthorisation: dollars(env, "TOLLGATE_X402_MAX_AUTHORISATION", "25"),
  };
}

/** TOLLGATE_MASTER_SECRET: hex (optionally 0x-prefixed) of at least 32 bytes. */
function masterSecret(env: Env): Uint8Array | undefined {
  const raw = optional(env, "TOLLGATE_MASTER_SECRET");
  if (raw === undefined) return undefined;
  const hex = raw.startsWith("0x") ? raw.slice(2) : raw;
  if (!/^[0-9a-fA-F]+$/.test(hex) || hex.length % 2 !== 0 || hex.length < 64) {
    throw new ConfigError("TOLLGATE_MASTER_SECRET", "must be hex of at least 32 bytes (64 hex digits)");
  }
  return new Uint8Array(Buffer.from(hex, "hex"));
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
