import { createHash } from "node:crypto";
import { join } from "node:path";
import Database from "better-sqlite3";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DepositToCredit, NewHold } from "../../src/core/ports/ledger.js";
import { SYSTEM_MANUAL_CREDIT } from "../../src/core/ports/ledger.js";
import { PgAccountStore } from "../../src/store/postgres/accounts.js";
import { auditPostgres } from "../../src/store/postgres/audit.js";
import { openPostgres } from "../../src/store/postgres/database.js";
import { PgLedger } from "../../src/store/postgres/ledger.js";
import { migrateStore } from "../../src/store/postgres/migrate-store.js";
import { AuthRepository } from "../../src/store/sqlite/accounts.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { SqliteChainWork } from "../../src/store/sqlite/chain-work.js";
import { type Db, openDatabase } from "../../src/store/sqlite/database.js";
import { openSqliteLedger } from "../../src/store/sqlite/ledger-store.js";
import { migrations } from "../../src/store/sqlite/migrations.js";
import { SessionRepository } from "../../src/store/sqlite/sessions.js";
import { requireBuild } from "../billing/child-process.js";
import { type PostgresServer, startPostgres } from "../helpers/postgres.js";
import { runCli, tempDir } from "../helpers/process.js";

// `tollgate migrate-store` as an operator runs it: the built CLI in a child process, from a SQLite
// data dir filled by the real store code (accounts, keys, sessions, credits, holds in every state,
// deposits, a withdrawal, batched settlements) into a real PostgreSQL; then compared here from
// both sides independently of the command's own verification.

const NOW = 1_750_000_000_000;
const USAGE = {
  inputTokens: 900n,
  outputTokens: 120n,
  cacheWrite5mTokens: 0n,
  cacheWrite1hTokens: 0n,
  cacheReadTokens: 10n,
  images: 0,
};

let server: PostgresServer;
let dir: ReturnType<typeof tempDir>;
let dataDir: string;
let ids: { alice: string; bob: string; wallet: string };
const pools: pg.Pool[] = [];

beforeAll(async () => {
  requireBuild();
  dir = tempDir("tollgate-migrate-");
  dataDir = join(dir.path, "data");
  ids = await populate(dataDir);
  server = await startPostgres();
});

afterAll(async () => {
  for (const pool of pools) await pool.end();
  await server?.stop();
  dir?.cleanup();
});

