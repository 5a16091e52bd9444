import { join } from "node:path";
import { createClient } from "@connectrpc/connect";
import Database from "better-sqlite3";
import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { messageEvents, runCall } from "../../src/dev/provider/dev-messages.js";
import { readDevFeatures, SEARCHES_MARKER } from "../../src/dev/provider/dev-server-tools.js";
import { DevPromptCache } from "../../src/dev/provider/dev-tokens.js";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { AuthService } from "../../src/gen/tollgate/auth/v1/auth_pb.js";
import { BillingService, HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { remoteCoreTransport } from "../../src/runtime/remote-core.js";
import { auditPostgres } from "../../src/store/postgres/audit.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { DATABASE_FILE } from "../../src/store/sqlite/database.js";
import { encodeSseFrame } from "../../src/upstream/sse.js";
import { startPostgres } from "../helpers/postgres.js";
import { type GatewayProcess, startGateway, tempDir, until } from "../helpers/process.js";

// Issue 31: a crash (SIGKILL) between a granted raise and the settlement. A web search call is
// held pass by pass; the provider's stream (the dev upstream's own for three searches) stops
// after the second search's result and holds the connection open, so the hold has been raised
// twice, durably, and the call is not settled. `tollgate dev` is SIGKILLed there and started
// again on the same store with a short longest call: its sweeper expires the orphaned hold,
// releasing its amount and both raises, once; a further restart changes nothing.

const ADMIN_TOKEN = "raise-crash-operator-token-0123456789abcdef";
/** The wallet, in µ$ on base: covers the first pass and every raise of the call. */
const FUNDS = 10_000_000n;
/** The searches the provider's stream would make, and after how many results it stalls. */
const SEARCHES = 3;
const STALLED_AFTER = 2;
/** After the restart: a hold older than a second is orphaned, and the sweeper looks every 100 ms. */
const SWEEPING = { TOLLGATE_MAX_CALL_MS: "1000", TOLLGATE_HOLD_SWEEP_INTERVAL_MS: "100" };

/** Read-only queries on the gateway's store, from this process. */
interface LedgerReader {
  /** Runs `sql` (`?` placeholders) and answers its rows with every number as a bigint. */
  rows(sql: string, ...params: unknown[]): Promise<Record<string, unknown>[]>;
  audit(): Promise<string[]>;
  close(): Promise<void>;
}

/** The SQLite file in `dataDir`, opened read-only (the gateway is its only writer). */
function sqliteReader(dataDir: string): LedgerReader {
  const db = new Database(join(dataDir, DATABASE_FILE), { readonly: true, fileMustExist: true });
  return {
    rows: async (sql, ...params) =>
      db
        .prepare(sql)
        .safeIntegers(true)
        .all(...params) as Record<string, unknown>[],
    audit: async () => auditLedger(db),
    close: async () => {
      db.close();
    },
  };
}

/** A PostgreSQL database, on sessions that may only read. */
function postgresReader(url: string): LedgerReader {
  const pool = new pg.Pool({
    connectionString: url,
    max: 2,
    options: "-c default_transaction_read_only=on",
  });
  return {
    async rows(sql, ...params) {
      let n = 0;
      const { rows } = await pool.query({ text: sql.replace(/\?/g, () => `$${++n}`), values: params });
      // BIGINT comes back as a string, INTEGER as a number: both as SQLite's safe integers do.
      const big = (v: unknown) =>
        typeof v === "number" || /^-?\d+$/.test(String(v)) ? BigInt(String(v)) : v;
      return rows.map((row: Record<string, unknown>) =>
        Object.fromEntries(Object.entries(row).map(([column, v]) => [column, big(v)])),
      );
    },
    audit: () => auditPostgres(pool),
    close: () => pool.end(),
  };
}

/**
 * The dev upstream, except that a streamed call with `[searches:N]` gets the dev upstream's own
 * events cut after the {@link STALLED_AFTER}th search result, and then nothing: the connection
 * stays open, as a provider still working on the next pass would keep it.
 */
function stallingProvider(): Promise<DevUpstream> {
  const cache = new DevPromptCache();
  return startDevUpstream({
    script(request) {
      const body = request.body as Record<string, unknown> | undefined;
      if (body?.stream !== true || !SEARCHES_MARKER.test(JSON.stringify(body.messages))) return undefined;
      const events = messageEvents("msg_raise_crash", runCall(body, readDevFeatures(body), cache));
      let results = 0;
      const cut = events.findIndex((event) => {
        if (event.type === "content_block_start") {
          const block = event.content_block as { type: string };
          if (block.type === "web_search_tool_result") results += 1;
        }
        return results === STALLED_AFTER && event.type === "content_block_stop";
      });
      return {
        kind: "raw",
        headers: { "content-type": "text/event-stream; charset=utf-8" },
        chunks: events
          .slice(0, cut + 1)
          .map((event) => encodeSseFrame({ kind: "event", event: event.type, data: JSON.stringify(event) })),
        ending: "hang",
      };
    },
  });
}

/** The operator's core clients on a running gateway. */
function operator(gateway: GatewayProcess) {
  const transport = remoteCoreTransport(gateway.coreUrl, ADMIN_TOKEN);
  return { auth: createClient(AuthService, transport), billing: createClient(BillingService, transport) };
}

/** What a restart must leave as it was: every ledger row of money, in one order on both stores. */
async function ledgerSnapshot(reader: LedgerReader) {
  const sorted = async (sql: string) => {
    const key = (row: Record<string, unknown>) => JSON.stringify(Object.values(row).map(String));
    return (await reader.rows(sql)).sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
  };
  return {
    entries: await sorted(
      "SELECT id, debit_account, credit_account, amount, pending, kind FROM ledger_entries",
    ),
    // PostgreSQL spreads system accounts over shards: every row, whatever its columns.
    balances: await sorted("SELECT * FROM ledger_balances"),
    resolutions: await sorted("SELECT hold_id, status, amount, resolved_at FROM hold_resolutions"),
    raises: await sorted("SELECT hold_id, pass, amount FROM hold_raises"),
    open: await sorted("SELECT hold_id FROM open_holds"),
  };
}

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/**
 * The whole story on one store: `env` chooses it (a data directory, or a PostgreSQL URL too);
 * `openReader` reads it from this process once the first gateway has created it.
 */
async function crashBetweenRaiseAndSettlement(env: Record<string, string>, openReader: () => LedgerReader) {
  const provider = await stallingProvider();
  cleanups.push(() => provider.close());
  const start = async (extra: Record<string, string> = {}) => {
    const gateway = await startGateway({
      ...env,
      TOLLGATE_ANTHROPIC_URL: provider.url,
      TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN,
      ...extra,
    });
    cleanups.push(() => gateway.stop("SIGKILL"));
    return gateway;
  };

  // The longest call keeps its default (15 minutes): nothing but the crash ends this call.
  const first = await start();
  const reader = openReader();
  cleanups.push(() => reader.close());
  const { auth, billing } = operator(first);
  const { account } = await auth.createAccount({ name: "raise-crash" });
  const accountId = account!.id;
  const { secret } = await auth.createKey({ accountId, name: "raise-crash-key" });
  await billing.credit({ accountId, chain: "base", amount: FUNDS, reason: "test funds" });

  const answer = fetch(`${first.facadeUrl}/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": secret, "anthropic-version": "2023-06-01" },
    body: JSON.stringify({
      model: "model-sonnet-4-6",
      max_tokens: 1024,
      stream: true,
      messages: [{ role: "user", content: `search the web for tollgate pricing [searches:${SEARCHES}]` }],
      tools: [{ type: "web_search_20250305", name: "web_search", max_uses: 8 }],
    }),
  })
    .then((response) => response.text())
    .catch((error: unknown) => error);

  // Each search's server_tool_use raised the hold before it went out: both raises are committed.
  const raises = await until(
    "both raises to be committed",
    async () => {
      const rows = await reader.rows("SELECT hold_id, pass, amount FROM hold_raises ORDER BY pass");
      return rows.length === STALLED_AFTER ? rows : undefined;
    },
    20_000,
    () => first.stderr(),
  );
  const holds = await reader.rows("SELECT id, amount FROM holds");
  expect(holds).toHaveLength(1);
  const hold = { id: holds[0]!.id as string, amount: holds[0]!.amount as bigint };
  expect(raises.map((r) => [r.hold_id, r.pass])).toEqual([
    [hold.id, 2n],
    [hold.id, 3n],
  ]);
  const raised = raises.reduce((sum, r) => sum + (r.amount as bigint), 0n);
  expect(hold.amount).toBeGreaterThan(0n);
  expect(raised).toBeGreaterThan(0n);
  // The call runs on: its hold, raises included, is held from the wallet and nothing is settled.
  const [pending] = (await billing.listUsage({ accountId })).rows;
  expect(pending).toMatchObject({
    holdId: hold.id,
    status: HoldStatus.PENDING,
    heldAmount: hold.amount + raised,
  });
  expect(await available(billing, accountId)).toBe(FUNDS - hold.amount - raised);

  await first.stop("SIGKILL");
  expect(first.child.signalCode).toBe("SIGKILL");
  // The client's stream was cut by the kill, never ended.
  expect(await answer).toBeInstanceOf(TypeError);
  // Left by the crash: the hold open with its raises, nothing resolved.
  expect(await reader.rows("SELECT hold_id FROM open_holds")).toEqual([{ hold_id: hold.id }]);
  expect(await reader.rows("SELECT hold_id FROM hold_resolutions")).toEqual([]);

  // Restarted with a short longest call: the sweeper (at start-up, then every 100 ms) expires it.
  const second = await start(SWEEPING);
  await until(
    "the sweeper to expire the orphaned hold",
    async () => ((await reader.rows("SELECT hold_id FROM open_holds")).length === 0 ? true : undefined),
    20_000,
    () => second.stderr(),
  );
  // Resolved once, as the sweeper resolves: expired, nothing charged.
  expect(await reader.rows("SELECT hold_id, status, amount FROM hold_resolutions")).toEqual([
    { hold_id: hold.id, status: "expired", amount: 0n },
  ]);
  expect(await reader.rows("SELECT id FROM ledger_entries WHERE kind = 'charge'")).toEqual([]);
  // What it released is the hold and its raises: the wallet is whole again.
  const after = operator(second).billing;
  expect(await available(after, accountId)).toBe(FUNDS);
  const [expired] = (await after.listUsage({ accountId })).rows;
  expect(expired).toMatchObject({
    holdId: hold.id,
    status: HoldStatus.EXPIRED,
    heldAmount: hold.amount + raised,
    amount: 0n,
  });
  expect(await reader.audit()).toEqual([]);

  // Another crash and restart: its sweeps (the first before it was ready) find nothing to do.
  const settled = await ledgerSnapshot(reader);
  await second.stop("SIGKILL");
  const third = await start(SWEEPING);
  expect(await available(operator(third).billing, accountId)).toBe(FUNDS);
  expect(await third.stop("SIGTERM")).toBe(0);
  expect(await ledgerSnapshot(reader)).toEqual(settled);
  expect(await reader.audit()).toEqual([]);
}

/** The account's available balance on base, as the gateway reports it. */
async function available(
  billing: ReturnType<typeof operator>["billing"],
  accountId: string,
): Promise<bigint> {
  const { balances } = await billing.getBalances({ accountId });
  return balances.find((b) => b.chain?.id === "base")?.available ?? 0n;
}

describe("a crash (SIGKILL) between a granted raise and the settlement", () => {
  it("lets the sweeper resolve the hold with its raises, once (SQLite)", async () => {
    const dir = tempDir("tollgate-raise-crash-");
    cleanups.push(dir.cleanup);
    const dataDir = join(dir.path, "data");
    await crashBetweenRaiseAndSettlement({ TOLLGATE_DATA_DIR: dataDir }, () => sqliteReader(dataDir));
  });

  it("lets the sweeper resolve the hold with its raises, once (PostgreSQL)", async () => {
    const postgres = await startPostgres();
    cleanups.push(() => postgres.stop());
    const dir = tempDir("tollgate-raise-crash-");
    cleanups.push(dir.cleanup);
    const url = await postgres.freshDatabase();
    await crashBetweenRaiseAndSettlement({ TOLLGATE_DATA_DIR: dir.path, TOLLGATE_DATABASE_URL: url }, () =>
      postgresReader(url),
    );
  });
});
