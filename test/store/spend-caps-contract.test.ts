import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SpendCap } from "../../src/core/billing/spend-caps.js";
import type { LedgerStore, NewHold, PlaceHoldResult } from "../../src/core/ports/ledger.js";
import { SYSTEM_MANUAL_CREDIT } from "../../src/core/ports/ledger.js";
import { PgAccountStore } from "../../src/store/postgres/accounts.js";
import { auditPostgres } from "../../src/store/postgres/audit.js";
import { openPostgres } from "../../src/store/postgres/database.js";
import { PgLedger } from "../../src/store/postgres/ledger.js";
import { AuthRepository } from "../../src/store/sqlite/accounts.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { openSqliteLedger } from "../../src/store/sqlite/ledger-store.js";
import { CHAIN, ONE_TOKEN_EACH, testHold, testRaise } from "../helpers/ledger-shapes.js";
import { type PostgresServer, startPostgres } from "../helpers/postgres.js";
import { tempDir } from "../helpers/process.js";

// Spend caps on both stores: enforced in the hold's own transaction (so parallel holds cannot run
// past one), counted over the cap's UTC period from the holds' own times, and reset at its
// boundary. SQLite runs with its ledger writer thread, as `serve` does; PostgreSQL with 16
// connections. Every test ends with the store's ledger audit.

interface Stores {
  readonly ledger: LedgerStore;
  insertAccount(id: string): Promise<void>;
  audit(): Promise<string[]>;
  close(): Promise<void>;
}

let server: PostgresServer;
beforeAll(async () => {
  server = await startPostgres();
});
afterAll(async () => {
  await server?.stop();
});

const stores: Record<string, () => Promise<Stores>> = {
  sqlite: async () => {
    const dir = tempDir();
    const db = openDatabase(dir.path);
    const ledger = await openSqliteLedger(db, dir.path, { thread: true });
    const accounts = new AuthRepository(db);
    return {
      ledger,
      insertAccount: async (id) => {
        await accounts.insertAccount(id, "", 1);
      },
      audit: async () => auditLedger(db),
      close: async () => {
        await ledger.close();
        db.close();
        dir.cleanup();
      },
    };
  },
  postgres: async () => {
    const pool: pg.Pool = await openPostgres(await server.freshDatabase(), 16);
    const accounts = new PgAccountStore(pool);
    return {
      ledger: new PgLedger(pool),
      insertAccount: async (id) => {
        await accounts.insertAccount(id, "", 1);
      },
      audit: () => auditPostgres(pool),
      close: () => pool.end(),
    };
  },
};

const DAY = 86_400_000;
/** 2026-03-31 12:00 UTC: a day and a month end at the same instant 12 h later. */
const NOON = Date.UTC(2026, 2, 31, 12);
const MIDNIGHT = Date.UTC(2026, 3, 1);
const USAGE = ONE_TOKEN_EACH;

const newHold = (id: string, amount: bigint, createdAt: number, keyId = "key_1"): NewHold =>
  testHold(id, amount, { createdAt, keyId, inputTokens: 1n, maxTokens: 16n });

const raise = testRaise;

function cap(period: SpendCap["period"], amount: bigint, keyId = "key_1"): SpendCap {
  return { accountId: "acct_a", keyId, chain: CHAIN, period, amount };
}

const kinds = (results: PlaceHoldResult[]) => results.map((r) => r.kind).sort();