/** Fills a SQLite data dir through the store's own code, the way the gateway and worker write it. */
async function populate(at: string): Promise<{ alice: string; bob: string; wallet: string }> {
  const db = openDatabase(at);
  const auth = new AuthRepository(db);
  const alice = auth.createAccount("acct_alice", "alice", NOW).id;
  const bob = auth.createAccount("acct_bob", "bob", NOW + 1).id;
  const carol = auth.createAccount("acct_carol", "carol", NOW + 2).id;
  const digest = (s: string) => createHash("sha256").update(s).digest();
  await auth.insertKey("key_a1", alice, "laptop", "tg_a1", digest("a1"), NOW);
  await auth.insertKey("key_a2", alice, "ci", "tg_a2", digest("a2"), NOW + 5);
  await auth.insertKey("key_b1", bob, "", "tg_b1", digest("b1"), NOW + 6);
  await auth.touchKey("key_a1", NOW + 100, NOW + 50);
  await auth.revokeKey("key_a2", NOW + 200);
  await auth.setAccountStatus(carol, "suspended", "chargeback");

  const sessions = new SessionRepository(db);
  await sessions.insertNonce("nonce_used", NOW + 60_000);
  await sessions.insertNonce("nonce_fresh", NOW + 60_000);
  await sessions.useNonce("nonce_used", NOW);
  const wallet = (
    await sessions.accountForIdentity("evm", "0xw4llet", { id: "acct_wallet", name: "0xw4llet" }, NOW + 3)
  ).accountId;
  await sessions.linkIdentity("solana", "So1anaW4llet", alice, NOW + 4);
  await sessions.insertSession("sess_1", digest("s1"), wallet, NOW, NOW + 86_400_000);
  await sessions.insertSession("sess_2", digest("s2"), alice, NOW, NOW + 86_400_000);
  await sessions.endSession("sess_2", NOW + 10);

  const ledger = await openSqliteLedger(db, at, { thread: false });
  const chains = new SqliteChainWork(db);
  await ledger.setDefaultChain(alice, "base", NOW);
  await ledger.credit({
    entryId: "credit_alice",
    accountId: alice,
    chain: "base",
    amount: 5_000_000n,
    from: SYSTEM_MANUAL_CREDIT,
    memo: "welcome",
    createdAt: NOW,
  });
  await ledger.credit({
    entryId: "credit_bob",
    accountId: bob,
    chain: "solana",
    amount: 90_000n,
    from: SYSTEM_MANUAL_CREDIT,
    memo: "promo",
    createdAt: NOW,
  });

  // Deposits, credited at finality with the cursor; one more seen above the finality line.
  await chains.saveDepositAddress("evm", alice, "0xa11ce", NOW);
  await chains.saveDepositAddress("solana", bob, "B0bDep0sit", NOW);
  const deposit = (accountId: string, to: string, tx: string, amount: bigint): DepositToCredit => ({
    txHash: tx,
    index: 0,
    position: 7n,
    from: "0xsender",
    to,
    accountId,
    onchainAmount: amount * 1000n,
    amount,
  });
  expect(await chains.recordScan("base", 0n, 100n, [deposit(alice, "0xa11ce", "0xd1", 200_000n)], NOW)).toBe(
    true,
  );
  expect(await chains.recordScan("solana", 0n, 50n, [deposit(bob, "B0bDep0sit", "sig1", 30_000n)], NOW)).toBe(
    true,
  );
  await chains.replacePending("base", [deposit(alice, "0xa11ce", "0xd2", 1n)], NOW);

  // A withdrawal out of the deposit-backed funds, then a transfer's life: prepared, confirmed.
  const withdrawal = await ledger.withdraw({
    id: "wd_1",
    accountId: alice,
    chain: "base",
    to: "0xdest",
    amount: 20_000n,
    fee: 1_000n,
    now: NOW + 10,
  });
  expect(withdrawal.kind).toBe("written");

  // Holds in every state, enough for the copy to take several batches of ledger entries.
  const hold = (i: number, accountId: string, chain: string, createdAt = NOW + 20): NewHold => ({
    id: `hold_${chain}_${i}`,
    accountId,
    requestId: `req_${chain}_${i}`,
    keyId: accountId === alice ? "key_a1" : "key_b1",
    chain,
    amount: 1_000n + BigInt(i),
    callKind: i % 10 === 0 ? "image" : "text",
    model: i % 10 === 0 ? "image-model" : "model-haiku-4-5",
    inputTokens: 1_000n,
    maxTokens: 500n,
    imageSize: i % 10 === 0 ? "1024x1024" : "",
    imageCount: i % 10 === 0 ? 1 : 0,
    createdAt,
  });
  const placed = await Promise.all([
    ...Array.from({ length: 700 }, (_, i) =>
      ledger.placeHold(hold(i, alice, "base", i >= 650 ? 1_000 : NOW)),
    ),
    ...Array.from({ length: 20 }, (_, i) => ledger.placeHold(hold(i, bob, "solana"))),
  ]);
  expect(placed.every((p) => p.kind === "placed")).toBe(true);
  // Raised holds (one pass or two) among those settled, released, left pending and expired.
  const raised = await Promise.all(
    [0, 1, 500, 600, 601, 602, 603, 650, 651].flatMap((i) => [
      ledger.raiseHold({ holdId: `hold_base_${i}`, pass: 2, amount: 100n + BigInt(i), createdAt: NOW + 25 }),
      ...(i % 2 === 0
        ? [ledger.raiseHold({ holdId: `hold_base_${i}`, pass: 3, amount: 7n, createdAt: NOW + 26 })]
        : []),
    ]),
  );
  expect(raised.every((r) => r.kind === "raised")).toBe(true);
  const charges = JSON.stringify({ lines: [{ kind: "input", amount: "300" }] });
  await Promise.all([
    ...Array.from({ length: 500 }, (_, i) =>
      ledger.settle(`hold_base_${i}`, 300n + BigInt(i), USAGE, NOW + 30, charges),
    ),
    ...Array.from({ length: 100 }, (_, i) => ledger.void(`hold_base_${500 + i}`, "released", NOW + 30)),
    ...Array.from({ length: 10 }, (_, i) => ledger.settle(`hold_solana_${i}`, 500n, USAGE, NOW + 30, "")),
  ]);
  // hold_base_600..649 stay pending; 650..699 were placed long ago and expire.
  expect(await ledger.expireHolds(2_000, NOW + 40, 100)).toBe(50);

  // The worker's settlement: the charged calls' onchain parts batched per (account, chain).
  let transfer = 0;
  const newId = () => `stl_${++transfer}`;
  expect(
    await chains.batchIntents("base", false, NOW + 1_000, "0xtreasury", newId, NOW + 50),
  ).toBeGreaterThan(0);
  expect(
    await chains.batchIntents("solana", false, NOW + 1_000, "Treasury", newId, NOW + 50),
  ).toBeGreaterThan(0);
  await chains.markPrepared("stl_1", "0xhash1", "0xraw1", NOW + 60);
  await chains.markConfirmed("stl_1", NOW + 70);

  // A keyless payer's x402 payments: one closed with what its call did not spend returned, one open.
  const x402 = (id: string, holdId: string, authorised: bigint) => ({
    id,
    holdId,
    accountId: wallet,
    chain: "base",
    scheme: "upto" as const,
    payer: "0xw4llet",
    authorised,
    payload: `{"x402Version":2,"id":"${id}"}`,
    createdAt: NOW + 80,
  });
  expect(await ledger.authoriseX402(x402("pay_closed", "hold_x402_closed", 5_000n))).toBe("authorised");
  const paid = { ...hold(0, wallet, "base", NOW + 80), id: "hold_x402_closed", requestId: "req_x402_closed" };
  expect((await ledger.placeHold({ ...paid, amount: 5_000n })).kind).toBe("placed");
  expect((await ledger.settle("hold_x402_closed", 1_200n, USAGE, NOW + 81, "")).kind).toBe("resolved");
  expect(
    await ledger.closeX402({
      id: "pay_closed",
      status: "settled",
      settled: 1_200n,
      txHash: "0xx402",
      error: "",
      returned: 3_800n,
      now: NOW + 82,
    }),
  ).toBe("closed");
  expect(await ledger.authoriseX402(x402("pay_open", "hold_x402_open", 700n))).toBe("authorised");
  // One collected (its call's settle not yet confirmed), one failed that an operator cleared.
  expect(await ledger.authoriseX402(x402("pay_collected", "hold_x402_collected", 900n))).toBe("authorised");
  expect(
    await ledger.recordX402Collection({
      id: "pay_collected",
      collected: 400n,
      txHash: "0xc0llected",
      now: NOW + 83,
    }),
  ).toBe("recorded");
  expect(await ledger.authoriseX402(x402("pay_failed", "hold_x402_failed", 300n))).toBe("authorised");
  expect(
    await ledger.closeX402({
      id: "pay_failed",
      status: "failed",
      settled: 0n,
      txHash: "",
      error: "transfer reverted",
      returned: 300n,
      now: NOW + 84,
    }),
  ).toBe("closed");
  expect(await ledger.clearFailedX402("0xw4llet", NOW + 85)).toBe(1);

  await ledger.close();
  expect(auditLedger(db)).toEqual([]);
  db.close();
  return { alice, bob, wallet };
}

