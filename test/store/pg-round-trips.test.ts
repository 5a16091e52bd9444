import { join } from "node:path";
import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { type EvmDevChain, startEvmDevChain } from "../../src/dev/chains/evm/dev-chain.js";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { auditPostgres } from "../../src/store/postgres/audit.js";
import { openPostgres } from "../../src/store/postgres/database.js";
import { writeChainsFile } from "../helpers/evm.js";
import { type PostgresServer, startPostgres } from "../helpers/postgres.js";
import { cliJson, type GatewayProcess, startGateway, tempDir } from "../helpers/process.js";

// The statements a billed call sends PostgreSQL, counted by the server (pg_stat_statements, top
// level only: one statement is one round trip, `pg` sends one at a time): a `tollgate serve` host
// answering non-streaming keyed calls without an Idempotency-Key makes exactly two, the hold and
// the settlement; with a spend cap, still two; with an Idempotency-Key, the claim and its
// completion besides. docs/store.md, "Where a billed call's time goes", has the table.

let postgres: PostgresServer;
let upstream: DevUpstream;
let chain: EvmDevChain;
let host: GatewayProcess;
let admin: pg.Client;
let url: string;
let secret: string;
let accountId: string;
const dirs: { cleanup(): void }[] = [];

beforeAll(async () => {
  [postgres, chain] = await Promise.all([
    startPostgres({
      settings: ["shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=top"],
    }),
    startEvmDevChain({ id: "base", chainId: 8453 }),
  ]);
  upstream = await startDevUpstream();
  url = await postgres.freshDatabase();
  admin = new pg.Client({ connectionString: url });
  await admin.connect();
  await admin.query("CREATE EXTENSION pg_stat_statements");
  const dataDir = () => {
    const dir = tempDir();
    dirs.push(dir);
    return dir.path;
  };
  const chainsFile = join(dataDir(), "chains.json");
  writeChainsFile(chainsFile, chain);
  const env = {
    TOLLGATE_DATABASE_URL: url,
    TOLLGATE_ANTHROPIC_URL: upstream.url,
    TOLLGATE_CHAINS: chainsFile,
    TOLLGATE_DEV_CHAINS: "auto",
    TOLLGATE_MASTER_SECRET: "3c".repeat(32),
    // Nothing of the host's own in the counted window: no sweep, no health probe.
    TOLLGATE_HOLD_SWEEP_INTERVAL_MS: "3600000",
    TOLLGATE_HEALTH_INTERVAL_S: "3600",
  };
  const cli = { ...env, TOLLGATE_DATA_DIR: dataDir() };
  accountId = (await cliJson<{ id: string }>(["account", "create", "--name", "round-trips"], cli)).id;
  secret = (await cliJson<{ secret: string }>(["key", "create", "--account", accountId], cli)).secret;
  await cliJson(
    ["credit", "--account", accountId, "--chain", "base", "--amount", "10", "--reason", "test"],
    cli,
  );
  host = await startGateway({ ...env, TOLLGATE_DATA_DIR: dataDir() }, 30_000, "serve");
}, 120_000);
afterAll(async () => {
  await host?.stop("SIGTERM");
  await admin?.end();
  await upstream?.close();
  await Promise.all([postgres?.stop(), chain?.close()]);
  for (const dir of dirs) dir.cleanup();
});

/** A non-streaming call with the test's key; `idempotencyKey` adds the header. */
async function call(idempotencyKey?: string): Promise<{ status: number; text: string }> {
  const response = await fetch(`${host.facadeUrl}/v1/messages`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      "x-api-key": secret,
      "anthropic-version": "2023-06-01",
      ...(idempotencyKey === undefined ? {} : { "idempotency-key": idempotencyKey }),
    },
    body: JSON.stringify({
      model: "claude-haiku-4-5",
      max_tokens: 64,
      messages: [{ role: "user", content: "count my round trips" }],
    }),
  });
  return { status: response.status, text: await response.text() };
}

