import { channel } from "node:diagnostics_channel";
import { describe, expect, it } from "vitest";
import { SYSTEM_REVENUE } from "../../src/core/ports/ledger.js";
import { auditPostgres } from "../../src/store/postgres/audit.js";
import { openPostgres } from "../../src/store/postgres/database.js";
import { PgLedger } from "../../src/store/postgres/ledger.js";
import { CHAIN, fundAccounts, suitePostgres, testHold, USAGE } from "../helpers/pg-ledger.js";

// Migration 21 and src/store/postgres/batches.ts: the holds and resolutions a host asks for while
// two of a kind are in flight go together, as one statement and one transaction, each item in a
// subtransaction of its own. Each caller's answer must be what its statement alone would have
// given, and nothing may be written twice or lost (docs/store.md, "Batches").

const server = suitePostgres();

describe("holds and resolutions in batches on PostgreSQL", () => {
  it("answers each call in a batch as alone: placed, taken, refused, settled once, over its hold, unknown", async () => {
    const url = await server().freshDatabase();
    const pool = await openPostgres(url, 10);
    const ledger = new PgLedger(pool);
    const accounts = Array.from({ length: 8 }, (_, i) => `acct_${i}`);
    await fundAccounts(pool, ledger, accounts, 10_000n);
    await fundAccounts(pool, ledger, ["acct_poor"], 500n);
    try {
      // 40 holds over 8 accounts at once, with a retry of one (the same call), another call
      // under a taken id, and a hold its account cannot cover, all in the same burst.
      const holds = accounts.flatMap((accountId, a) =>
        Array.from({ length: 5 }, (_, i) => testHold(`h_${a}_${i}`, 1_000n, { accountId })),
      );
      const [placed, retried, taken, poor] = await Promise.all([
        Promise.all(holds.map((h) => ledger.placeHold(h))),
        ledger.placeHold(holds[3]!),
        ledger.placeHold({ ...holds[7]!, amount: 2_000n }),
        ledger.placeHold(testHold("h_poor", 1_000n, { accountId: "acct_poor" })),
      ]);
      // The retry and the other call under its id race the original: one answer each way.
      expect(placed.filter((_, i) => i !== 3 && i !== 7).every((r) => r.kind === "placed")).toBe(true);
      expect([placed[3]!.kind, retried.kind].sort()).toEqual(["existing", "placed"]);
      expect([placed[7]!.kind, taken.kind].sort()).toEqual(["conflict", "placed"]);
      expect(poor).toEqual({ kind: "insufficient", available: 500n });
      const { rows } = await pool.query<{ holds: number }>("SELECT COUNT(*)::int AS holds FROM holds");
      expect(rows[0]!.holds).toBe(40);
      for (const accountId of accounts) {
        // acct_1's h_1_2 holds 2,000 when the other call under its id came first.
        const pending = accountId === "acct_1" && taken.kind === "placed" ? 6_000n : 5_000n;
        expect(await ledger.balance(accountId, CHAIN)).toMatchObject({
          debitsPending: pending,
          debitsPosted: 0n,
        });
      }

      expect((await ledger.placeHold(testHold("h_extra", 1_000n, { accountId: "acct_0" }))).kind).toBe(
        "placed",
      );
      // Every hold settled at once, with a second settle of one, a charge over its hold and an
      // unknown hold in the same burst.
      const [settled, again, over, unknown] = await Promise.all([
        Promise.all(holds.map((h, i) => ledger.settle(h.id, 300n, USAGE, 100 + i, ""))),
        ledger.settle(holds[0]!.id, 300n, USAGE, 99, ""),
        ledger.settle("h_extra", 5_000n, USAGE, 99, ""),
        ledger.void("h_unknown", "released", 99),
      ]);
      const first = [settled[0]!.kind, again.kind].sort();
      expect(first).toEqual(["already-resolved", "resolved"]);
      expect(settled.slice(1).every((r) => r.kind === "resolved")).toBe(true);
      expect(over.kind).toBe("exceeds");
      expect(unknown).toEqual({ kind: "not-found" });
      expect((await ledger.void("h_extra", "released", 200)).kind).toBe("resolved");
      for (const accountId of accounts) {
        expect(await ledger.balance(accountId, CHAIN)).toMatchObject({
          debitsPending: 0n,
          debitsPosted: 1_500n,
        });
      }
      // Conservation: what the accounts paid is what revenue took, nothing pending anywhere.
      expect(await ledger.balance(SYSTEM_REVENUE, CHAIN)).toMatchObject({
        creditsPending: 0n,
        creditsPosted: 12_000n,
      });
      const resolved = await pool.query<{ n: number }>("SELECT COUNT(*)::int AS n FROM hold_resolutions");
      expect(resolved.rows[0]!.n).toBe(41);
      expect(await auditPostgres(pool)).toEqual([]);
      // Most of the burst went in batches, not one statement each.
      const { holds: holdBatches, resolutions } = ledger.batchesSent;
      expect(holdBatches.items).toBeGreaterThan(20);
      expect(resolutions.items).toBeGreaterThan(20);
    } finally {
      await pool.end();
    }
  });

  it("a batch does not wait with an account whose balance row another transaction keeps locked", async () => {
    const url = await server().freshDatabase();
    const pool = await openPostgres(url, 16);
    const ledger = new PgLedger(pool);
    await fundAccounts(pool, ledger, ["acct_a", "acct_b"], 100_000n);
    const locker = await pool.connect();
    try {
      // Another host's transaction holds acct_a's row (as a slow commit would).
      await locker.query("BEGIN");
      await locker.query("SELECT 1 FROM ledger_balances WHERE account = 'acct_a' FOR UPDATE");
      const stuck = Array.from({ length: 4 }, (_, i) => ledger.placeHold(testHold(`a_${i}`, 1_000n)));
      const others = Array.from({ length: 24 }, (_, i) =>
        ledger.placeHold(testHold(`b_${i}`, 1_000n, { accountId: "acct_b" })),
      );
      // acct_b's holds, batched with acct_a's or behind them, are all placed while acct_a's wait.
      const b = await Promise.race([
        Promise.all(others),
        new Promise<"waited">((resolve) => setTimeout(() => resolve("waited"), 3_000)),
      ]);
      expect(b === "waited" ? b : b.map((r) => r.kind)).toEqual(others.map(() => "placed"));
      const pendingA = await Promise.race([
        Promise.all(stuck).then(() => "placed"),
        new Promise((resolve) => setTimeout(() => resolve("still waiting"), 100)),
      ]);
      expect(pendingA).toBe("still waiting");
      await locker.query("ROLLBACK");
      expect((await Promise.all(stuck)).map((r) => r.kind)).toEqual(["placed", "placed", "placed", "placed"]);
      expect(await ledger.balance("acct_a", CHAIN)).toMatchObject({ debitsPending: 4_000n });
      expect(await ledger.balance("acct_b", CHAIN)).toMatchObject({ debitsPending: 24_000n });
      expect(ledger.batchesSent.holds.batches).toBeGreaterThan(0);
      expect(await auditPostgres(pool)).toEqual([]);
    } finally {
      locker.release();
      await pool.end();
    }
  });

  it("tells the timeline's channel when each hold and settlement is sent and answered, with its id", async () => {
    const url = await server().freshDatabase();
    const pool = await openPostgres(url, 4);
    const ledger = new PgLedger(pool);
    await fundAccounts(pool, ledger, ["acct_seen"], 10_000n);
    const seen: { op: string; phase: string; id: number }[] = [];
    const listen = (message: unknown) => seen.push(message as { op: string; phase: string; id: number });
    const writes = channel("tollgate:ledger:write");
    writes.subscribe(listen);
    try {
      const placed = ledger.placeHold(testHold("h_seen", 1_000n, { accountId: "acct_seen" }));
      // "sent" is published before the statement's answer can be back.
      expect(seen).toEqual([{ op: "placeHold", phase: "sent", id: expect.any(Number) }]);
      expect((await placed).kind).toBe("placed");
      expect((await ledger.settle("h_seen", 400n, USAGE, 10, "")).kind).toBe("resolved");
      const [holdId, settleId] = [seen[0]!.id, seen[2]!.id];
      expect(holdId).not.toBe(settleId);
      expect(seen).toEqual([
        { op: "placeHold", phase: "sent", id: holdId },
        { op: "placeHold", phase: "done", id: holdId },
        { op: "settle", phase: "sent", id: settleId },
        { op: "settle", phase: "done", id: settleId },
      ]);
      // Conservation: the account paid what revenue took.
      expect(await ledger.balance(SYSTEM_REVENUE, CHAIN)).toMatchObject({ creditsPosted: 400n });
      expect(await ledger.balance("acct_seen", CHAIN)).toMatchObject({
        debitsPosted: 400n,
        debitsPending: 0n,
      });
    } finally {
      writes.unsubscribe(listen);
      await pool.end();
    }
  });
});
