/**
 * Health is cheap and says nothing private (issue 29, item 7): `tollgate dev` with its dev chains
 * (four chain probes, each several RPCs and a read of the settlement outbox) over a ledger with a
 * million settlement intents. 300 concurrent `GET /v1/health` run no probe (the core's round count,
 * read through the operator's HealthService.Inspect, moves only with the background interval);
 * the public answer names components and states only; the detail is the operator's.
 */
import Anthropic from "@anthropic-ai/sdk";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { afterAll, describe, expect, it } from "vitest";
import { BillingService } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { HealthService } from "../../src/gen/tollgate/health/v1/health_pb.js";
import { remoteCoreTransport } from "../../src/runtime/remote-core.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { cliJson, type GatewayProcess, startGateway, tempDir } from "../helpers/process.js";

const ADMIN_TOKEN = "health-test-operator-token-0123456789abcdef";
const INTENTS = 1_000_000;
const CONCURRENT_HEALTH = 300;
const KEYED_CALLS = 40;
const INTERVAL_S = 5;
const HELLO: Anthropic.MessageCreateParamsNonStreaming = {
  model: "model-haiku-4-5",
  max_tokens: 16,
  messages: [{ role: "user", content: "hello" }],
};

const dir = tempDir();
let gateway: GatewayProcess | undefined;
afterAll(async () => {
  await gateway?.stop();
  dir.cleanup();
});

/**
 * A million charged calls' settlement intents, written straight into the SQLite file in one
 * transaction (the outbox of a busy gateway). They are synthetic — no hold or charge behind them
 * (foreign keys off for this connection) — and wholly off-chain, so the dev chains' settlement
 * worker leaves them alone; the test removes them again before the ledger audit.
 */
function fillOutbox(): void {
  const db = openDatabase(dir.path);
  try {
    db.pragma("foreign_keys = OFF");
    const insert = db.prepare(
      `INSERT INTO settlement_intents (hold_id, account_id, chain, amount, onchain_amount, offchain_amount, created_at)
       VALUES (?, 'acct_load', 'base', 1, 0, 1, ?)`,
    );
    const now = Date.now();
    db.transaction(() => {
      for (let i = 0; i < INTENTS; i++) insert.run(`load_${i}`, now);
    })();
  } finally {
    db.close();
  }
}

function p50(samples: readonly number[]): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
}

async function keyedP50(sdk: Anthropic): Promise<number> {
  const samples: number[] = [];
  for (let i = 0; i < KEYED_CALLS; i++) {
    const started = performance.now();
    await sdk.messages.create(HELLO);
    samples.push(performance.now() - started);
  }
  return p50(samples);
}

describe("GET /v1/health on a ledger with a million settlement intents", () => {
  it("300 concurrent requests run no probe and no scan, say nothing private, and leave keyed calls alone", async () => {
    const env = {
      TOLLGATE_DATA_DIR: dir.path,
      TOLLGATE_DEV_CHAINS: "on",
      TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN,
      TOLLGATE_HEALTH_INTERVAL_S: String(INTERVAL_S),
      TOLLGATE_RATE_LIMIT_RPM: "1000000",
    };
    // The CLI creates the database (and the account) before the outbox is filled.
    const account = await cliJson<{ id: string }>(["account", "create"], env);
    const key = await cliJson<{ secret: string }>(["key", "create", "--account", account.id], env);
    fillOutbox();
    gateway = await startGateway(env, 90_000);
    const operator = remoteCoreTransport(gateway.coreUrl, ADMIN_TOKEN);
    await createClient(BillingService, operator).credit({
      accountId: account.id,
      chain: "base",
      amount: 100_000_000n,
      reason: "test funds",
    });
    const inspect = createClient(HealthService, operator);
    const sdk = new Anthropic({ apiKey: key.secret, baseURL: gateway.facadeUrl, maxRetries: 0 });

    // The first round has run (the first question waits for it) and every chain is in it.
    const first = await inspect.inspect({});
    expect(first.intervalMs).toBe(INTERVAL_S * 1000);
    expect(first.dependencies.map((d) => d.name)).toEqual(
      expect.arrayContaining(["database", "storage", "chain:base", "chain:solana"]),
    );

    const quiet = await keyedP50(sdk);
    const before = await inspect.inspect({});
    const started = performance.now();
    const [answers, busy] = await Promise.all([
      Promise.all(
        Array.from({ length: CONCURRENT_HEALTH }, async () => {
          const response = await fetch(`${gateway!.facadeUrl}/v1/health`);
          return {
            status: response.status,
            requestId: response.headers.get("x-request-id"),
            body: await response.text(),
          };
        }),
      ),
      keyedP50(sdk),
    ]);
    const elapsedMs = performance.now() - started;
    const after = await inspect.inspect({});

    // No probe ran for any request: the rounds moved only with the background interval.
    const rounds = Number(after.rounds - before.rounds);
    expect(rounds).toBeLessThanOrEqual(Math.floor(elapsedMs / (INTERVAL_S * 1000)) + 1);

    for (const answer of answers) {
      expect(answer.status).toBe(200);
      expect(answer.requestId).toMatch(/^req_/);
      const body = JSON.parse(answer.body) as {
        status: string;
        checked_at: string;
        dependencies: Record<string, unknown>[];
      };
      expect(["ok", "degraded"]).toContain(body.status);
      expect(Date.parse(body.checked_at)).toBeGreaterThan(0);
      // Names and states only: nothing else in any component.
      for (const d of body.dependencies)
        expect(Object.keys(d).sort()).toEqual(["name", "ok", "required", "status"]);
      // No treasury address (EVM or Solana), balance, backlog, error text or core URL.
      expect(answer.body).not.toMatch(/treasury|0x[0-9a-fA-F]{40}|holds|backlog|MiB|error|127\.0\.0\.1/);
      for (const report of after.dependencies) {
        if (report.detail.length > 8) expect(answer.body).not.toContain(report.detail);
      }
    }
    // The detail is the operator's: the treasury, its balance, the backlog, read by Inspect.
    const base = after.dependencies.find((d) => d.name === "chain:base")!;
    expect(base.detail).toMatch(/settlement backlog \d+\+?; treasury 0x[0-9a-fA-F]{40} holds /);
    const anonymous = await createClient(HealthService, remoteCoreTransport(gateway.coreUrl))
      .inspect({})
      .then(
        () => undefined,
        (error: unknown) => ConnectError.from(error),
      );
    expect(anonymous?.code).toBe(Code.Unauthenticated);
    const keyed = await createClient(HealthService, remoteCoreTransport(gateway.coreUrl, key.secret))
      .inspect({})
      .then(
        () => undefined,
        (error: unknown) => ConnectError.from(error),
      );
    expect(keyed?.code).toBe(Code.PermissionDenied);

    console.log(
      `health: ${CONCURRENT_HEALTH} concurrent requests over ${INTENTS.toLocaleString("en")} settlement intents ` +
        `in ${elapsedMs.toFixed(0)} ms, ${rounds} background round(s) meanwhile; keyed p50 ${quiet.toFixed(2)} ms ` +
        `alone, ${busy.toFixed(2)} ms during`,
    );

    expect(await gateway.stop()).toBe(0);
    gateway = undefined;
    // The synthetic intents out, the ledger of the real calls is sound.
    const db = openDatabase(dir.path);
    try {
      db.prepare("DELETE FROM settlement_intents WHERE hold_id LIKE 'load\\_%' ESCAPE '\\'").run();
      expect(auditLedger(db)).toEqual([]);
    } finally {
      db.close();
    }
  }, 300_000);
});
