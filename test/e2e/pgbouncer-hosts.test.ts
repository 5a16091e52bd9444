import { spawn } from "node:child_process";
import { join } from "node:path";
import { createClient } from "@connectrpc/connect";
import pg from "pg";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type EvmDevChain, startEvmDevChain } from "../../src/dev/chains/evm/dev-chain.js";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { BillingService } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { remoteCoreTransport } from "../../src/runtime/remote-core.js";
import { auditPostgres } from "../../src/store/postgres/audit.js";
import { roleKey } from "../../src/store/postgres/chain-work.js";
import { writeChainsFile } from "../helpers/evm.js";
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
import { type PgBouncerServer, startPgBouncer } from "../helpers/pgbouncer.js";
import { type PostgresServer, startPostgres } from "../helpers/postgres.js";
import {
  CLI,
  childEnv,
  cliJson,
  collectOutput,
  type GatewayProcess,
  tempDir,
  until,
} from "../helpers/process.js";
import { type RedisServer, startRedis } from "../helpers/redis.js";

// Several hosts behind a connection pooler (docs/deployment.md, "Behind PgBouncer"): Debian's
// PgBouncer in transaction mode with a pool of 4 server connections per database, through which
// every host's store URL (TOLLGATE_DATABASE_URL) goes; the session-level connections (the auth
// listener, the chain roles, the migration lock) go to PostgreSQL itself by
// TOLLGATE_DATABASE_DIRECT_URL. Without that URL, the hosts refuse to start.

const ADMIN_TOKEN = "pgbouncer-hosts-test-operator-token-0123456789";
const SECRET_HEX = "5d".repeat(32);
const MODEL = "claude-haiku-4-5";
const POOL_SIZE = 4;

let postgres: PostgresServer;
let bouncer: PgBouncerServer;
let redis: RedisServer;
let chain: EvmDevChain;
let chainsFile: string;
const suiteDir = tempDir();

beforeAll(async () => {
  [postgres, redis, chain] = await Promise.all([
    startPostgres(),
    startRedis(),
    startEvmDevChain({ id: "base", chainId: 8453, blockTimeSeconds: 1 }),
  ]);
  bouncer = await startPgBouncer(postgres, { poolMode: "transaction", defaultPoolSize: POOL_SIZE });
  chainsFile = join(suiteDir.path, "chains.json");
  writeChainsFile(chainsFile, chain);
}, 60_000);
afterAll(async () => {
  await bouncer?.stop();
  await Promise.all([postgres?.stop(), redis?.stop(), chain?.close()]);
  suiteDir.cleanup();
});

const cleanups: Cleanups = [];
afterEach(() => cleanUp(cleanups));

/**
 * One deployment: a fresh database reached through the pooler, a provider, and the environment
 * every host shares. `pool`: the test's own connections, to PostgreSQL itself.
 */
async function deployment(extra: Record<string, string> = {}) {
  const direct = await postgres.freshDatabase();
  const pool = new pg.Pool({ connectionString: direct, max: 2 });
  cleanups.push(() => pool.end());
  const upstream: DevUpstream = await startDevUpstream({ host: "127.0.0.1", port: 0 });
  cleanups.push(() => upstream.close());
  const env: Record<string, string> = {
    TOLLGATE_DATABASE_URL: bouncer.pooled(direct),
    TOLLGATE_DATABASE_DIRECT_URL: direct,
    TOLLGATE_REDIS_URL: redis.url,
    TOLLGATE_ANTHROPIC_URL: upstream.url,
    TOLLGATE_CHAINS: chainsFile,
    TOLLGATE_DEV_CHAINS: "auto",
    TOLLGATE_MASTER_SECRET: SECRET_HEX,
    TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN,
    TOLLGATE_SETTLEMENT_MODE: "per-call",
    TOLLGATE_CHAIN_POLL_MS: "100",
    TOLLGATE_RATE_LIMIT_RPM: "10000",
    ...extra,
  };
  return { database: new URL(direct).pathname.slice(1), pool, env };
}

/** One call of fixed size, read to its end: its status and, when refused, its message. */
function call(gateway: GatewayProcess, secret: string, stream = true): Promise<CallResult> {
  return messagesCall(gateway, secret, MODEL, "through the pooler", stream);
}