/** A pool on a fresh, migrated database, ended after the suite. */
async function freshPool(): Promise<{ url: string; pool: pg.Pool }> {
  const url = await server.freshDatabase();
  const pool = await openPostgres(url, 4);
  pools.push(pool);
  return { url, pool };
}

function sqliteTables(db: Db): string[] {
  return db
    .prepare<[], string>("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
    .pluck()
    .all();
}

/** Every row of a SQLite table as text, the way PostgreSQL's text output would show it. */
function sqliteRows(db: Db, table: string): string[] {
  const withSeq = table === "accounts" || table === "api_keys" ? "rowid AS seq, " : "";
  const rows = db.prepare(`SELECT ${withSeq}* FROM ${table}`).safeIntegers(true).all() as Record<
    string,
    unknown
  >[];
  return rows.map((row) => canonical(row)).sort();
}

/**
 * Every row of a PostgreSQL table as text; booleans as 1/0, bytea as hex; a balance as the sum of
 * its shard rows.
 */
async function postgresRows(pool: pg.Pool, table: string): Promise<string[]> {
  const { rows } = await pool.query({
    text:
      table === "ledger_balances"
        ? `SELECT account, chain, bool_and(may_overdraw) AS may_overdraw, SUM(debits_pending) AS debits_pending,
                  SUM(debits_posted) AS debits_posted, SUM(credits_pending) AS credits_pending,
                  SUM(credits_posted) AS credits_posted
             FROM ledger_totals GROUP BY account, chain`
        : `SELECT * FROM ${table}`,
    types: { getTypeParser: () => (value: string) => value },
  });
  return rows
    .map((row: Record<string, string | null>) => {
      const out: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(row)) {
        out[k] = v === "t" && BOOLEANS.has(k) ? "1" : v === "f" && BOOLEANS.has(k) ? "0" : v;
        if (k === "digest" && typeof v === "string") out[k] = v.replace(/^\\x/, "");
      }
      return canonical(out);
    })
    .sort();
}

