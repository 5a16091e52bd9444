import { generateKeyPairSync, type KeyObject } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import type { ConnectRouter, ConnectRouterOptions } from "@connectrpc/connect";
import { AuthService } from "../gen/tollgate/auth/v1/auth_pb.js";
import {
  BillingService,
  DepositAddressSchema,
  GetDepositAddressesResponseSchema,
} from "../gen/tollgate/billing/v1/billing_pb.js";
import { HealthService } from "../gen/tollgate/health/v1/health_pb.js";
import { InferenceService } from "../gen/tollgate/inference/v1/inference_pb.js";
import { AnonymousLimits, type AnonymousLimitsConfig } from "./auth/anonymous-limits.js";
import { createAuthService } from "./auth/auth-service.js";
import { type AuthFailureLimits, AuthThrottle } from "./auth/auth-throttle.js";
import { Authenticator } from "./auth/authenticator.js";
import { Sessions } from "./auth/sessions.js";
import { Billing } from "./billing/billing.js";
import { BillingCounters } from "./billing/billing-counters.js";
import { createBillingService } from "./billing/billing-service.js";
import type { ChainRegistry } from "./billing/chain-registry.js";
import { defaultPriceCatalog } from "./billing/default-catalog.js";
import { defaultChainRegistry } from "./billing/default-chains.js";
import { createFundingMethods, type DevFaucet } from "./billing/funding.js";
import { createHoldSweeper, type HoldSweeper } from "./billing/hold-sweeper.js";
import { type ChainDirectory, OnchainBilling } from "./billing/onchain-billing.js";
import type { PriceCatalog } from "./billing/price-catalog.js";
import { ReceiptSigner, Receipts } from "./billing/receipts.js";
import type { X402Payments } from "./billing/x402.js";
import { x402Payer } from "./billing/x402-accounts.js";
import type { X402SignIn } from "./billing/x402-sign-in.js";
import {
  type CallerResolver,
  callerInterceptor,
  callerKey,
  headerCallerResolver,
  requireOperator,
} from "./caller.js";
import { invalidField, toConnectError } from "./errors.js";
import { createHealthService, HealthMonitor, type HealthProbe } from "./health-service.js";
import { ImageInference } from "./images/image-inference.js";
import { buildImageModelCatalog, type ImageAdapter, type ImageRoute } from "./images/image-models.js";
import type { ClientPolicy } from "./inference/admission.js";
import { DEFAULT_WEB_SEARCH_MAX_USES } from "./inference/billable-features.js";
import { IdempotentCalls } from "./inference/idempotency.js";
import { createInferenceService } from "./inference/inference-service.js";
import { buildModelCatalog } from "./inference/model-catalog.js";
import { TextInference } from "./inference/text-inference.js";
import type { AccountStore, SessionStore } from "./ports/accounts.js";
import type { IdempotencyStore } from "./ports/idempotency.js";
import type { ImageStore } from "./ports/image-store.js";
import type { LedgerStore, OnchainStore } from "./ports/ledger.js";
import { type Log, silentLog } from "./ports/log.js";
import { type Metrics, NO_METRICS } from "./ports/metrics.js";
import type { ImageUpstream, TextUpstream } from "./ports/providers.js";
import type { RateLimiter, RateLimiterFactory } from "./ports/rate-limits.js";
import type { WalletSignatures } from "./ports/wallets.js";
import type { X402Store } from "./ports/x402.js";