async function count(pool: pg.Pool, sql: string, params: unknown[] = []): Promise<number> {
  return Number((await pool.query<{ n: string }>(sql, params)).rows[0]!.n);
}

describe("two gateway hosts whose store URL goes through PgBouncer (transaction mode)", () => {
  it("bills keyed calls on both hosts, shares the pool's 4 server connections, and a spend cap and a revocation reach the other host", async () => {
    const { database, pool, env } = await deployment();
    const [a, b] = await Promise.all([startHost(env, cleanups), startHost(env, cleanups)]);
    // The ready line names both URLs, passwords masked.
    const password = new URL(env.TOLLGATE_DATABASE_DIRECT_URL!).password;
    expect(a.stdout()).toContain(
      `store: postgres postgres://tollgate:***@127.0.0.1:${bouncer.port}/${database}, sessions on postgres://tollgate:***@127.0.0.1:${postgres.port}/${database}`,
    );
    expect(a.stdout()).not.toContain(password);
    const caller = await cliAccount(env, cleanups, "pooled");
    await cliCredit(caller.cli, caller.id, "5", "calls");

    // 24 calls at once over both hosts: more transactions in flight than server connections.
    const results = await Promise.all(
      Array.from({ length: 24 }, (_, i) => call(i % 2 === 0 ? a : b, caller.secret, i % 3 !== 0)),
    );
    expect(results.map((r) => r.status)).toEqual(Array(24).fill(200));
    expect(await count(pool, "SELECT COUNT(*) AS n FROM open_holds")).toBe(0);
    expect(await count(pool, "SELECT COUNT(*) AS n FROM hold_resolutions WHERE status = 'settled'")).toBe(24);
    const charged = BigInt(
      (await pool.query<{ s: string }>("SELECT COALESCE(SUM(amount), 0)::text AS s FROM hold_resolutions"))
        .rows[0]!.s,
    );
    expect(charged).toBeGreaterThan(0n);
    const billing = createClient(BillingService, remoteCoreTransport(b.coreUrl, ADMIN_TOKEN));
    const { balances } = await billing.getBalances({ accountId: caller.id });
    expect(balances.find((x) => x.chain?.id === "base")?.available).toBe(5_000_000n - charged);
    expect(await auditPostgres(pool)).toEqual([]);

    // The pooler really shared its connections: the hosts' clients outnumber its servers.
    const servers = (await bouncer.admin("SHOW SERVERS")).filter((s) => s.database === database);
    const clients = (await bouncer.admin("SHOW CLIENTS")).filter((c) => c.database === database);
    expect(servers.length).toBeGreaterThan(0);
    expect(servers.length).toBeLessThanOrEqual(POOL_SIZE);
    expect(clients.length).toBeGreaterThan(POOL_SIZE);
    // Each host's auth listener is a session on PostgreSQL itself, not a client of the pooler.
    expect(
      await count(
        pool,
        "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE datname = $1 AND application_name = 'tollgate auth listener'",
        [database],
      ),
    ).toBe(2);

    // A lifetime cap at what was spent, set by the operator's CLI: host b refuses the next call.
    const spent = (Number(charged) / 1e6).toFixed(6);
    await cliJson(["key", "cap", "--account", caller.id, "--chain", "base", "--lifetime", spent], caller.cli);
    const capped = await call(b, caller.secret, false);
    expect(capped.status).toBe(402);
    expect(capped.message).toMatch(/cap/i);
    await cliJson(
      ["key", "cap", "--account", caller.id, "--chain", "base", "--lifetime", "none"],
      caller.cli,
    );
    expect((await call(b, caller.secret, false)).status).toBe(200);
    expect((await call(a, caller.secret, false)).status).toBe(200);

    // Revoked on the command line: both hosts refuse the key once the notification arrives
    // (they hold the auth counter as announced, and would otherwise keep serving it).
    await cliJson(["key", "revoke", caller.keyId], caller.cli);
    let last: { status: number; message: string } | undefined;
    for (const gateway of [a, b]) {
      await until(
        "the revocation to reach the host",
        async () => {
          last = await call(gateway, caller.secret, false);
          return last.status === 403 && /revoked/.test(last.message) ? true : undefined;
        },
        5_000,
        () => JSON.stringify(last),
      );
    }
    expect(await count(pool, "SELECT COUNT(*) AS n FROM open_holds")).toBe(0);
    expect(await auditPostgres(pool)).toEqual([]);
  }, 120_000);
});