const BOOLEANS = new Set(["pending", "may_overdraw"]);

function canonical(row: Record<string, unknown>): string {
  const keys = Object.keys(row).sort();
  return JSON.stringify(
    keys.map((k) => {
      const v = row[k];
      return [k, Buffer.isBuffer(v) ? v.toString("hex") : v === null ? null : String(v)];
    }),
  );
}

/**
 * Every (account, chain) balance of each store: SQLite's row, PostgreSQL's sum over shards (with
 * system:revenue's part on the paying accounts' rows: ledger_totals, migration 18).
 */
async function bothBalances(db: Db, pool: pg.Pool) {
  const sqlite = db
    .prepare(
      "SELECT account, chain, debits_pending, debits_posted, credits_pending, credits_posted FROM ledger_balances",
    )
    .safeIntegers(true)
    .all()
    .map((r) => canonical(r as Record<string, unknown>))
    .sort();
  const { rows } = await pool.query(
    `SELECT account, chain, SUM(debits_pending)::text AS debits_pending, SUM(debits_posted)::text AS debits_posted,
            SUM(credits_pending)::text AS credits_pending, SUM(credits_posted)::text AS credits_posted
       FROM ledger_totals GROUP BY account, chain`,
  );
  return { sqlite, postgres: rows.map((r) => canonical(r)).sort() };
}

function env(extra: Record<string, string> = {}): Record<string, string> {
  return { TOLLGATE_DATA_DIR: dataDir, ...extra };
}

interface JsonReport {
  rowsCopied: number;
  revenueRows: number;
  x402Rows: number;
  tables: { table: string; rows: number }[];
  sequences: { table: string; column: string; next: string }[];
  verification: {
    ok: boolean;
    rowCounts: { table: string; sqlite: number; postgres: number }[];
    balancesCompared: number;
    balancesMismatched: number;
    balanceMismatches: {
      account: string;
      chain: string;
      sqlite?: Record<string, string>;
      postgres?: Record<string, string>;
    }[];
    audit: { sqlite: string[]; postgres: string[] };
    mismatches: string[];
  };
}

