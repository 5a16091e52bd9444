import type { ChainRegistry } from "../core/billing/chain-registry.js";
import { defaultPriceCatalog } from "../core/billing/default-catalog.js";
import { type PriceCatalog, parsePriceCatalog } from "../core/billing/price-catalog.js";
import { type GatewayConfig, gatewayConfig } from "./gateway.js";
import { checkImageRoutes, type ImagesConfig, imagesConfig } from "./images.js";
import { type LimitsConfig, limitsConfig } from "./limits.js";
import { type MetricsConfig, metricsConfig } from "./metrics.js";
import { chainRegistry, type OnchainConfig, onchainConfig } from "./onchain.js";
import { type ProvidersConfig, providersConfig } from "./providers.js";
import { type Env, integer, jsonFile } from "./read.js";
import { type StoreConfig, storeConfig } from "./store.js";
import { type TextConfig, textConfig } from "./text.js";

export type { GatewayConfig } from "./gateway.js";
export type { ImageProviderConfig, ImagesConfig } from "./images.js";
export type { LimitsConfig } from "./limits.js";
export { DEV_METRICS_PORT, type MetricsConfig, metricsPortOf } from "./metrics.js";
export { type OnchainConfig, requireMasterSecret } from "./onchain.js";
export { ConfigError, type Env } from "./read.js";
export type { StoreConfig } from "./store.js";
export type { AnthropicUpstreamConfig, TextConfig, UpstreamTimeouts } from "./text.js";

/** Calls, holds and prices: what every billed call is bounded by. */
export interface BillingConfig {
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
}

/** Everything the process is configured with, by area; built once by {@link loadConfig}. */
export type Config = GatewayConfig &
  MetricsConfig &
  StoreConfig &
  LimitsConfig &
  BillingConfig &
  TextConfig & {
    /** Image providers, model routes, upload limits and `url` expiry. */
    readonly images: ImagesConfig;
    /** Onchain deposits, settlement and withdrawals (docs/chains.md). */
    readonly onchain: OnchainConfig;
    /** The providers file (TOLLGATE_PROVIDERS, docs/providers.md); undefined: the single-endpoint variables. */
    readonly providers: ProvidersConfig | undefined;
  };

/**
 * Reads and validates the configuration. The only place in the project that reads the
 * environment; everything else receives a {@link Config}.
 */
export function loadConfig(env: Env = process.env, cwd: string = process.cwd()): Config {
  const maxCallMs = integer(env, "TOLLGATE_MAX_CALL_MS", 900_000, 1_000, 86_400_000);
  const billing: BillingConfig = {
    chains: chainRegistry(env, cwd),
    catalog: jsonFile(env, cwd, "TOLLGATE_CATALOG", parsePriceCatalog) ?? defaultPriceCatalog(),
    maxCallMs,
    holdSweepIntervalMs: integer(env, "TOLLGATE_HOLD_SWEEP_INTERVAL_MS", 60_000, 100, 3_600_000),
    healthIntervalMs: integer(env, "TOLLGATE_HEALTH_INTERVAL_S", 10, 1, 3_600) * 1000,
  };
  const text = textConfig(env, maxCallMs);
  const images = imagesConfig(env, maxCallMs, text.anthropic);
  checkImageRoutes(images, billing.catalog);
  return {
    ...gatewayConfig(env, cwd),
    ...metricsConfig(env),
    ...storeConfig(env),
    ...limitsConfig(env),
    ...billing,
    ...text,
    images,
    onchain: onchainConfig(env),
    providers: providersConfig(env, cwd, billing.catalog),
  };
}