describe("chains workers whose store URL goes through PgBouncer", () => {
  it("exactly one holds the chain's role (an advisory lock on PostgreSQL itself), and the other takes it over", async () => {
    const { pool, env } = await deployment();
    const workers = await Promise.all([0, 1].map(() => startHostWorker(env, cleanups)));
    const leader = await until("one worker to take the chain's role", async () =>
      workers.find((w) => w.runs()),
    );
    const follower = workers.find((w) => w !== leader)!;
    // pg_locks shows a bigint advisory key as its high and low 32 bits (classid, objid), objsubid 1.
    const key = roleKey("base");
    const heldLocks = () =>
      count(
        pool,
        "SELECT COUNT(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = $1 AND objid = $2 AND objsubid = 1",
        [BigInt.asUintN(32, key >> 32n).toString(), BigInt.asUintN(32, key).toString()],
      );
    expect(follower.runs()).toBe(false);
    expect(await heldLocks()).toBe(1);

    // The leader's writes go through the pooler: a deposit is credited.
    const gateway = await startHost(env, cleanups);
    const caller = await cliAccount(env, cleanups, "pooled");
    const billing = createClient(BillingService, remoteCoreTransport(gateway.coreUrl, ADMIN_TOKEN));
    const { addresses } = await billing.getDepositAddresses({ accountId: caller.id });
    await chain.mintTo(addresses[0]!.address, 2_000_000n);
    await until(
      "the deposit to be credited",
      async () => {
        const { balances } = await billing.getBalances({ accountId: caller.id });
        return balances.find((x) => x.chain?.id === "base")?.available === 2_000_000n ? true : undefined;
      },
      30_000,
      () => leader.log(),
    );

    await leader.stop("SIGKILL");
    await until(
      "the follower to take the chain's role",
      async () => (follower.runs() ? true : undefined),
      30_000,
    );
    expect(await heldLocks()).toBe(1);
    expect(await auditPostgres(pool)).toEqual([]);
  }, 120_000);
});

describe("a store URL through PgBouncer without a direct URL", () => {
  /** `tollgate COMMAND` with `env`, expected to stop by itself: its exit code and stderr. */
  async function refused(command: string, env: Record<string, string>) {
    const dir = tempDir();
    cleanups.push(dir.cleanup);
    const child = spawn(process.execPath, [CLI, command], {
      env: childEnv({ ...env, TOLLGATE_DATA_DIR: dir.path, TOLLGATE_PUBLIC_URL: "http://127.0.0.1:1" }),
      stdio: ["ignore", "pipe", "pipe"],
    });
    return await collectOutput(child, 30_000);
  }

  it("is refused at start by serve and worker, naming TOLLGATE_DATABASE_DIRECT_URL; so is a direct URL that is the pooler", async () => {
    const { pool, env } = await deployment();
    const { TOLLGATE_DATABASE_DIRECT_URL: _, ...withoutDirect } = env;
    for (const command of ["serve", "worker"]) {
      const result = await refused(command, withoutDirect);
      expect(result.code).not.toBe(0);
      expect(result.code).not.toBeNull();
      expect(result.stderr).toMatch(/TOLLGATE_DATABASE_DIRECT_URL: .*transaction pooler/);
    }
    const pooledTwice = await refused("serve", {
      ...env,
      TOLLGATE_DATABASE_DIRECT_URL: env.TOLLGATE_DATABASE_URL!,
    });
    expect(pooledTwice.code).not.toBe(0);
    expect(pooledTwice.stderr).toMatch(/TOLLGATE_DATABASE_DIRECT_URL: .*transaction pooler/);
    // Refused before migrating: nothing was created through the pooler.
    expect((await pool.query("SELECT to_regclass('schema_migrations') AS t")).rows[0].t).toBeNull();
  }, 60_000);
});