describe("tollgate migrate-store", () => {
  let target: { url: string; pool: pg.Pool };

  it("copies every table into an empty PostgreSQL, keeps every row, balance and audit, and says so", async () => {
    target = await freshPool();
    const result = await runCli(["migrate-store", "--to", target.url, "--json"], env());
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    const report = JSON.parse(result.stdout) as JsonReport;
    expect(report.verification.ok).toBe(true);
    expect(report.verification.mismatches).toEqual([]);

    const db = new Database(join(dataDir, "tollgate.db"), { readonly: true });
    try {
      const tables = sqliteTables(db);
      expect(report.tables.map((t) => t.table).sort()).toEqual([...tables].sort());
      // Enough entries that the copy took more than one batch.
      expect(report.tables.find((t) => t.table === "ledger_entries")!.rows).toBeGreaterThan(1_000);
      for (const table of tables) {
        const sqliteCount = Number(db.prepare(`SELECT COUNT(*) FROM ${table}`).pluck().get());
        const { rows } = await target.pool.query(
          table === "ledger_balances"
            ? "SELECT COUNT(*)::int AS n FROM ledger_balances WHERE shard = 0"
            : `SELECT COUNT(*)::int AS n FROM ${table}`,
        );
        expect(rows[0].n, table).toBe(sqliteCount);
        expect(report.tables.find((t) => t.table === table)?.rows, table).toBe(sqliteCount);
        // Not just as many rows: the same rows, column by column (seq = SQLite's rowid where
        // SQLite has no seq column).
        expect(await postgresRows(target.pool, table), table).toEqual(sqliteRows(db, table));
      }
      // The 50 open holds' pending credits (their raises' with them) sit on their accounts' own
      // rows (revenue_pending), as PgLedger places them (migration 18), none on system:revenue's;
      // every row on shard 0.
      const revenue = await target.pool.query(
        `SELECT b.account, b.chain, b.revenue_pending::text AS pending,
                (SELECT COALESCE(SUM(h.amount + o.raised), 0)::text FROM holds h JOIN open_holds o ON o.hold_id = h.id
                  WHERE h.account_id = b.account AND h.chain = b.chain) AS open
           FROM ledger_balances b WHERE b.revenue_pending <> 0 OR b.revenue_posted <> 0`,
      );
      expect(revenue.rows.length).toBeGreaterThan(0);
      expect(report.revenueRows).toBe(revenue.rows.length);
      for (const row of revenue.rows) expect(row.pending, `${row.account} on ${row.chain}`).toBe(row.open);
      const open = await target.pool.query(
        `SELECT (SELECT SUM(h.amount + o.raised) FROM open_holds o JOIN holds h ON h.id = o.hold_id)::text AS held,
                (SELECT SUM(revenue_pending) FROM ledger_balances)::text AS pending`,
      );
      expect(open.rows[0].pending).toBe(open.rows[0].held);
      const systemPending = await target.pool.query(
        "SELECT COUNT(*)::int AS n FROM ledger_balances WHERE shard > 0 OR (account = 'system:revenue' AND credits_pending <> 0)",
      );
      expect(systemPending.rows[0].n).toBe(0);
      // The x402 payments' system side sits on the payer's own row (x402_in: every payment's
      // credit; x402_out: the returns of the closed ones), as PgX402 places it (migration 19);
      // system:x402's own row keeps nothing of them.
      const x402 = await target.pool.query(
        `SELECT b.account, b.x402_in::text AS "in", b.x402_out::text AS out,
                (SELECT SUM(p.authorised)::text FROM x402_payments p WHERE p.account_id = b.account) AS authorised
           FROM ledger_balances b WHERE b.x402_in <> 0 OR b.x402_out <> 0 OR b.account = 'system:x402'
          ORDER BY b.account`,
      );
      expect(x402.rows).toEqual([
        { account: ids.wallet, in: "6900", out: "4100", authorised: "6900" },
        { account: "system:x402", in: "0", out: "0", authorised: null },
      ]);
      expect(report.x402Rows).toBe(1);
      const x402System = await target.pool.query(
        "SELECT debits_posted::text AS dpo, credits_posted::text AS cpo FROM ledger_balances WHERE account = 'system:x402'",
      );
      expect(x402System.rows).toEqual([{ dpo: "0", cpo: "0" }]);
      const balances = await bothBalances(db, target.pool);
      expect(balances.sqlite.length).toBeGreaterThan(6);
      expect(balances.postgres).toEqual(balances.sqlite);
      expect(report.verification.balancesCompared).toBe(balances.sqlite.length);
      expect(auditLedger(db)).toEqual([]);
      expect(await auditPostgres(target.pool)).toEqual([]);
      expect(report.verification.audit).toEqual({ sqlite: [], postgres: [] });
    } finally {
      db.close();
    }

    const human = await runCli(["migrate-store", "--help"], env());
    expect(human.code).toBe(0);
    expect(human.stdout).toMatch(/Stop the gateway and the worker first/);
  });

  it("moves each sequence past the copied rows: what PostgreSQL inserts next never collides", async () => {
    const { pool } = target;
    const max = async (table: string) =>
      Number((await pool.query(`SELECT MAX(seq)::text AS m FROM ${table}`)).rows[0].m);
    const copiedAccounts = await max("accounts");
    const copiedEntries = await max("ledger_entries");
    expect(copiedAccounts).toBe(4);
    await new PgAccountStore(pool).insertAccount("acct_after", "after the move", NOW + 1_000);
    const { rows } = await pool.query("SELECT seq FROM accounts WHERE id = 'acct_after'");
    expect(rows[0].seq).toBe(copiedAccounts + 1);
    const credited = await new PgLedger(pool).credit({
      entryId: "credit_after",
      accountId: "acct_after",
      chain: "base",
      amount: 5n,
      from: SYSTEM_MANUAL_CREDIT,
      memo: "after the move",
      createdAt: NOW + 1_000,
    });
    expect(credited.kind).toBe("credited");
    const entry = await pool.query("SELECT seq FROM ledger_entries WHERE id = 'credit_after'");
    expect(entry.rows[0].seq).toBe(copiedEntries + 1);
  });

  it("leaves a ledger PostgreSQL's own store carries on: the copied pending holds settle, release and expire", async () => {
    // PgLedger keeps a hold's pending amount on its account's own row (revenue_pending) and takes
    // it back from there when the hold resolves: the copy must have put it there.
    const { pool } = target;
    const ledger = new PgLedger(pool);
    // hold_base_600 holds 1,600 + its raises of 700 and 7: settled above its own amount.
    expect(
      await ledger.raiseHold({ holdId: "hold_base_600", pass: 4, amount: 50n, createdAt: NOW + 1_999 }),
    ).toMatchObject({
      kind: "raised",
      state: { hold: { raised: 757n } },
    });
    const settled = await ledger.settle("hold_base_600", 2_000n, USAGE, NOW + 2_000, "");
    expect(settled.kind).toBe("resolved");
    expect((await ledger.void("hold_base_601", "released", NOW + 2_000)).kind).toBe("resolved");
    expect(await ledger.expireHolds(NOW + 1, NOW + 2_000, 100)).toBe(48);
    const placed = await ledger.placeHold({
      id: "hold_after",
      accountId: ids.alice,
      requestId: "req_after",
      keyId: "key_a1",
      chain: "base",
      amount: 2_000n,
      callKind: "text",
      model: "model-haiku-4-5",
      inputTokens: 1_000n,
      maxTokens: 500n,
      imageSize: "",
      imageCount: 0,
      createdAt: NOW + 3_000,
    });
    expect(placed.kind).toBe("placed");
    expect((await ledger.settle("hold_after", 1_500n, USAGE, NOW + 3_000, "")).kind).toBe("resolved");
    // The open x402 payment closes there, its return posted from the copied balance.
    expect(
      await ledger.closeX402({
        id: "pay_open",
        status: "unused",
        settled: 0n,
        txHash: "",
        error: "",
        returned: 700n,
        now: NOW + 3_000,
      }),
    ).toBe("closed");
    expect((await ledger.x402Payments(["hold_x402_closed"])).get("hold_x402_closed")).toMatchObject({
      status: "settled",
      authorised: 5_000n,
      settled: 1_200n,
      closedAt: NOW + 82,
    });
    const x402 = await ledger.x402Payments(["hold_x402_collected", "hold_x402_failed"]);
    expect(x402.get("hold_x402_collected")).toMatchObject({
      status: "collected",
      settled: 400n,
      txHash: "0xc0llected",
      collectedAt: NOW + 83,
    });
    expect(x402.get("hold_x402_failed")).toMatchObject({ status: "failed", clearedAt: NOW + 85 });
    expect((await ledger.openX402Payments(NOW + 3_000, 10)).map((p) => p.id)).toEqual(["pay_collected"]);
    expect(await ledger.failedX402Payments("0xw4llet", 10)).toEqual([]);
    expect(await auditPostgres(pool)).toEqual([]);
    const alice = await ledger.balance(ids.alice, "base");
    expect(alice.debitsPending).toBe(0n);
    const revenue = await pool.query(
      "SELECT SUM(credits_pending)::text AS pending FROM ledger_totals WHERE account = 'system:revenue' AND chain = 'base'",
    );
    expect(revenue.rows[0].pending).toBe("0");
  });

  it("refuses a second run into the now non-empty target, naming why (TOLLGATE_DATABASE_URL)", async () => {
    const before = Number(
      (await target.pool.query("SELECT COUNT(*)::int AS n FROM ledger_entries")).rows[0].n,
    );
    const result = await runCli(["migrate-store"], env({ TOLLGATE_DATABASE_URL: target.url }));
    expect(result.code).not.toBe(0);
    expect(result.stderr).toMatch(/already holds data \(in accounts, api_keys.*ledger_entries/);
    expect(result.stdout).toBe("");
    const after = Number(
      (await target.pool.query("SELECT COUNT(*)::int AS n FROM ledger_entries")).rows[0].n,
    );
    expect(after).toBe(before);
  });

  it("reports a copy that differs from its source as a mismatch and exits non-zero", async () => {
    // The target is empty but rigged: as rows arrive, one balance gains a unit and one nonce is
    // dropped. The copy commits; the verification must notice both, in every way it looks.
    const { url, pool } = await freshPool();
    await pool.query(`
      CREATE FUNCTION rig() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF TG_TABLE_NAME = 'sign_in_nonces' THEN
            RETURN CASE WHEN NEW.nonce = 'nonce_fresh' THEN NULL ELSE NEW END;
          END IF;
          IF NEW.account = '${ids.bob}' AND NEW.chain = 'solana' THEN
            NEW.credits_posted := NEW.credits_posted + 1;
          END IF;
          RETURN NEW;
        END $$;
      CREATE TRIGGER rig BEFORE INSERT ON ledger_balances FOR EACH ROW EXECUTE FUNCTION rig();
      CREATE TRIGGER rig BEFORE INSERT ON sign_in_nonces FOR EACH ROW EXECUTE FUNCTION rig();
    `);
    const result = await runCli(["migrate-store", "--to", url, "--json"], env());
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/the copy does not match its source/);
    const report = JSON.parse(result.stdout) as JsonReport;
    const v = report.verification;
    expect(v.ok).toBe(false);
    expect(v.rowCounts.find((c) => c.table === "sign_in_nonces")).toEqual({
      table: "sign_in_nonces",
      sqlite: 2,
      postgres: 1,
    });
    expect(v.balancesMismatched).toBe(1);
    expect(v.balanceMismatches).toHaveLength(1);
    const [bob] = v.balanceMismatches;
    expect(bob).toMatchObject({ account: ids.bob, chain: "solana" });
    // 90 000 credited by hand, 30 000 deposited; the rig's one unit only in PostgreSQL.
    expect(bob!.sqlite).toMatchObject({ creditsPosted: "120000" });
    expect(bob!.postgres).toEqual({ ...bob!.sqlite, creditsPosted: "120001" });
    expect(v.audit.sqlite).toEqual([]);
    expect(v.audit.postgres.join("\n")).toMatch(
      new RegExp(`${ids.bob} on solana: creditsPosted is 120001, replay gives 120000`),
    );
    expect(v.mismatches.join("\n")).toMatch(/sign_in_nonces: 2 rows in SQLite, 1 in PostgreSQL/);

    expect(v.mismatches.join("\n")).toMatch(
      new RegExp(`audit finds only in PostgreSQL: ${ids.bob} on solana: creditsPosted`),
    );
  });

  it("reports a copy whose only difference is one the audit finds, as a person reads it", async () => {
    // Every count and balance equal; one call's settlement split moved by a unit (onchain →
    // off-chain), which only the audit's onchain checks see.
    const { url, pool } = await freshPool();
    await pool.query(
      `CREATE FUNCTION rig() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           NEW.onchain_amount := NEW.onchain_amount - 1;
           NEW.offchain_amount := NEW.offchain_amount + 1;
           RETURN NEW;
         END $$;
       CREATE TRIGGER rig BEFORE INSERT ON settlement_intents FOR EACH ROW
         WHEN (NEW.hold_id = 'hold_base_0' AND NEW.onchain_amount > 0) EXECUTE FUNCTION rig();`,
    );
    const result = await runCli(["migrate-store", "--to", url], env());
    expect(result.code).toBe(1);
    expect(result.stdout).toMatch(/all four totals\): \d+, 0 differ/);
    expect(result.stdout).not.toMatch(/DIFFERS/);
    expect(result.stdout).toMatch(/Ledger audit on SQLite: no problems/);
    expect(result.stdout).toMatch(/MISMATCH/);
    expect(result.stdout).toMatch(
      /audit finds only in PostgreSQL: settlement stl_\d+: moves \d+, its calls total \d+/,
    );
    expect(result.stderr).toMatch(/the copy does not match its source/);
  });

  it("refuses a SQLite database not at this build's latest schema, and leaves it as it was", async () => {
    const old = join(dir.path, "old");
    openDatabase(old, migrations.slice(0, -1)).close();
    const { url, pool } = await freshPool();
    const result = await runCli(["migrate-store", "--to", url], { TOLLGATE_DATA_DIR: old });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(
      new RegExp(`schema version ${migrations.length - 1}, this build's latest is ${migrations.length}`),
    );
    const db = new Database(join(old, "tollgate.db"), { readonly: true });
    expect(db.pragma("user_version", { simple: true })).toBe(migrations.length - 1);
    db.close();
    expect((await pool.query("SELECT COUNT(*)::int AS n FROM accounts")).rows[0].n).toBe(0);
  });

  it("refuses a SQLite table it does not know how to copy, before writing anything", async () => {
    const future = join(dir.path, "future");
    const db = openDatabase(future);
    new AuthRepository(db).createAccount("acct_x", "x", NOW);
    db.exec("CREATE TABLE invoices (id TEXT PRIMARY KEY, account_id TEXT NOT NULL) STRICT");
    db.close();
    const { url, pool } = await freshPool();
    const result = await runCli(["migrate-store", "--to", url], { TOLLGATE_DATA_DIR: future });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/tables migrate-store does not know how to copy: invoices/);
    expect((await pool.query("SELECT COUNT(*)::int AS n FROM accounts")).rows[0].n).toBe(0);
  });

  it("copies in batches of any size and reads the same result (in process, 7 rows a batch)", async () => {
    const { pool } = await freshPool();
    const db = new Database(join(dataDir, "tollgate.db"), { readonly: true });
    try {
      const report = await migrateStore(db, pool, { batchSize: 7 });
      expect(report.verification.ok).toBe(true);
      expect(await postgresRows(pool, "ledger_entries")).toEqual(sqliteRows(db, "ledger_entries"));
      expect(await postgresRows(pool, "api_keys")).toEqual(sqliteRows(db, "api_keys"));
    } finally {
      db.close();
    }
  });
});
