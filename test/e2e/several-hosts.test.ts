import { join } from "node:path";
import { createClient } from "@connectrpc/connect";
import type pg from "pg";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createEvmAdapter } from "../../src/chains/evm/evm-adapter.js";
import { parseDecimalAmount } from "../../src/core/billing/money.js";
import { type EvmDevChain, startEvmDevChain } from "../../src/dev/chains/evm/dev-chain.js";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { BillingService } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { remoteCoreTransport } from "../../src/runtime/remote-core.js";
import { auditPostgres } from "../../src/store/postgres/audit.js";
import { openPostgres } from "../../src/store/postgres/database.js";
import { devChainConfig, writeChainsFile } from "../helpers/evm.js";
import {
  type CallResult,
  type Cleanups,
  cleanUp,
  cliAccount,
  cliCredit,
  messagesCall,
  startHost,
  startHostWorker,
} from "../helpers/hosts.js";
import { type PostgresServer, startPostgres } from "../helpers/postgres.js";
import { type GatewayProcess, tempDir, until } from "../helpers/process.js";
import { type RedisServer, startRedis } from "../helpers/redis.js";

// Production with several hosts: gateway processes (`tollgate serve`) and chains workers
// (`tollgate worker`) on one PostgreSQL and one Redis, each a real server, the chain a local
// anvil. Every money invariant is checked in the database they share.

const ADMIN_TOKEN = "several-hosts-test-operator-token-0123456789";
const SECRET_HEX = "5c".repeat(32);
const MODEL = "claude-haiku-4-5";

let postgres: PostgresServer;
let redis: RedisServer;
let chain: EvmDevChain;
let chainsFile: string;
const suiteDir = tempDir();

beforeAll(async () => {
  [postgres, redis, chain] = await Promise.all([
    startPostgres(),
    startRedis(),
    // Blocks every second: a settlement stays in flight long enough to kill its host mid-batch.
    startEvmDevChain({ id: "base", chainId: 8453, blockTimeSeconds: 1 }),
  ]);
  chainsFile = join(suiteDir.path, "chains.json");
  writeChainsFile(chainsFile, chain);
}, 60_000);
afterAll(async () => {
  await Promise.all([postgres?.stop(), redis?.stop(), chain?.close()]);
  suiteDir.cleanup();
});

const cleanups: Cleanups = [];
afterEach(() => cleanUp(cleanups));

/** One deployment: a fresh database, a provider, and the environment every host shares. */
async function deployment(provider: { eventDelayMs?: number } = {}, extra: Record<string, string> = {}) {
  const url = await postgres.freshDatabase();
  const pool = await openPostgres(url, 4);
  cleanups.push(() => pool.end());
  const upstream: DevUpstream = await startDevUpstream({ host: "127.0.0.1", port: 0, ...provider });
  cleanups.push(() => upstream.close());
  const env = {
    TOLLGATE_DATABASE_URL: url,
    TOLLGATE_REDIS_URL: redis.url,
    TOLLGATE_ANTHROPIC_URL: upstream.url,
    TOLLGATE_CHAINS: chainsFile,
    TOLLGATE_DEV_CHAINS: "auto",
    TOLLGATE_MASTER_SECRET: SECRET_HEX,
    TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN,
    TOLLGATE_SETTLEMENT_MODE: "per-call",
    TOLLGATE_CHAIN_POLL_MS: "100",
    ...extra,
  };
  return { url, pool, upstream, env };
}

/** A call of fixed size (streaming unless told), read to its end: its status and, for a 402, its message. */
function streamCall(gateway: GatewayProcess, secret: string, stream = true): Promise<CallResult> {
  return messagesCall(gateway, secret, MODEL, "the same question from every worker", stream);
}

async function count(pool: pg.Pool, sql: string): Promise<number> {
  return Number((await pool.query<{ n: string }>(sql)).rows[0]!.n);
}

