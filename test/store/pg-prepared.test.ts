import type pg from "pg";
import { describe, expect, it } from "vitest";
import { auditPostgres } from "../../src/store/postgres/audit.js";
import { openPostgres } from "../../src/store/postgres/database.js";
import { PgLedger } from "../../src/store/postgres/ledger.js";
import { CHAIN, fundAccounts, suitePostgres, testHold, USAGE } from "../helpers/pg-ledger.js";

// A call's hold and resolution are named statements, prepared once per connection, when the pool
// reaches PostgreSQL's own sessions; behind a transaction pooler (a direct URL given beside the
// pooled one) they are sent unnamed, as a pooler's next server session would not know them
// (src/store/postgres/queries.ts, docs/store.md "Where a billed call's time goes").

const server = suitePostgres();

/** Funds acct_a with 10,000, then places and settles three holds; returns what each did. */
async function calls(pool: pg.Pool): Promise<string[]> {
  const ledger = new PgLedger(pool);
  await fundAccounts(pool, ledger, ["acct_a"]);
  const outcomes: string[] = [];
  for (const [i, held, charged] of [
    [1, 3_000n, 1_000n],
    [2, 3_000n, 3_000n],
    [3, 9_000n, 0n],
  ] as const) {
    const placed = await ledger.placeHold(testHold(`h${i}`, held));
    outcomes.push(`hold ${placed.kind}`);
    if (placed.kind !== "placed") continue;
    outcomes.push(`settle ${(await ledger.settle(`h${i}`, charged, USAGE, 20, "")).kind}`);
  }
  // Settling one again is answered from the stored resolution, prepared statement or not.
  outcomes.push(`again ${(await ledger.settle("h1", 1_000n, USAGE, 30, "")).kind}`);
  const row = await ledger.balance("acct_a", CHAIN);
  outcomes.push(`available ${row.creditsPosted - row.debitsPosted - row.debitsPending}`);
  return outcomes;
}

const EXPECTED = [
  "hold placed",
  "settle resolved",
  "hold placed",
  "settle resolved",
  // 10,000 less the two charges leaves 6,000: the third hold, 9,000, is refused, nothing written.
  "hold insufficient",
  "again already-resolved",
  "available 6000",
];

/** The statements prepared on the pool's one connection. */
async function prepared(pool: pg.Pool): Promise<string[]> {
  const { rows } = await pool.query<{ name: string }>(
    "SELECT name FROM pg_prepared_statements ORDER BY name",
  );
  return rows.map((r) => r.name);
}

describe("a call's statements on PostgreSQL, prepared or not", () => {
  it("are prepared once per connection on PostgreSQL's own sessions, and reused", async () => {
    const pool = await openPostgres(await server().freshDatabase(), 1);
    try {
      expect(await calls(pool)).toEqual(EXPECTED);
      expect(await prepared(pool)).toEqual(["tollgate_place_hold", "tollgate_resolve"]);
      expect(await auditPostgres(pool)).toEqual([]);
    } finally {
      await pool.end();
    }
  });

  it("are sent unnamed when a direct URL says a pooler stands between, with the same outcomes", async () => {
    const url = await server().freshDatabase();
    // The same database by another way (its Unix socket), as a pooler's direct URL would be.
    const pool = await openPostgres(url, 1, server().socketUrl(url));
    try {
      expect(await calls(pool)).toEqual(EXPECTED);
      expect(await prepared(pool)).toEqual([]);
      expect(await auditPostgres(pool)).toEqual([]);
    } finally {
      await pool.end();
    }
  });
});