/**
 * The top-level statements the server ran since the last call, by text, with their counts; left
 * out: the idempotency sweep (on a timer of the host's own, not the call's) and the key's last-use
 * stamp (at most once a minute per key, whenever a slow run crosses the minute).
 */
async function statementsSince(): Promise<Map<string, number>> {
  const { rows } = await admin.query<{ query: string; calls: string }>(
    `SELECT query, calls::text FROM pg_stat_statements
      WHERE toplevel AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE 'DELETE FROM idempotency_keys WHERE expires_at%'
        AND query NOT LIKE 'UPDATE api_keys SET last_used_at%'`,
  );
  await admin.query("SELECT pg_stat_statements_reset()");
  return new Map(rows.map((r) => [r.query.replace(/\s+/g, " ").trim(), Number(r.calls)]));
}

/** How many of `statements` ran in all, and how many of those name `fn`. */
function count(statements: Map<string, number>, fn?: string): number {
  let n = 0;
  for (const [text, calls] of statements) if (fn === undefined || text.includes(fn)) n += calls;
  return n;
}

const CALLS = 10;

it("makes two round trips per billed call: the hold and the settlement, nothing read", async () => {
  // A first call fills the host's caches (key, billing row, caps) and stamps the key's last use.
  expect((await call()).status).toBe(200);
  await statementsSince();
  for (let i = 0; i < CALLS; i++) expect((await call()).status).toBe(200);
  const statements = await statementsSince();
  expect(count(statements, "tollgate_place_hold(")).toBe(CALLS);
  expect(count(statements, "tollgate_resolve(")).toBe(CALLS);
  expect([...statements.keys()], "nothing but the hold and the settlement").toHaveLength(2);
  expect(count(statements)).toBe(2 * CALLS);
}, 60_000);

it("keeps two round trips under a spend cap, and a cap set elsewhere bites at once", async () => {
  // As another host would: straight into the shared database; its announcement reaches this host.
  await admin.query(
    "INSERT INTO spend_caps (account_id, key_id, chain, period, amount, updated_at) VALUES ($1, '', 'base', 'day', $2, 0)",
    [accountId, (10n ** 12n).toString()],
  );
  await new Promise((resolve) => setTimeout(resolve, 300));
  // The first call after the announcement reads the account's billing row and caps again.
  expect((await call()).status).toBe(200);
  await statementsSince();
  for (let i = 0; i < CALLS; i++) expect((await call()).status).toBe(200);
  const statements = await statementsSince();
  expect(count(statements, "tollgate_place_capped_hold(")).toBe(CALLS);
  expect(count(statements, "tollgate_resolve(")).toBe(CALLS);
  expect(count(statements)).toBe(2 * CALLS);

  // A cap too small for any call, set elsewhere: refused at once, nothing charged.
  await admin.query("UPDATE spend_caps SET amount = 1 WHERE account_id = $1", [accountId]);
  await new Promise((resolve) => setTimeout(resolve, 300));
  const refused = await call();
  expect(refused.status).toBe(402);
  expect(refused.text).toMatch(/Spend cap reached/);
  await admin.query("DELETE FROM spend_caps WHERE account_id = $1", [accountId]);
  await new Promise((resolve) => setTimeout(resolve, 300));
  expect((await call()).status).toBe(200);
  const pool = await openPostgres(url, 1);
  try {
    expect(await auditPostgres(pool)).toEqual([]);
  } finally {
    await pool.end();
  }
}, 60_000);

it("adds the claim and its completion for a call with an Idempotency-Key", async () => {
  await statementsSince();
  for (let i = 0; i < CALLS; i++) expect((await call(`round-trips-${i}`)).status).toBe(200);
  const statements = await statementsSince();
  expect(count(statements, "tollgate_place_hold(")).toBe(CALLS);
  expect(count(statements, "tollgate_resolve(")).toBe(CALLS);
  expect(count(statements, "INSERT INTO idempotency_keys")).toBe(CALLS);
  expect(count(statements, "UPDATE idempotency_keys")).toBe(CALLS);
  expect(count(statements)).toBe(4 * CALLS);
}, 60_000);
