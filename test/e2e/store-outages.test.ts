import { setTimeout as sleep } from "node:timers/promises";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type pg from "pg";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { AuthService } from "../../src/gen/tollgate/auth/v1/auth_pb.js";
import { BillingService } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { auditPostgres } from "../../src/store/postgres/audit.js";
import { openPostgres } from "../../src/store/postgres/database.js";
import { type Cleanups, cleanUp, startHosts } from "../helpers/hosts.js";
import { type PostgresServer, startPostgres } from "../helpers/postgres.js";
import { type GatewayProcess, until } from "../helpers/process.js";
import { type RedisServer, startRedis } from "../helpers/redis.js";

// Two gateway hosts on one PostgreSQL and one Redis while they stumble (docs/deployment.md,
// "What happens when a host dies"). PostgreSQL restarted with `pg_ctl restart -m immediate` (a
// crash, then WAL recovery) while calls stream on both hosts: a call that cannot reach the store
// is answered 503 and never reaches the provider without a durable hold; a stream already
// running is delivered and settled once the server is back (its settle kept and spooled
// meanwhile); both hosts reconnect on their own; the audit is clean and every acknowledged call
// is charged. Redis stopped and started again: limits are counted per host meanwhile, shared
// again once it is back, and no call fails for it.

const ADMIN_TOKEN = "store-outages-operator-token-0123456789abc";
const CREDITED = 100_000_000n;
const MODEL = "model-haiku-4-5";

let postgres: PostgresServer;
let redis: RedisServer;
let upstream: DevUpstream;
const cleanups: Cleanups = [];

beforeAll(async () => {
  [postgres, redis] = await Promise.all([startPostgres(), startRedis()]);
  // Streams of a second or so: some are running when the server goes.
  upstream = await startDevUpstream({ eventDelayMs: 150 });
}, 60_000);
afterAll(async () => {
  await upstream?.close();
  await Promise.all([postgres?.stop(), redis?.stop()]);
});
afterEach(() => cleanUp(cleanups));

/** Two hosts (`tollgate dev` on PostgreSQL and Redis, each its own data dir), and a funded key. */
async function twoHosts(extra: Record<string, string> = {}) {
  const url = await postgres.freshDatabase();
  const env = {
    TOLLGATE_DATABASE_URL: url,
    TOLLGATE_REDIS_URL: redis.url,
    TOLLGATE_ANTHROPIC_URL: upstream.url,
    TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN,
    TOLLGATE_HEALTH_INTERVAL_S: "1",
    ...extra,
  };
  const hosts = await startHosts(2, env, cleanups, { command: "dev" });
  const transport = createConnectTransport({
    baseUrl: hosts[0]!.coreUrl,
    httpVersion: "2",
    interceptors: [
      (next) => (request) => {
        request.header.set("authorization", `Bearer ${ADMIN_TOKEN}`);
        return next(request);
      },
    ],
  });
  const auth = createClient(AuthService, transport);
  const billing = createClient(BillingService, transport);
  const { account } = await auth.createAccount({ name: "store-outages" });
  const accountId = account!.id;
  const { secret } = await auth.createKey({ accountId, name: "store-outages-key" });
  await billing.credit({ accountId, chain: "base", amount: CREDITED, reason: "test funds" });
  const pool = await openPostgres(url, 2);
  cleanups.push(() => pool.end());
  return { hosts, secret, accountId, pool };
}

/** One call's outcome, as its client saw it. */
interface Outcome {
  readonly tag: string;
  readonly host: number;
  readonly status: number;
  readonly requestId: string | null;
  /** 200: the stream ended with message_stop; otherwise the error's message. */
  readonly complete: boolean;
  readonly message: string;
}

let calls = 0;

/** A streaming call tagged in its prompt (the provider's record of it names the tag). */
async function call(hosts: readonly GatewayProcess[], host: number, secret: string): Promise<Outcome> {
  const tag = `call-${++calls}`;
  try {
    const response = await fetch(`${hosts[host]!.facadeUrl}/v1/messages`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-api-key": secret,
        "anthropic-version": "2023-06-01",
      },
      body: JSON.stringify({
        model: MODEL,
        max_tokens: 64,
        stream: true,
        messages: [{ role: "user", content: `outage ${tag} ` }],
      }),
    });
    const text = await response.text();
    const requestId = response.headers.get("request-id");
    if (response.status === 200)
      return { tag, host, status: 200, requestId, complete: text.includes("message_stop"), message: "" };
    const message = (JSON.parse(text) as { error: { message: string } }).error.message;
    return { tag, host, status: response.status, requestId, complete: false, message };
  } catch (error) {
    return { tag, host, status: 0, requestId: null, complete: false, message: String(error) };
  }
}

