import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { type EvmDevChain, startEvmDevChain } from "../../src/dev/chains/evm/dev-chain.js";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { auditPostgres } from "../../src/store/postgres/audit.js";
import { openPostgres } from "../../src/store/postgres/database.js";
import { writeChainsFile } from "../helpers/evm.js";
import { type Cleanups, cleanUp, cliAccount, ownDir, startHosts } from "../helpers/hosts.js";
import { type PostgresServer, startPostgres } from "../helpers/postgres.js";
import type { GatewayProcess } from "../helpers/process.js";

// Idempotency-Key across gateway hosts: two `tollgate serve` processes on one PostgreSQL get the
// same duplicate calls at once; exactly one call reaches the provider and is held, and every
// host answers later retries with its answer.

let postgres: PostgresServer;
let upstream: DevUpstream;
let chain: EvmDevChain;
const hosts: GatewayProcess[] = [];
const suite: Cleanups = [];
let env: Record<string, string>;
let secret: string;
let accountId: string;

beforeAll(async () => {
  [postgres, chain] = await Promise.all([startPostgres(), startEvmDevChain({ id: "base", chainId: 8453 })]);
  // Slow streams: every duplicate arrives while the first call runs.
  upstream = await startDevUpstream({ eventDelayMs: 100 });
  env = { TOLLGATE_DATABASE_URL: await postgres.freshDatabase(), TOLLGATE_ANTHROPIC_URL: upstream.url };
  const chainsFile = join(ownDir(suite), "chains.json");
  writeChainsFile(chainsFile, chain);
  env = {
    ...env,
    TOLLGATE_CHAINS: chainsFile,
    TOLLGATE_DEV_CHAINS: "auto",
    TOLLGATE_MASTER_SECRET: "6d".repeat(32),
  };
  ({ id: accountId, secret } = await cliAccount(env, suite, "idempotent", "10"));
  hosts.push(...(await startHosts(2, env, suite, { stopSignal: "SIGTERM" })));
}, 120_000);
afterAll(async () => {
  // The hosts stopped and the directories removed, last first.
  await cleanUp(suite);
  await upstream?.close();
  await Promise.all([postgres?.stop(), chain?.close()]);
});

function post(host: GatewayProcess, key: string) {
  return fetch(`${host.facadeUrl}/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": secret, "idempotency-key": key },
    body: JSON.stringify({
      model: "model-haiku-4-5",
      max_tokens: 64,
      stream: true,
      messages: [{ role: "user", content: `hosts ${key}` }],
    }),
  });
}

it("lets one of many duplicates across two hosts run, and replays it on both", async () => {
  const key = `hosts-${Date.now()}`;
  const answers = await Promise.all(
    Array.from({ length: 20 }, async (_, i) => {
      const response = await post(hosts[i % 2]!, key);
      const replayed = response.headers.get("idempotent-replayed") === "true";
      return { status: response.status, replayed, text: await response.text() };
    }),
  );
  const ran = answers.filter((answer) => answer.status === 200 && !answer.replayed);
  expect(ran).toHaveLength(1);
  // Every other one a 409, or, if it came after the first call ended (a loaded machine), its replay.
  expect(answers.filter((answer) => answer.status === 409 || answer.replayed)).toHaveLength(19);
  expect(upstream.messageRequests().filter((r) => r.rawBody.includes(key))).toHaveLength(1);
  for (const host of hosts) {
    const replay = await post(host, key);
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(await replay.text()).toBe(ran[0]!.text.replace(/event: ping\ndata: [^\n]*\n\n/g, ""));
  }
  const pool = await openPostgres(env.TOLLGATE_DATABASE_URL!, 1);
  try {
    const { rows } = await pool.query("SELECT count(*)::int AS n FROM holds WHERE account_id = $1", [
      accountId,
    ]);
    expect(rows[0]).toEqual({ n: 1 });
    expect(await auditPostgres(pool)).toEqual([]);
  } finally {
    await pool.end();
  }
}, 60_000);