/** What the core is built from. */
export interface CoreDeps {
  /** Accounts, their keys and wallet identities. */
  readonly accounts: AccountStore;
  /** Dashboard sign-in nonces and sessions. */
  readonly sessions: SessionStore;
  /** What wallets sign, parsed and verified (src/chains/wallet-signatures.ts). */
  readonly wallets: WalletSignatures;
  /**
   * The ledger (holds, settlements, credits, balances, usage); its writes are durable when
   * answered. Its x402 side clears payers that owe (ClearX402Payer).
   */
  readonly ledger: LedgerStore & Pick<X402Store, "clearFailedX402">;
  /** The onchain records callers see (deposits, withdrawals, the settlement backlog). */
  readonly onchain: OnchainStore;
  /** Where billed calls' Idempotency-Keys are kept; without it a key is refused (501). */
  readonly idempotency?: IdempotencyStore | undefined;
  /** The throttle on failed authentications per client address; nothing is throttled without it. */
  readonly authFailures?: AuthFailureLimits | undefined;
  /** Operator token accepted in `authorization: Bearer`; undefined disables operator calls over the network. */
  readonly adminToken?: string | undefined;
  readonly now?: () => number;
  /**
   * Where the core logs: every failure masked as Internal with its original cause, and what
   * callers cannot see (masked provider failures, billing anomalies), each with its request id.
   * Nothing is logged when absent.
   */
  readonly log?: Log | undefined;
  /** Chains callers may pay on; the shipped registry when absent. */
  readonly chains?: ChainRegistry | undefined;
  /** Prices; the shipped catalog when absent. */
  readonly catalog?: PriceCatalog | undefined;
  /** The `max_uses` sent for a web search tool that has none; 5 when absent. */
  readonly webSearchMaxUses?: number | undefined;
  /** A server tool's result as held for before it arrives (pass by pass), in tokens; 50,000 when absent. */
  readonly toolResultTokens?: number | undefined;
  /** The longest a call may run (hold expiry); 15 minutes when absent. */
  readonly maxCallMs?: number | undefined;
  /** How often the hold sweeper runs once started; a minute when absent. */
  readonly holdSweepIntervalMs?: number | undefined;
  /** Model calls; without it (the operator CLI) InferenceService is not served. */
  readonly inference?: InferenceDeps | undefined;
  /** The chains runtime's deposit addresses and address checks; without it onchain RPCs refuse. */
  readonly chainDirectory?: ChainDirectory | undefined;
  /** What HealthService checks: the store, each chain's RPC and watcher lag. */
  readonly probes?: readonly HealthProbe[] | undefined;
  /** Between two background rounds of those checks (default 10 s). */
  readonly healthIntervalMs?: number | undefined;
  /** Dev mode: mints a dev chain's test stablecoin (the faucet RPC); absent otherwise. */
  readonly faucet?: DevFaucet | undefined;
  /**
   * True only under `tollgate dev`: GetPricing says so, and the dashboard offers its test wallet.
   * Set from the command that runs, not inferred from dev chains or a faucet, so `serve` never
   * offers it whatever its chains.
   */
  readonly devMode?: boolean | undefined;
  /**
   * The Ed25519 key receipts are signed with (src/core/billing/receipts.ts): the runtime derives
   * it from the master secret, so every host signs alike.
   */
  readonly receiptKey?: KeyObject | undefined;
  /** TOLLGATE_PUBLIC_URL's origin: what receipts name as the gateway (else the facade's Host). */
  readonly publicOrigin?: string | undefined;
  /**
   * The origins a dashboard sign-in message may name: TOLLGATE_PUBLIC_URL's, or in dev the
   * facade's listen origin (a function: it is known once the facade listens). None (the default)
   * refuses every sign-in unless a proven facade names its own public origin.
   */
  readonly signInOrigins?: (() => readonly string[]) | undefined;
  /**
   * TOLLGATE_FACADE_TOKEN: what a remote facade tier presents (`x-tollgate-facade`) to be trusted
   * with its client's address and its public origin; unset, no network caller is.
   */
  readonly facadeToken?: string | undefined;
  /** Each account's withdrawals per hour (its own callers', not the operator's); unlimited when absent. */
  readonly withdrawalLimit?: RateLimiter | undefined;
  /** Where holds, charges and provider latency are counted (the metrics endpoint); nowhere when absent. */
  readonly metrics?: Metrics | undefined;
  /**
   * Keyless calls paid per request with x402 (docs/x402.md), built by the runtime with its
   * facilitator; without it a call with no key is refused (401).
   */
  readonly x402?: X402Payments | undefined;
  /**
   * Who a keyless caller is, proven with x402's sign-in-with-x: the payer of a call paid with
   * x402 reads its receipt so (docs/receipts.md). Without it (or without x402) a receipt needs a key.
   */
  readonly x402SignIn?: X402SignIn | undefined;
  /** Live (unrevoked) keys an account may have at once; {@link DEFAULT_MAX_LIVE_KEYS} when absent. */
  readonly maxLiveKeys?: number | undefined;
  /** Per-client-address limits on work without a key (keyless calls, sign-in nonces); none when absent. */
  readonly anonymousLimits?: AnonymousLimitsConfig | undefined;
}

/** Live keys an account may have when the runtime names no cap (TOLLGATE_MAX_LIVE_KEYS's default). */
export const DEFAULT_MAX_LIVE_KEYS = 20;