describe("two gateway hosts on one PostgreSQL and one Redis", () => {
  it("64 concurrent calls over both hosts against a balance covering exactly K worst-case holds: K served, the rest 402", async () => {
    // Each stream lasts seconds: every hold is placed while the first calls still run.
    const { pool, env } = await deployment({ eventDelayMs: 400 }, { TOLLGATE_RATE_LIMIT_RPM: "10000" });
    const [a, b] = await Promise.all([startHost(env, cleanups), startHost(env, cleanups)]);
    const caller = await cliAccount(env, cleanups, "several-hosts");

    // The worst case of this call, as the gateway computes it: its 402 names it.
    const refused = await streamCall(a, caller.secret);
    expect(refused.status).toBe(402);
    const needed = parseDecimalAmount(/needs up to ([\d.]+) /.exec(refused.message)![1]!, 6);
    expect(needed).toBeGreaterThan(0n);

    const K = 23;
    const funds = needed * BigInt(K) + needed - 1n;
    await cliCredit(caller.cli, caller.id, (Number(funds) / 1e6).toFixed(6), "load");
    const results = await Promise.all(
      Array.from({ length: 64 }, (_, i) => streamCall(i % 2 === 0 ? a : b, caller.secret)),
    );
    const served = results.filter((r) => r.status === 200);
    expect(served).toHaveLength(K);
    expect(results.filter((r) => r.status === 402)).toHaveLength(64 - K);
    // Which host wins which hold depends on timing; that together they never exceed the balance
    // is what the database enforces.

    expect(await auditPostgres(pool)).toEqual([]);
    expect(await count(pool, "SELECT COUNT(*) AS n FROM open_holds")).toBe(0);
    const charged = BigInt(
      (await pool.query<{ s: string }>("SELECT COALESCE(SUM(amount), 0)::text AS s FROM hold_resolutions"))
        .rows[0]!.s,
    );
    const billing = createClient(BillingService, remoteCoreTransport(b.coreUrl, ADMIN_TOKEN));
    const { balances } = await billing.getBalances({ accountId: caller.id });
    expect(balances.find((x) => x.chain?.id === "base")?.available).toBe(funds - charged);

    // Each host's metrics count the holds it sent together: 32 calls at once on a host with one
    // hold statement in flight at a time go mostly in batches, each of two or more.
    const totals = { batches: 0, items: 0, retried: 0 };
    for (const host of [a, b]) {
      const metricsUrl = /metrics (http\S+)/.exec(host.stdout())![1]!;
      const text = await (await fetch(metricsUrl)).text();
      const sample = (name: string) =>
        Number(new RegExp(`^${name}\\{kind="hold"\\} (\\d+)$`, "m").exec(text)?.[1] ?? Number.NaN);
      totals.batches += sample("tollgate_ledger_batches_total");
      totals.items += sample("tollgate_ledger_batch_items_total");
      totals.retried += sample("tollgate_ledger_batch_retries_total");
    }
    expect(totals.batches).toBeGreaterThan(0);
    expect(totals.items).toBeGreaterThanOrEqual(2 * totals.batches);
    expect(totals.items).toBeLessThanOrEqual(64);
    expect(totals.retried).toBeLessThanOrEqual(totals.items);
  }, 120_000);

  it("holds one key's rate limit across the two hosts", async () => {
    const { env } = await deployment({}, { TOLLGATE_RATE_LIMIT_RPM: "4" });
    const [a, b] = await Promise.all([startHost(env, cleanups), startHost(env, cleanups)]);
    const caller = await cliAccount(env, cleanups, "several-hosts");
    await cliCredit(caller.cli, caller.id, "5", "calls");
    const statuses: number[] = [];
    for (let i = 0; i < 8; i++) statuses.push((await streamCall(i % 2 === 0 ? a : b, caller.secret)).status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(4);
    expect(statuses.slice(4)).toEqual([429, 429, 429, 429]);
  }, 60_000);

  it("SIGKILL one host mid-stream: the other's sweeper voids its orphaned holds, and the audit passes", async () => {
    const { pool, env } = await deployment(
      { eventDelayMs: 1_000 },
      { TOLLGATE_MAX_CALL_MS: "2000", TOLLGATE_HOLD_SWEEP_INTERVAL_MS: "200" },
    );
    const [doomed, survivor] = await Promise.all([startHost(env, cleanups), startHost(env, cleanups)]);
    const caller = await cliAccount(env, cleanups, "several-hosts");
    await cliCredit(caller.cli, caller.id, "5", "calls");
    // Six streams on the doomed host, each past its first bytes (its hold placed) when it dies.
    const streams = await Promise.all(
      Array.from({ length: 6 }, async () => {
        const response = await fetch(`${doomed.facadeUrl}/v1/messages`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-api-key": caller.secret },
          body: JSON.stringify({
            model: MODEL,
            max_tokens: 64,
            stream: true,
            messages: [{ role: "user", content: "a stream cut short" }],
          }),
        });
        expect(response.status).toBe(200);
        const reader = response.body!.getReader();
        await reader.read();
        return reader;
      }),
    );
    expect(await count(pool, "SELECT COUNT(*) AS n FROM open_holds")).toBe(6);
    await doomed.stop("SIGKILL");
    for (const reader of streams) await reader.read().catch(() => undefined);

    // The survivor serves meanwhile (an answer in one piece: the provider streams slowly here, and
    // a stream would outlast TOLLGATE_MAX_CALL_MS), and its sweeper voids the dead host's holds
    // once they are older than the longest call.
    expect((await streamCall(survivor, caller.secret, false)).status).toBe(200);
    await until(
      "the survivor's sweeper to void the orphaned holds",
      async () => ((await count(pool, "SELECT COUNT(*) AS n FROM open_holds")) === 0 ? true : undefined),
      20_000,
      () => survivor.stderr(),
    );
    expect(await count(pool, "SELECT COUNT(*) AS n FROM hold_resolutions WHERE status = 'expired'")).toBe(6);
    expect(await count(pool, "SELECT COUNT(*) AS n FROM hold_resolutions WHERE status = 'settled'")).toBe(1);
    expect(await auditPostgres(pool)).toEqual([]);
  }, 60_000);
});

