import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { IdempotencyClaim, IdempotencyStore } from "../../src/core/ports/idempotency.js";
import { openPostgres } from "../../src/store/postgres/database.js";
import { PgIdempotency } from "../../src/store/postgres/idempotency.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { SqliteIdempotency } from "../../src/store/sqlite/idempotency.js";
import { type PostgresServer, startPostgres } from "../helpers/postgres.js";
import { tempDir } from "../helpers/process.js";

// The idempotency port, one suite run against SQLite and a real PostgreSQL: claims are atomic
// (of many concurrent claims of a key exactly one wins), scoped to an account, and a key comes
// free when released, expired or abandoned.

interface Opened {
  /** Several handles on the one store (several hosts, or connections of one). */
  readonly handles: readonly IdempotencyStore[];
  close(): Promise<void>;
}

let server: PostgresServer;
beforeAll(async () => {
  server = await startPostgres();
});
afterAll(async () => {
  await server?.stop();
});

const stores: Record<string, () => Promise<Opened>> = {
  sqlite: async () => {
    const dir = tempDir();
    const dbs = [openDatabase(dir.path), openDatabase(dir.path)];
    return {
      handles: dbs.map((db) => new SqliteIdempotency(db)),
      close: async () => {
        for (const db of dbs) db.close();
        dir.cleanup();
      },
    };
  },
  postgres: async () => {
    const url = await server.freshDatabase();
    const pools = [await openPostgres(url, 8), await openPostgres(url, 8)];
    return {
      handles: pools.map((pool) => new PgIdempotency(pool)),
      close: async () => {
        for (const pool of pools) await pool.end();
      },
    };
  },
};

const HOUR = 3_600_000;

function claimOf(overrides: Partial<IdempotencyClaim> = {}): IdempotencyClaim {
  return {
    accountId: "acct_a",
    key: "key-1",
    claimId: `idem_${Math.random()}`,
    requestHash: "hash-1",
    now: 1_000_000,
    expiresAt: 1_000_000 + 24 * HOUR,
    staleBefore: 1_000_000 - HOUR,
    ...overrides,
  };
}

describe.each(Object.keys(stores))("the idempotency port on %s", (name) => {
  const using = async (test: (handles: readonly IdempotencyStore[]) => Promise<void>) => {
    const opened = await stores[name]!();
    try {
      await test(opened.handles);
    } finally {
      await opened.close();
    }
  };

  it("claims a free key once; the holder keeps its answer for the others", () =>
    using(async ([store]) => {
      const first = claimOf();
      expect(await store!.claim(first)).toBeUndefined();
      expect(await store!.claim(claimOf())).toEqual({
        requestHash: "hash-1",
        answer: undefined,
        answerDropped: false,
      });
      // Another claim cannot complete what it does not hold.
      await store!.complete("acct_a", "key-1", "idem_other", new Uint8Array([9]));
      expect((await store!.claim(claimOf()))?.answer).toBeUndefined();
      await store!.complete("acct_a", "key-1", first.claimId, new Uint8Array([1, 2, 3]));
      expect(await store!.claim(claimOf({ requestHash: "hash-2" }))).toEqual({
        requestHash: "hash-1",
        answer: new Uint8Array([1, 2, 3]),
        answerDropped: false,
      });
    }));

  it("scopes keys to accounts", () =>
    using(async ([store]) => {
      expect(await store!.claim(claimOf())).toBeUndefined();
      expect(await store!.claim(claimOf({ accountId: "acct_b" }))).toBeUndefined();
    }));

  it("frees a released key, and only for its holder", () =>
    using(async ([store]) => {
      const first = claimOf();
      expect(await store!.claim(first)).toBeUndefined();
      await store!.release("acct_a", "key-1", "idem_other");
      expect(await store!.claim(claimOf())).toBeDefined();
      await store!.release("acct_a", "key-1", first.claimId);
      expect(await store!.claim(claimOf({ requestHash: "hash-2" }))).toBeUndefined();
    }));

  it("keeps that an answer was dropped", () =>
    using(async ([store]) => {
      const first = claimOf();
      await store!.claim(first);
      await store!.complete("acct_a", "key-1", first.claimId, undefined);
      expect(await store!.claim(claimOf())).toEqual({
        requestHash: "hash-1",
        answer: undefined,
        answerDropped: true,
      });
    }));

  it("hands over an expired key, and a running one past the longest call; sweeps the expired", () =>
    using(async ([store]) => {
      const done = claimOf({ key: "done" });
      await store!.claim(done);
      await store!.complete("acct_a", "done", done.claimId, new Uint8Array([1]));
      await store!.claim(claimOf({ key: "running" }));
      const later = 1_000_000 + HOUR / 2;
      // Neither expired nor stale yet.
      expect(
        await store!.claim(claimOf({ key: "done", now: later, staleBefore: later - HOUR })),
      ).toBeDefined();
      expect(
        await store!.claim(claimOf({ key: "running", now: later, staleBefore: later - HOUR })),
      ).toBeDefined();
      // The running claim is abandoned an hour on; the finished one lasts its 24 hours.
      const stale = 1_000_000 + HOUR + 1;
      expect(
        await store!.claim(
          claimOf({ key: "running", now: stale, staleBefore: stale - HOUR, requestHash: "h" }),
        ),
      ).toBeUndefined();
      expect(
        await store!.claim(claimOf({ key: "done", now: stale, staleBefore: stale - HOUR })),
      ).toBeDefined();
      const expired = 1_000_000 + 24 * HOUR;
      expect(
        await store!.claim(
          claimOf({ key: "done", now: expired, staleBefore: expired - HOUR, requestHash: "h" }),
        ),
      ).toBeUndefined();
      await store!.claim(claimOf({ key: "old", now: 0, expiresAt: 10 }));
      await store!.claim(claimOf({ key: "older", now: 0, expiresAt: 5 }));
      expect(await store!.sweep(10)).toBe(2);
      expect(await store!.sweep(10)).toBe(0);
    }));

  it("of many concurrent claims of one key from several handles, exactly one wins", () =>
    using(async (handles) => {
      for (let round = 0; round < 5; round++) {
        const outcomes = await Promise.all(
          Array.from({ length: 24 }, (_, i) =>
            handles[i % handles.length]!.claim(claimOf({ key: `race-${round}` })),
          ),
        );
        expect(outcomes.filter((outcome) => outcome === undefined)).toHaveLength(1);
      }
    }));
});