/** What the Inference service needs beyond the store: the provider, rate limits and call policies. */
export interface InferenceDeps {
  readonly textUpstream: TextUpstream;
  /** Builds the per-key limits (messages, count_tokens, images): in memory, or in Redis across hosts. */
  readonly rateLimiter: RateLimiterFactory;
  readonly clientPolicy: ClientPolicy;
  readonly messagesPerMinute: number;
  readonly countTokensPerMinute: number;
  readonly streamPingMs: number;
  /** Image calls; without it the image RPCs answer Unimplemented. */
  readonly images?: ImageDeps | undefined;
}

/** What image calls need: providers per wire format, `url` storage, routes and limits. */
export interface ImageDeps {
  readonly upstreams: Readonly<Partial<Record<ImageAdapter, ImageUpstream>>>;
  readonly store: ImageStore;
  readonly urlTtlMs: number;
  /** Per-model overrides of the shipped routes. */
  readonly routes: Readonly<Record<string, ImageRoute>>;
  readonly perMinute: number;
}

/**
 * The core's read and write limit per RPC message: an edit carries up to 14 reference images
 * and a response a 4K image, far above the 4 MiB many gRPC stacks default to.
 */
export const CORE_MAX_MESSAGE_BYTES = 64 * 1024 * 1024;

/** The core services, ready to be mounted on a server or an in-process transport. */
export interface Core {
  /** Registers every service on a router. */
  readonly routes: (router: ConnectRouter) => void;
  /** Router options for callers identified by their metadata (network and facade). */
  readonly routerOptions: ConnectRouterOptions;
  /** Router options with another caller resolver (the operator CLI). */
  routerOptionsFor(resolve: CallerResolver): ConnectRouterOptions;
  /** The billing core, for in-process callers (the Inference service). */
  readonly billing: Billing;
  /** Counts of billing anomalies (unpriced usage, capped charges, missing usage), for metrics. */
  readonly counters: BillingCounters;
  /** Voids orphaned holds; not started here: the serving process starts and stops it. */
  readonly sweeper: HoldSweeper;
  /**
   * Checks the dependencies in the background for HealthService; not started here: the serving
   * process starts and stops it (unstarted, it checks once, when first asked).
   */
  readonly health: HealthMonitor;
}

const none = (): readonly string[] => [];

