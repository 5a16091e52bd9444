import { type Client, createClient, createRouterTransport } from "@connectrpc/connect";
import { expect } from "vitest";
import { operatorCallerResolver } from "../../src/core/caller.js";
import {
  type DevUpstream,
  type RecordedRequest,
  type ScriptedReply,
  startDevUpstream,
} from "../../src/dev/provider/dev-upstream.js";
import { BillingService } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { accountWithKey, startTestGateway, type TestGateway } from "./app.js";
import { coreOver } from "./core.js";

/** A gateway in front of the dev upstream, with one funded account and its key. */
export interface TextGateway {
  readonly gateway: TestGateway;
  readonly upstream: DevUpstream;
  readonly accountId: string;
  readonly keyId: string;
  readonly secret: string;
  /** The facade origin, as Claude Code and the SDK take it (no /v1). */
  readonly baseUrl: string;
  readonly billing: Client<typeof BillingService>;
  /** Answers the next upstream requests with `reply` while it returns one (see DevUpstream). */
  script(reply: ((request: RecordedRequest) => ScriptedReply | undefined) | undefined): void;
  /** Credits `amount` ledger units (µ$ on the shipped 6-decimal chains). */
  credit(amount: bigint, chain?: string, accountId?: string): Promise<void>;
  /** Every call's hold, newest first. */
  usage(accountId?: string): Promise<Awaited<ReturnType<Client<typeof BillingService>["listUsage"]>>["rows"]>;
  /** Available balance on a chain. */
  available(chain?: string, accountId?: string): Promise<bigint>;
  /** Asserts the ledger's conservation and consistency invariants. */
  expectSoundLedger(): void;
  close(): Promise<void>;
}

/**
 * Starts the dev upstream and a gateway pointed at it; `env` adds TOLLGATE_* settings (a
 * function of the dev upstream's URL when a setting needs it).
 */
export async function startTextGateway(
  env: Record<string, string> | ((upstreamUrl: string) => Record<string, string>) = {},
): Promise<TextGateway> {
  let current: ((request: RecordedRequest) => ScriptedReply | undefined) | undefined;
  const upstream = await startDevUpstream({ script: (request) => current?.(request) });
  const extra = typeof env === "function" ? env(upstream.url) : env;
  const gateway = await startTestGateway({ TOLLGATE_ANTHROPIC_URL: upstream.url, ...extra });
  const core = coreOver(gateway.db);
  const billing = createClient(
    BillingService,
    createRouterTransport(core.routes, { router: core.routerOptionsFor(operatorCallerResolver) }),
  );
  const { accountId, keyId, secret } = await accountWithKey(gateway.operator, "text");
  const self: TextGateway = {
    gateway,
    upstream,
    accountId,
    keyId,
    secret,
    baseUrl: gateway.facadeUrl,
    billing,
    script(reply) {
      current = reply;
    },
    async credit(amount, chain = "base", account = accountId) {
      await billing.credit({ accountId: account, chain, amount, reason: "test funds" });
    },
    async usage(account = accountId) {
      return (await billing.listUsage({ accountId: account, pageSize: 1000 })).rows;
    },
    async available(chain = "base", account = accountId) {
      const { balances } = await billing.getBalances({ accountId: account });
      return balances.find((b) => b.chain?.id === chain)?.available ?? 0n;
    },
    expectSoundLedger() {
      expect(auditLedger(gateway.db)).toEqual([]);
    },
    async close() {
      await gateway.close();
      await upstream.close();
    },
  };
  return self;
}

/** Prices in µ$ per million tokens (the shipped catalog), for hand-computed expectations. */
export const RATES = {
  "model-haiku-4-5": {
    input: 1_000_000n,
    output: 5_000_000n,
    w5m: 1_250_000n,
    w1h: 2_000_000n,
    read: 100_000n,
  },
  "model-opus-4-8": {
    input: 5_000_000n,
    output: 25_000_000n,
    w5m: 6_250_000n,
    w1h: 10_000_000n,
    read: 500_000n,
  },
  "model-sonnet-4-6": {
    input: 3_000_000n,
    output: 15_000_000n,
    w5m: 3_750_000n,
    w1h: 6_000_000n,
    read: 300_000n,
  },
} as const;

/** Token counts of one call, as the upstream reported them. */
export interface Tokens {
  readonly input?: number;
  readonly output?: number;
  readonly w5m?: number;
  readonly w1h?: number;
  readonly read?: number;
}

/**
 * The charge in µ$ (ledger units of the 6-decimal chains), computed by hand: each token kind at
 * its own rate per million tokens, summed exactly, rounded up once.
 */
export function expectedCharge(model: keyof typeof RATES, t: Tokens): bigint {
  const r = RATES[model];
  const pico =
    BigInt(t.input ?? 0) * r.input +
    BigInt(t.output ?? 0) * r.output +
    BigInt(t.w5m ?? 0) * r.w5m +
    BigInt(t.w1h ?? 0) * r.w1h +
    BigInt(t.read ?? 0) * r.read;
  return (pico + 999_999n) / 1_000_000n;
}