describe("chains workers on two hosts", () => {
  it("the host holding the chain's role dies mid-batch; the other takes over and the treasury receives each charge once", async () => {
    const { pool, env } = await deployment();
    const gateway = await startHost(env, cleanups);
    const workers = [await startHostWorker(env, cleanups), await startHostWorker(env, cleanups)];
    const leader = await until("one worker to take the chain's role", async () =>
      workers.find((w) => w.runs()),
    );
    const follower = workers.find((w) => w !== leader)!;
    expect(follower.runs()).toBe(false);

    const adapter = createEvmAdapter(devChainConfig(chain, 1), {
      masterSecret: new Uint8Array(Buffer.from(SECRET_HEX, "hex")),
    });
    const treasury = adapter.treasuryAddress();
    await chain.fundGas(treasury);
    const before = await adapter.balanceOf(treasury);

    // Funds onchain: the leader's watcher credits the deposit.
    const caller = await cliAccount(env, cleanups, "several-hosts");
    const billing = createClient(BillingService, remoteCoreTransport(gateway.coreUrl, ADMIN_TOKEN));
    const { addresses } = await billing.getDepositAddresses({ accountId: caller.id });
    await chain.mintTo(addresses[0]!.address, 5_000_000n);
    await until(
      "the deposit to be credited",
      async () => {
        const { balances } = await billing.getBalances({ accountId: caller.id });
        return balances.find((b) => b.chain?.id === "base")?.available === 5_000_000n ? true : undefined;
      },
      30_000,
      () => leader.log(),
    );

    // Calls settle per call: transfers the leader prepares, stores and sends, one block a second.
    for (let i = 0; i < 6; i++) expect((await streamCall(gateway, caller.secret)).status).toBe(200);
    await until(
      "the leader to have transfers in flight",
      async () =>
        (await count(
          pool,
          "SELECT COUNT(*) AS n FROM chain_transfers WHERE status IN ('prepared', 'sent')",
        )) > 0
          ? true
          : undefined,
      30_000,
      () => leader.log(),
    );
    await leader.stop("SIGKILL");
    // The follower takes the role over, asks the chain about what the dead leader sent, and
    // settles the rest; calls made after the takeover settle too.
    await until(
      "the follower to take the chain's role",
      async () => (follower.runs() ? true : undefined),
      30_000,
    );
    for (let i = 0; i < 3; i++) expect((await streamCall(gateway, caller.secret)).status).toBe(200);
    await until(
      "every settlement to be confirmed",
      async () => {
        const open = await count(
          pool,
          "SELECT COUNT(*) AS n FROM chain_transfers WHERE status <> 'confirmed'",
        );
        const unbatched = await count(
          pool,
          "SELECT COUNT(*) AS n FROM settlement_intents WHERE transfer_id IS NULL AND onchain_amount > 0",
        );
        return open === 0 && unbatched === 0 ? true : undefined;
      },
      60_000,
      () => follower.log(),
    );
    const settled = BigInt(
      (
        await pool.query<{ s: string }>(
          "SELECT COALESCE(SUM(onchain_amount), 0)::text AS s FROM settlement_intents WHERE chain = 'base'",
        )
      ).rows[0]!.s,
    );
    expect(settled).toBeGreaterThan(0n);
    expect(await count(pool, "SELECT COUNT(*) AS n FROM settlement_intents")).toBe(9);
    // Read from the chain: the treasury received exactly the charged amounts, nothing twice.
    expect((await adapter.balanceOf(treasury)) - before).toBe(settled);
    expect(await auditPostgres(pool)).toEqual([]);
  }, 180_000);
});