/** Builds the core's services over its stores and providers. Never listens. */
export function createCore(deps: CoreDeps): Core {
  const now = deps.now ?? Date.now;
  const log = deps.log ?? silentLog;
  const repo = deps.accounts;
  const authenticator = new Authenticator(repo, now);
  const throttle = new AuthThrottle(deps.authFailures, now);
  const anonymous = new AnonymousLimits(deps.anonymousLimits, now);
  const chains = deps.chains ?? defaultChainRegistry();
  const sessions = new Sessions({ repo: deps.sessions, accounts: repo, chains, wallets: deps.wallets, now });
  const webSearchMaxUses = deps.webSearchMaxUses ?? DEFAULT_WEB_SEARCH_MAX_USES;
  const counters = new BillingCounters();
  const metrics = deps.metrics ?? NO_METRICS;
  const billing = new Billing({
    ledger: deps.ledger,
    chains,
    catalog: deps.catalog ?? defaultPriceCatalog(),
    now,
    metrics,
  });
  const sweeper = createHoldSweeper(billing, {
    maxCallMs: deps.maxCallMs ?? 15 * 60_000,
    intervalMs: deps.holdSweepIntervalMs ?? 60_000,
    onError: (error) => log.error({ err: error }, "the hold sweeper failed"),
  });
  const onchain = new OnchainBilling({
    ledger: deps.ledger,
    onchain: deps.onchain,
    chains: billing.chains,
    directory: deps.chainDirectory,
    now,
    withdrawalLimit: deps.withdrawalLimit,
  });
  // Without a key of its own (tests), a core signs with one it makes, lost when it stops.
  const receipts = new Receipts(
    new ReceiptSigner(deps.receiptKey ?? generateKeyPairSync("ed25519").privateKey),
    {
      call: (accountId, requestId) => billing.call(accountId, requestId),
      chainConfig: (id) => billing.chainConfig(id),
      settlements: (holdIds) => onchain.settlements(holdIds),
      x402Payments: (holdIds) => deps.x402?.payments(holdIds) ?? Promise.resolve(new Map()),
      raises: (holdId) => billing.raises(holdId),
    },
    deps.publicOrigin,
  );
  const health = new HealthMonitor(deps.probes ?? [], { intervalMs: deps.healthIntervalMs ?? 10_000, now });
  const inference =
    deps.inference === undefined
      ? undefined
      : new TextInference({
          billing,
          models: buildModelCatalog(billing.catalog),
          upstream: deps.inference.textUpstream,
          messagesLimit: deps.inference.rateLimiter("messages", deps.inference.messagesPerMinute, 60_000),
          countTokensLimit: deps.inference.rateLimiter(
            "count_tokens",
            deps.inference.countTokensPerMinute,
            60_000,
          ),
          clientPolicy: deps.inference.clientPolicy,
          streamPingMs: deps.inference.streamPingMs,
          webSearchMaxUses,
          toolResultTokens: BigInt(deps.toolResultTokens ?? 50_000),
          counters,
          metrics,
          now,
          log,
          x402: deps.x402,
        });
  const images =
    deps.inference?.images === undefined
      ? undefined
      : new ImageInference({
          billing,
          models: buildImageModelCatalog(billing.catalog, deps.inference.images.routes),
          upstreams: deps.inference.images.upstreams,
          store: deps.inference.images.store,
          urlTtlMs: deps.inference.images.urlTtlMs,
          limit: deps.inference.rateLimiter("images", deps.inference.images.perMinute, 60_000),
          metrics,
          now,
          log,
          x402: deps.x402,
        });
  const idempotency =
    deps.idempotency === undefined
      ? undefined
      : new IdempotentCalls({
          store: deps.idempotency,
          now,
          maxCallMs: deps.maxCallMs ?? 15 * 60_000,
          onError: (error, context) => log.error({ err: error }, context),
        });
  const routes = (router: ConnectRouter) => {
    router.service(
      AuthService,
      createAuthService({
        repo,
        authenticator,
        throttle,
        sessions,
        signInOrigins: deps.signInOrigins ?? none,
        now,
        maxLiveKeys: deps.maxLiveKeys ?? DEFAULT_MAX_LIVE_KEYS,
        anonymous,
      }),
    );
    const billingMethods = createBillingService(
      billing,
      onchain,
      webSearchMaxUses,
      deps.accounts,
      receipts,
      deps.x402 === undefined ? undefined : deps.x402SignIn,
    );
    router.service(BillingService, {
      ...billingMethods,
      ...createFundingMethods({ faucet: deps.faucet, chains, directory: deps.chainDirectory }),
      async clearX402Payer(req, ctx) {
        requireOperator(ctx.values.get(callerKey));
        if (req.payer.trim() === "")
          throw invalidField("payer", "payer is required: the wallet address that paid.");
        const payer = x402Payer(req.payer.trim());
        // The store answers, not the payment code: the operator's CLI clears without a facilitator.
        const cleared = await deps.ledger.clearFailedX402(payer, now());
        log.info({ payer, cleared }, "an operator cleared an x402 payer's failed collections");
        return { cleared };
      },
      getPricing: (req, ctx) => ({ ...billingMethods.getPricing(req, ctx), devMode: deps.devMode ?? false }),
      async getDepositAddresses(req, ctx) {
        const res = await billingMethods.getDepositAddresses(req, ctx);
        const testFunds = (chain: string) => deps.faucet?.chains.has(chain) ?? false;
        return create(GetDepositAddressesResponseSchema, {
          accountId: res.accountId ?? "",
          addresses: (res.addresses ?? []).map((a) =>
            create(DepositAddressSchema, {
              chain: a.chain,
              address: a.address ?? "",
              testFunds: testFunds(a.chain?.id ?? ""),
            }),
          ),
        });
      },
    });
    router.service(HealthService, createHealthService(health));
    if (inference !== undefined)
      router.service(InferenceService, createInferenceService(inference, now, receipts, images, idempotency));
  };
  /** Every failure as a ConnectError; one that had to be masked is logged with its cause. */
  const mask = (error: unknown, req: { header: Headers; url: string }) => {
    const masked = toConnectError(error);
    if (masked !== error) {
      const requestId = req.header.get("x-request-id") || undefined;
      log.error({ err: error, requestId, procedure: req.url }, "internal error");
    }
    return masked;
  };
  const routerOptionsFor = (resolve: CallerResolver): ConnectRouterOptions => ({
    interceptors: [callerInterceptor(resolve, deps.facadeToken, mask)],
    readMaxBytes: CORE_MAX_MESSAGE_BYTES,
    writeMaxBytes: CORE_MAX_MESSAGE_BYTES,
  });
  return {
    routes,
    routerOptions: routerOptionsFor(headerCallerResolver(authenticator, throttle, deps.adminToken, sessions)),
    routerOptionsFor,
    billing,
    counters,
    sweeper,
    health,
  };
}