/** `workers` callers looping over both hosts until `done` resolves. */
async function load(
  hosts: readonly GatewayProcess[],
  secret: string,
  workers: number,
  done: Promise<unknown>,
): Promise<Outcome[]> {
  let stop = false;
  void done.then(() => {
    stop = true;
  });
  const outcomes: Outcome[] = [];
  await Promise.all(
    Array.from({ length: workers }, async (_, w) => {
      for (let i = 0; !stop; i++) {
        const outcome = await call(hosts, (w + i) % 2, secret);
        outcomes.push(outcome);
        // A refused call comes back at once: do not spin on it.
        if (outcome.status !== 200) await sleep(50);
      }
    }),
  );
  return outcomes;
}

async function rows<T extends pg.QueryResultRow>(pool: pg.Pool, sql: string, values: unknown[] = []) {
  return (await pool.query<T>(sql, values)).rows;
}

describe("PostgreSQL restarted under load on two hosts", () => {
  it("answers 503 while it is away, settles the running streams when it is back, and loses no charge", async () => {
    const { hosts, secret, accountId, pool } = await twoHosts({ TOLLGATE_RATE_LIMIT_RPM: "100000" });
    const before = upstream.messageRequests().length;
    let restarted!: () => void;
    const finished = new Promise<void>((resolve) => {
      restarted = resolve;
    });
    const running = load(hosts, secret, 6, finished);
    await sleep(1_500);
    // `pg_ctl restart -m immediate` in its two halves, with a call to each host while the server
    // is away (the load's callers may all be mid-stream in that moment): each is refused 503.
    postgres.halt("immediate");
    const whileAway = await Promise.all([0, 1].map((host) => call(hosts, host, secret)));
    // The server stays away until a stream that was running has ended and its settle was refused.
    await until("a running stream's settle to be refused", async () =>
      /settling a stream failed/.test(hosts.map((h) => h.stdout()).join("")) ? true : undefined,
    );
    postgres.start();
    expect(whileAway.map((o) => o.status)).toEqual([503, 503]);
    // Both hosts serve again on their own: a call on each succeeds (new connections).
    for (const host of [0, 1])
      await until(`host ${host} to serve again`, async () => {
        const outcome = await call(hosts, host, secret);
        return outcome.status === 200 && outcome.complete ? outcome : undefined;
      });
    await sleep(1_000);
    restarted();
    const outcomes = [...(await running), ...whileAway];

    const byStatus = new Map<number, Outcome[]>();
    for (const o of outcomes) byStatus.set(o.status, [...(byStatus.get(o.status) ?? []), o]);
    // Every call either served in full or refused with the store's 503; nothing else.
    expect([...byStatus.keys()].sort()).toEqual([200, 503]);
    expect(byStatus.get(200)!.every((o) => o.complete)).toBe(true);
    for (const refused of byStatus.get(503)!)
      expect(refused.message).toMatch(/database cannot be reached|storage is full/);

    // Every kept settlement lands once the server is back: no hold stays open.
    await until("every hold to be resolved", async () => {
      const [open] = await rows<{ n: number }>(
        pool,
        `SELECT count(*)::int AS n FROM holds h
          WHERE NOT EXISTS (SELECT 1 FROM hold_resolutions r WHERE r.hold_id = h.id)`,
      );
      return open!.n === 0 ? true : undefined;
    });
    const holds = await rows<{ request_id: string; status: string; amount: string }>(
      pool,
      `SELECT h.request_id, r.status, r.amount::text AS amount
         FROM holds h JOIN hold_resolutions r ON r.hold_id = h.id WHERE h.account_id = $1`,
      [accountId],
    );
    const holdOf = new Map(holds.map((h) => [h.request_id, h]));
    // No acknowledged charge lost: every call served has a settled hold with a charge.
    for (const served of byStatus.get(200)!) {
      const hold = holdOf.get(served.requestId!);
      expect(hold, `hold of ${served.tag}`).toMatchObject({ status: "settled" });
      expect(BigInt(hold!.amount)).toBeGreaterThan(0n);
    }
    // A refused call was charged nothing.
    for (const refused of byStatus.get(503)!) {
      const hold = holdOf.get(refused.requestId!);
      if (hold !== undefined) expect(hold.amount).toBe("0");
    }
    // Nothing reached the provider without a durable hold: each request it received is a call
    // whose hold is in the database.
    const tagOf = new Map(outcomes.map((o) => [o.tag, o]));
    const forwarded = upstream.messageRequests().slice(before);
    for (const request of forwarded) {
      const tag = /outage (call-\d+) /.exec(request.rawBody)?.[1];
      const outcome = tag === undefined ? undefined : tagOf.get(tag);
      if (outcome === undefined) continue; // the probes of "serves again", each a 200
      expect(holdOf.has(outcome.requestId!), `hold of forwarded ${tag}`).toBe(true);
    }
    // The ledger's invariants (conservation included), and the balance is credit minus charges.
    expect(await auditPostgres(pool)).toEqual([]);
    const [charged] = await rows<{ sum: string }>(
      pool,
      `SELECT COALESCE(SUM(r.amount), 0)::text AS sum FROM holds h JOIN hold_resolutions r ON r.hold_id = h.id
        WHERE h.account_id = $1`,
      [accountId],
    );
    const { balances } = await createClient(
      BillingService,
      createConnectTransport({
        baseUrl: hosts[1]!.coreUrl,
        httpVersion: "2",
        interceptors: [
          (next) => (request) => {
            request.header.set("authorization", `Bearer ${ADMIN_TOKEN}`);
            return next(request);
          },
        ],
      }),
    ).getBalances({ accountId });
    expect(balances.find((b) => b.chain?.id === "base")?.available).toBe(CREDITED - BigInt(charged!.sum));
    expect(byStatus.get(503)!.length).toBeGreaterThan(0);
    // Some stream was running when the server went: its settle was refused, kept, and (above)
    // written once the server was back.
    expect(hosts.map((h) => h.stdout()).join("")).toMatch(/settling a stream failed/);
    console.info(
      `PostgreSQL restart under load: ${byStatus.get(200)!.length} calls served, ${byStatus.get(503)!.length} refused 503, ${forwarded.length} forwarded`,
    );
  }, 120_000);
});

