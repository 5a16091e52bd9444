import type { KeyObject } from "node:crypto";
import type { ChainsRuntime } from "../chains/chains-runtime.js";
import { walletSignatures } from "../chains/wallet-signatures.js";
import type { Config } from "../config/config.js";
import type { CoreDeps, ImageDeps } from "../core/core.js";
import type { HealthProbe } from "../core/health-service.js";
import type { Log } from "../core/ports/log.js";
import type { Metrics } from "../core/ports/metrics.js";
import type { TextUpstream } from "../core/ports/providers.js";
import type { RateLimiterFactory } from "../core/ports/rate-limits.js";
import type { Stores } from "../store/shared/store-set.js";
import type { OnchainSetup } from "./chains.js";
import type { RuntimeMode } from "./types.js";
import type { X402Parts } from "./x402.js";

/** What a runtime has opened by the time it builds the core. */
export interface OpenedForCore {
  readonly stores: Pick<Stores, "accounts" | "sessions" | "ledger" | "idempotency">;
  /** The chains that run, and the chain adapters built for them (absent when chains are off). */
  readonly onchain: OnchainSetup | undefined;
  readonly chains: ChainsRuntime | undefined;
  /** The text provider (absent in operator mode or when none is configured). */
  readonly textUpstream: TextUpstream | undefined;
  readonly images: ImageDeps | undefined;
  readonly rateLimiter: RateLimiterFactory;
  readonly probes: readonly HealthProbe[];
  readonly x402: X402Parts;
  readonly receiptKey: KeyObject | undefined;
  readonly metrics: Metrics | undefined;
  /** Where the core logs. */
  readonly log: Log;
  /** Where the facade listens, once it does: dashboard sign-ins name it when no public URL is set. */
  readonly listenOrigins: () => readonly string[];
  readonly now: (() => number) | undefined;
}

/**
 * The core's dependencies, from the configuration in force and what the runtime opened: no I/O,
 * nothing opened or started. The operator's core (the CLI's commands) throttles nobody and
 * signs no receipt.
 */
export function coreDeps(config: Config, mode: RuntimeMode, opened: OpenedForCore): CoreDeps {
  const { stores, rateLimiter, textUpstream } = opened;
  const publicUrl = config.publicUrl;
  return {
    wallets: walletSignatures(),
    receiptKey: opened.receiptKey,
    publicOrigin: publicUrl,
    // Sign-in checks the gateway's configured origin, or (dev, tests) where its facade listens.
    signInOrigins: publicUrl === undefined ? opened.listenOrigins : () => [publicUrl],
    facadeToken: config.facadeToken,
    accounts: stores.accounts,
    sessions: stores.sessions,
    ledger: stores.ledger,
    onchain: stores.ledger,
    idempotency: stores.idempotency,
    // Failed authentications per client address, in the same store as the rate limits.
    authFailures:
      mode === "operator" || config.authFailuresPerMinute === 0
        ? undefined
        : { rateLimiter, perMinute: config.authFailuresPerMinute, blockMs: config.authBlockMs },
    // Work without a key per client address (keyless calls, sign-in nonces), in the same store.
    anonymousLimits:
      mode === "operator"
        ? undefined
        : {
            rateLimiter,
            callsPerMinute: config.anonymousCallsPerMinute,
            noncesPerMinute: config.signInNoncesPerMinute,
          },
    maxLiveKeys: config.maxLiveKeys,
    adminToken: config.adminToken,
    now: opened.now,
    chains: config.chains,
    catalog: config.catalog,
    maxCallMs: config.maxCallMs,
    holdSweepIntervalMs: config.holdSweepIntervalMs,
    healthIntervalMs: config.healthIntervalMs,
    webSearchMaxUses: config.webSearchMaxUses,
    toolResultTokens: config.toolResultTokens,
    inference:
      textUpstream === undefined
        ? undefined
        : {
            textUpstream,
            rateLimiter,
            clientPolicy: config.clientPolicy,
            messagesPerMinute: config.rateLimitPerMinute,
            countTokensPerMinute: config.countTokensPerMinute,
            streamPingMs: config.streamPingMs,
            images: opened.images,
          },
    log: opened.log,
    chainDirectory: opened.chains,
    faucet: opened.onchain?.faucet,
    devMode: mode === "dev",
    withdrawalLimit: rateLimiter("withdrawals", config.onchain.withdrawalsPerHour, 3_600_000),
    metrics: opened.metrics,
    probes: opened.probes,
    x402: opened.x402.payments,
    x402SignIn: opened.x402.signIn,
  };
}