describe.each(Object.keys(stores))("spend caps on %s", (name) => {
  async function withStores(body: (s: Stores) => Promise<void>): Promise<void> {
    const s = await stores[name]!();
    try {
      await s.insertAccount("acct_a");
      await s.ledger.credit({
        entryId: "c1",
        accountId: "acct_a",
        chain: CHAIN,
        amount: 1_000_000n,
        from: SYSTEM_MANUAL_CREDIT,
        memo: "",
        createdAt: 1,
      });
      await body(s);
      expect(await s.audit()).toEqual([]);
    } finally {
      await s.close();
    }
  }

  it("32 concurrent holds against a key's daily cap covering 7 of them: exactly 7 placed", () =>
    withStores(async (s) => {
      await s.ledger.setSpendCap(cap("day", 700n), NOON);
      const results = await Promise.all(
        Array.from({ length: 32 }, (_, i) => s.ledger.placeHold(newHold(`h${i}`, 100n, NOON + i))),
      );
      expect(kinds(results)).toEqual([...Array(25).fill("capped"), ...Array(7).fill("placed")]);
      const refused = results.find((r) => r.kind === "capped");
      expect(refused).toEqual({
        kind: "capped",
        refusal: { cap: cap("day", 700n), remaining: 0n, resetsAt: MIDNIGHT },
      });
      // Nothing of a refused hold was written: 7 holds of 100 pending.
      expect((await s.ledger.balance("acct_a", CHAIN)).debitsPending).toBe(700n);
    }));

  it("32 concurrent holds of two keys against the account's monthly cap covering 5: exactly 5 placed", () =>
    withStores(async (s) => {
      await s.ledger.setSpendCap(cap("month", 500n, ""), NOON);
      const results = await Promise.all(
        Array.from({ length: 32 }, (_, i) =>
          s.ledger.placeHold(newHold(`h${i}`, 100n, NOON, i % 2 === 0 ? "key_1" : "key_2")),
        ),
      );
      expect(kinds(results).filter((k) => k === "placed")).toHaveLength(5);
      expect(kinds(results).filter((k) => k === "capped")).toHaveLength(27);
    }));

  it("counts open holds at their amount, settled at their charge, released and expired at nothing", () =>
    withStores(async (s) => {
      await s.ledger.setSpendCap(cap("lifetime", 1000n), NOON);
      for (const id of ["a", "b", "c", "d"]) {
        expect((await s.ledger.placeHold(newHold(id, 200n, NOON))).kind).toBe("placed");
      }
      expect((await s.ledger.settle("a", 50n, USAGE, NOON, "")).kind).toBe("resolved");
      expect((await s.ledger.void("b", "released", NOON)).kind).toBe("resolved");
      expect(await s.ledger.expireHolds(NOON + 1, NOON, 10)).toBe(2);
      // Spent: a's charge of 50; the rest resolved for nothing. 950 left, and a lifetime cap never resets.
      expect(await s.ledger.placeHold(newHold("e", 951n, NOON))).toEqual({
        kind: "capped",
        refusal: { cap: cap("lifetime", 1000n), remaining: 950n, resetsAt: undefined },
      });
      expect((await s.ledger.placeHold(newHold("f", 950n, NOON))).kind).toBe("placed");
      // Another key is not bound by key_1's cap; a retry of a placed hold is still `existing`.
      expect((await s.ledger.placeHold(newHold("g", 500n, NOON, "key_2"))).kind).toBe("placed");
      expect((await s.ledger.placeHold(newHold("f", 950n, NOON))).kind).toBe("existing");
    }));

  it("the tightest cap refuses; caps reset at the UTC day and month boundaries", () =>
    withStores(async (s) => {
      await s.ledger.setSpendCap(cap("day", 300n), NOON);
      await s.ledger.setSpendCap(cap("month", 500n, ""), NOON);
      expect((await s.ledger.placeHold(newHold("a", 300n, MIDNIGHT - 1))).kind).toBe("placed");
      expect(await s.ledger.placeHold(newHold("b", 1n, MIDNIGHT - 1))).toEqual({
        kind: "capped",
        refusal: { cap: cap("day", 300n), remaining: 0n, resetsAt: MIDNIGHT },
      });
      // At midnight on 1 April both the day and the month are new.
      expect((await s.ledger.placeHold(newHold("c", 300n, MIDNIGHT))).kind).toBe("placed");
      expect(await s.ledger.placeHold(newHold("d", 201n, MIDNIGHT + DAY, "key_2"))).toEqual({
        kind: "capped",
        refusal: { cap: cap("month", 500n, ""), remaining: 200n, resetsAt: Date.UTC(2026, 4, 1) },
      });
      expect((await s.ledger.placeHold(newHold("e", 300n, MIDNIGHT + DAY))).kind).toBe("capped");
      expect((await s.ledger.placeHold(newHold("f", 200n, MIDNIGHT + DAY))).kind).toBe("placed");
    }));

  it("raises count like holds: a raise past what a cap leaves is capped with nothing written; settling revises the hold's day", () =>
    withStores(async (s) => {
      await s.ledger.setSpendCap(cap("day", 500n), NOON);
      expect((await s.ledger.placeHold(newHold("a", 300n, NOON))).kind).toBe("placed");
      expect((await s.ledger.raiseHold(raise("a", 2, 150n, NOON + 1))).kind).toBe("raised");
      expect(await s.ledger.capSpent(cap("day", 500n), NOON - (NOON % DAY))).toBe(450n);
      expect(await s.ledger.raiseHold(raise("a", 3, 51n, NOON + 2))).toEqual({
        kind: "capped",
        refusal: { cap: cap("day", 500n), remaining: 50n, resetsAt: MIDNIGHT },
      });
      expect((await s.ledger.balance("acct_a", CHAIN)).debitsPending).toBe(450n);
      expect(await s.ledger.holdRaises("a")).toHaveLength(1);
      expect((await s.ledger.raiseHold(raise("a", 3, 50n, NOON + 2))).kind).toBe("raised");
      expect((await s.ledger.placeHold(newHold("b", 1n, NOON))).kind).toBe("capped");
      // Settled for 120 of its 500: the day has spent 120, and room for 380 more.
      expect((await s.ledger.settle("a", 120n, USAGE, NOON + 3, "")).kind).toBe("resolved");
      expect(await s.ledger.capSpent(cap("day", 500n), NOON - (NOON % DAY))).toBe(120n);
      expect((await s.ledger.placeHold(newHold("c", 380n, NOON + 4))).kind).toBe("placed");
      // A retried raise is never refused by its own amount.
      expect((await s.ledger.raiseHold(raise("a", 3, 50n, NOON + 5))).kind).toBe("existing");
    }));

  it("a raise counts on its hold's day, against the caps' periods as of the hold", () =>
    withStores(async (s) => {
      await s.ledger.setSpendCap(cap("day", 300n, ""), NOON);
      expect((await s.ledger.placeHold(newHold("late", 200n, MIDNIGHT - 1, "key_2"))).kind).toBe("placed");
      // Raised after midnight: spent on 31 March, the hold's day, which it fills.
      expect((await s.ledger.raiseHold(raise("late", 2, 100n, MIDNIGHT + 5))).kind).toBe("raised");
      expect(await s.ledger.raiseHold(raise("late", 3, 1n, MIDNIGHT + 6))).toEqual({
        kind: "capped",
        refusal: { cap: cap("day", 300n, ""), remaining: 0n, resetsAt: MIDNIGHT },
      });
      // 1 April has spent nothing.
      expect((await s.ledger.placeHold(newHold("next", 300n, MIDNIGHT + 7))).kind).toBe("placed");
      expect(await s.ledger.capSpent(cap("day", 300n, ""), MIDNIGHT)).toBe(300n);
      expect(await s.ledger.capSpent(cap("day", 300n, ""), MIDNIGHT - DAY)).toBe(600n);
    }));

  it("16 concurrent raises against what a key's daily cap leaves for 7 of them: exactly 7 raised", () =>
    withStores(async (s) => {
      await s.ledger.setSpendCap(cap("day", 1000n), NOON);
      for (let i = 0; i < 16; i++) await s.ledger.placeHold(newHold(`h${i}`, 10n, NOON + i));
      const results = await Promise.all(
        Array.from({ length: 16 }, (_, i) => s.ledger.raiseHold(raise(`h${i}`, 2, 120n, NOON + 100))),
      );
      expect(results.map((r) => r.kind).sort()).toEqual([
        ...Array(9).fill("capped"),
        ...Array(7).fill("raised"),
      ]);
      expect((await s.ledger.balance("acct_a", CHAIN)).debitsPending).toBe(160n + 7n * 120n);
    }));

  it("caps are set, replaced, listed and cleared", () =>
    withStores(async (s) => {
      await s.ledger.setSpendCap(cap("day", 300n), NOON);
      await s.ledger.setSpendCap(cap("day", 400n), NOON);
      await s.ledger.setSpendCap(cap("lifetime", 9n, ""), NOON);
      expect(await s.ledger.spendCaps("acct_a")).toEqual([cap("lifetime", 9n, ""), cap("day", 400n)]);
      expect(
        await s.ledger.clearSpendCap({ accountId: "acct_a", keyId: "", chain: CHAIN, period: "lifetime" }),
      ).toBe(true);
      expect(
        await s.ledger.clearSpendCap({ accountId: "acct_a", keyId: "", chain: CHAIN, period: "lifetime" }),
      ).toBe(false);
      expect(await s.ledger.spendCaps("acct_a")).toEqual([cap("day", 400n)]);
      expect((await s.ledger.placeHold(newHold("a", 401n, NOON))).kind).toBe("capped");
    }));
});