describe("Redis away and back on two hosts", () => {
  it("counts limits per host while it is away, shares them again once it is back, and fails no call for it", async () => {
    const LIMIT = 4;
    const { hosts, secret } = await twoHosts({ TOLLGATE_RATE_LIMIT_RPM: String(LIMIT) });
    /** Calls alternating over both hosts until each host refused one: how many each served. */
    const served = async () => {
      const count = [0, 0];
      const refused = [false, false];
      for (let i = 0; !(refused[0] && refused[1]) && i < 40; i++) {
        const host = i % 2;
        if (refused[host]) continue;
        const outcome = await call(hosts, host, secret);
        expect([200, 429]).toContain(outcome.status);
        if (outcome.status === 200) count[host]!++;
        else refused[host] = true;
      }
      return count;
    };
    const redisUp = (host: GatewayProcess, ok: boolean) =>
      until(`host health to say redis ${ok ? "up" : "down"}`, async () => {
        const health = (await (await fetch(`${host.facadeUrl}/v1/health`)).json()) as {
          dependencies: { name: string; ok: boolean }[];
        };
        return health.dependencies.find((d) => d.name === "redis")?.ok === ok ? true : undefined;
      });

    // Shared: one budget across both hosts.
    const shared = await served();
    expect(shared[0]! + shared[1]!).toBe(LIMIT);

    const port = redis.port;
    await redis.stop();
    await Promise.all(hosts.map((h) => redisUp(h, false)));
    // Per host: each host counts in its own memory, from zero, the same limit.
    expect(await served()).toEqual([LIMIT, LIMIT]);
    for (const host of hosts)
      expect(host.stdout() + host.stderr()).toMatch(/rate limits are counted per host/);

    redis = await startRedis(port);
    await Promise.all(hosts.map((h) => redisUp(h, true)));
    // Back: the hosts reconnected on their own; a fresh Redis (no persistence) shares one budget again.
    const again = await served();
    expect(again[0]! + again[1]!).toBe(LIMIT);
  }, 120_000);
});
