import { setTimeout as sleep } from "node:timers/promises";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { INT64_MAX } from "../../src/core/billing/money.js";
import { isStorageFull } from "../../src/core/errors.js";
import type { AccountStore } from "../../src/core/ports/accounts.js";
import type { ChainWorkStore } from "../../src/core/ports/chain-work.js";
import {
  availableOf,
  type DepositToCredit,
  type HoldState,
  heldOf,
  type LedgerStore,
  type NewCredit,
  type NewHold,
  type OnchainStore,
  SYSTEM_DEPOSITS,
  SYSTEM_MANUAL_CREDIT,
  SYSTEM_REVENUE,
  SYSTEM_WITHDRAWAL_FEES,
  SYSTEM_WITHDRAWALS,
  type TransferRow,
} from "../../src/core/ports/ledger.js";
import { type NewX402Payment, SYSTEM_X402, type X402Store } from "../../src/core/ports/x402.js";
import { PgAccountStore } from "../../src/store/postgres/accounts.js";
import { auditPostgres } from "../../src/store/postgres/audit.js";
import { PgChainRoles, PgChainWork } from "../../src/store/postgres/chain-work.js";
import { migratePostgres, openPostgres } from "../../src/store/postgres/database.js";
import { PgLedger } from "../../src/store/postgres/ledger.js";
import { AuthRepository } from "../../src/store/sqlite/accounts.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { SqliteChainWork } from "../../src/store/sqlite/chain-work.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { openSqliteLedger } from "../../src/store/sqlite/ledger-store.js";
import { CHAIN, EVERY_COUNT, testHold, testRaise } from "../helpers/ledger-shapes.js";
import { type PostgresServer, startPostgres } from "../helpers/postgres.js";
import { tempDir } from "../helpers/process.js";

// The ledger, onchain and chain-work ports, one suite run against SQLite (the reference) and a
// real PostgreSQL 15; then what only PostgreSQL has to show: many connections writing at once,
// and the chain roles held across processes. Every test ends with the store's ledger audit.

/** One store under test: its ports, its audit, and how to let it go. */
interface Stores {
  readonly ledger: LedgerStore & OnchainStore & X402Store;
  readonly work: ChainWorkStore;
  readonly accounts: AccountStore;
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

/** A PostgreSQL store on a database of its own, and its pool (16 connections, as several hosts). */
async function openPgStores(): Promise<Stores & { readonly pool: pg.Pool; readonly url: string }> {
  const url = await server.freshDatabase();
  const pool = await openPostgres(url, 16);
  return {
    url,
    pool,
    ledger: new PgLedger(pool),
    work: new PgChainWork(pool),
    accounts: new PgAccountStore(pool),
    audit: () => auditPostgres(pool),
    close: () => pool.end(),
  };
}

/** The same suite, against each store the ports have. */
const stores: Record<string, () => Promise<Stores>> = {
  sqlite: async () => {
    const dir = tempDir();
    const db = openDatabase(dir.path);
    const ledger = await openSqliteLedger(db, dir.path, { thread: false });
    return {
      ledger,
      work: new SqliteChainWork(db),
      accounts: new AuthRepository(db),
      audit: async () => auditLedger(db),
      close: async () => {
        await ledger.close();
        db.close();
        dir.cleanup();
      },
    };
  },
  postgres: openPgStores,
};

const TREASURY = "0xtreasury";
const FIRST_PAGE = INT64_MAX;

const USAGE = EVERY_COUNT;

const newHold = (id: string, accountId: string, amount: bigint, createdAt = 1, chain = CHAIN): NewHold =>
  testHold(id, amount, { accountId, createdAt, chain });

const newRaise = testRaise;

/**
 * Every row of the ledger's money tables, read through the port: equal before and after means a
 * refused write wrote nothing (balances, the revenue side's too, holds and their raises).
 */
async function ledgerRows(s: Stores): Promise<unknown> {
  const accounts = ["acct_a", "acct_b", SYSTEM_REVENUE];
  return {
    balances: await Promise.all(accounts.map((a) => s.ledger.balances(a))),
    holds: await Promise.all(accounts.map((a) => s.ledger.listHolds(a, FIRST_PAGE, 1000))),
    raises: await Promise.all(
      (await s.ledger.listHolds("acct_a", FIRST_PAGE, 1000)).map((h) => s.ledger.holdRaises(h.hold.id)),
    ),
  };
}

function manualCredit(entryId: string, accountId: string, amount: bigint, chain = CHAIN): NewCredit {
  return { entryId, accountId, chain, amount, from: SYSTEM_MANUAL_CREDIT, memo: "operator", createdAt: 1 };
}

function deposit(txHash: string, accountId: string, amount: bigint, position = 1n): DepositToCredit {
  return {
    txHash,
    index: 0,
    position,
    from: "0xpayer",
    to: `0xaddr_${accountId}`,
    accountId,
    onchainAmount: amount * 1000n,
    amount,
  };
}

const zeroBalance = (account: string, chain = CHAIN) => ({
  account,
  chain,
  debitsPending: 0n,
  debitsPosted: 0n,
  creditsPending: 0n,
  creditsPosted: 0n,
});

/** An x402 payment of `authorised` for the call of hold `holdId`, paid by acct_x's wallet. */
function x402Payment(id: string, holdId: string, authorised: bigint, createdAt = 1): NewX402Payment {
  return {
    id,
    holdId,
    accountId: "acct_x",
    chain: CHAIN,
    scheme: "upto",
    payer: "0xpayer",
    authorised,
    payload: `{"payment":"${id}"}`,
    createdAt,
  };
}

/** Ids a batch hands out: st1, st2, … */
function ids(): () => string {
  let n = 0;
  return () => `st${++n}`;
}

/** Credits deposits in one scan of the next position on `chain`. */
async function scan(s: Stores, deposits: DepositToCredit[], now = 1, chain = CHAIN): Promise<void> {
  const from = (await s.work.cursor(chain)) ?? 0n;
  expect(await s.work.recordScan(chain, from, from + 1n, deposits, now)).toBe(true);
}

/** A call: a hold of `held` (at least the charge) settled for `charge` at `at`. */
async function call(
  s: Stores,
  id: string,
  accountId: string,
  charge: bigint,
  at: number,
  held = charge,
  chain = CHAIN,
) {
  expect((await s.ledger.placeHold(newHold(id, accountId, held, at, chain))).kind).toBe("placed");
  expect((await s.ledger.settle(id, charge, USAGE, at, "")).kind).toBe("resolved");
}

describe.each(Object.keys(stores))("the ledger, onchain and chain-work ports on %s", (name) => {
  /** Runs `body` on a fresh store and ends with its audit: the ledger must replay clean. */
  async function withStores(body: (s: Stores) => Promise<void>): Promise<void> {
    const s = await stores[name]!();
    try {
      await body(s);
      expect(await s.audit()).toEqual([]);
    } finally {
      await s.close();
    }
  }

  /** Creates the accounts (the ledger's rows reference them). */
  async function accounts(s: Stores, ...ids: string[]): Promise<void> {
    for (const id of ids) await s.accounts.insertAccount(id, "", 1);
  }

  it("holds: placed, existing for the same call, conflict for another, insufficient with nothing written", () =>
    withStores(async (s) => {
      await accounts(s, "acct_a", "acct_b");
      expect(await s.ledger.credit(manualCredit("c1", "acct_a", 1000n))).toEqual({
        kind: "credited",
        balance: { ...zeroBalance("acct_a"), creditsPosted: 1000n },
      });
      const placed = await s.ledger.placeHold(newHold("h1", "acct_a", 300n, 10));
      expect(placed).toEqual({
        kind: "placed",
        state: {
          hold: { ...newHold("h1", "acct_a", 300n, 10), raised: 0n, seq: expect.any(Number) },
          resolution: undefined,
        },
      });
      const state = (placed as { state: HoldState }).state;
      expect(await s.ledger.getHold("h1")).toEqual(state);
      expect(await s.ledger.placeHold(newHold("h1", "acct_a", 300n, 10))).toEqual({
        kind: "existing",
        state,
      });
      expect(await s.ledger.placeHold({ ...newHold("h1", "acct_a", 300n, 10), model: "other" })).toEqual({
        kind: "conflict",
      });
      expect(await s.ledger.placeHold(newHold("h1", "acct_a", 301n, 10))).toEqual({ kind: "conflict" });

      expect(await s.ledger.placeHold(newHold("h2", "acct_a", 701n))).toEqual({
        kind: "insufficient",
        available: 700n,
      });
      expect(await s.ledger.getHold("h2")).toBeUndefined();
      expect((await s.ledger.placeHold(newHold("h3", "acct_a", 700n))).kind).toBe("placed");
      // Funds gone: the same call retried is still `existing`, not `insufficient`.
      expect((await s.ledger.placeHold(newHold("h1", "acct_a", 300n, 10))).kind).toBe("existing");
      expect(await s.ledger.placeHold(newHold("h4", "acct_a", 1n))).toEqual({
        kind: "insufficient",
        available: 0n,
      });
      // A zero hold needs no funds, not even a balance row.
      expect((await s.ledger.placeHold(newHold("h5", "acct_a", 0n))).kind).toBe("placed");
      expect((await s.ledger.placeHold(newHold("hb0", "acct_b", 0n))).kind).toBe("placed");
      expect(await s.ledger.placeHold(newHold("hb1", "acct_b", 1n))).toEqual({
        kind: "insufficient",
        available: 0n,
      });

      const balance = await s.ledger.balance("acct_a", CHAIN);
      expect(balance).toEqual({ ...zeroBalance("acct_a"), debitsPending: 1000n, creditsPosted: 1000n });
      expect(availableOf(balance)).toBe(0n);
      expect(await s.ledger.balance(SYSTEM_REVENUE, CHAIN)).toEqual({
        ...zeroBalance(SYSTEM_REVENUE),
        creditsPending: 1000n,
      });
      expect(await s.ledger.balance("acct_b", CHAIN)).toEqual(zeroBalance("acct_b"));
    }));

  it("settle: within the hold charges and releases the rest, above it exceeds; resolves once; unknown is not-found", () =>
    withStores(async (s) => {
      await accounts(s, "acct_a");
      await s.ledger.credit(manualCredit("c1", "acct_a", 1000n));
      await s.ledger.placeHold(newHold("h1", "acct_a", 500n, 10));
      const pending = await s.ledger.getHold("h1");
      expect(await s.ledger.settle("h1", 501n, USAGE, 20, "")).toEqual({ kind: "exceeds", state: pending });
      expect(await s.ledger.settle("h1", -1n, USAGE, 20, "")).toEqual({ kind: "exceeds", state: pending });

      const settled = await s.ledger.settle("h1", 200n, USAGE, 20, '{"model":"claude-test"}');
      expect(settled).toEqual({
        kind: "resolved",
        state: {
          hold: pending!.hold,
          resolution: {
            holdId: "h1",
            status: "settled",
            amount: 200n,
            usage: USAGE,
            charges: '{"model":"claude-test"}',
            resolvedAt: 20,
          },
        },
      });
      const state = (settled as { state: HoldState }).state;
      expect(await s.ledger.getHold("h1")).toEqual(state);
      expect(await s.ledger.settle("h1", 100n, USAGE, 30, "")).toEqual({ kind: "already-resolved", state });
      expect(await s.ledger.void("h1", "released", 30)).toEqual({ kind: "already-resolved", state });
      expect(await s.ledger.settle("missing", 1n, USAGE, 30, "")).toEqual({ kind: "not-found" });
      expect(await s.ledger.void("missing", "expired", 30)).toEqual({ kind: "not-found" });

      expect(await s.ledger.balance("acct_a", CHAIN)).toEqual({
        ...zeroBalance("acct_a"),
        debitsPosted: 200n,
        creditsPosted: 1000n,
      });
      expect(await s.ledger.balance(SYSTEM_REVENUE, CHAIN)).toEqual({
        ...zeroBalance(SYSTEM_REVENUE),
        creditsPosted: 200n,
      });

      // Settled for nothing: resolved, no charge and no settlement.
      await s.ledger.placeHold(newHold("h2", "acct_a", 100n));
      const free = await s.ledger.settle("h2", 0n, USAGE, 40, "");
      expect(free.kind).toBe("resolved");
      expect((free as { state: HoldState }).state.resolution).toMatchObject({
        status: "settled",
        amount: 0n,
      });
      expect([...(await s.ledger.settlements(["h1", "h2"])).keys()]).toEqual(["h1"]);

      // Three outcomes asked for at once: exactly one lands, the others see it.
      await s.ledger.placeHold(newHold("h3", "acct_a", 100n));
      const outcomes = await Promise.all([
        s.ledger.settle("h3", 50n, USAGE, 50, ""),
        s.ledger.void("h3", "released", 50),
        s.ledger.void("h3", "expired", 50),
      ]);
      expect(outcomes.map((o) => o.kind).sort()).toEqual([
        "already-resolved",
        "already-resolved",
        "resolved",
      ]);
      const final = await s.ledger.getHold("h3");
      for (const o of outcomes) expect(o).toMatchObject({ state: final });
      expect(await s.ledger.balance("acct_a", CHAIN)).toMatchObject({ debitsPending: 0n });
    }));

  it("settle records the provider endpoint that served the call, read back with the hold (issue 33)", () =>
    withStores(async (s) => {
      await accounts(s, "acct_a");
      await s.ledger.credit(manualCredit("c1", "acct_a", 1000n));
      await s.ledger.placeHold(newHold("h1", "acct_a", 500n, 10));
      const routed = { ...USAGE, endpoint: "bedrock-east" };
      const settled = await s.ledger.settle("h1", 200n, routed, 20, "");
      expect((settled as { state: HoldState }).state.resolution?.usage).toEqual(routed);
      expect((await s.ledger.getHold("h1"))?.resolution?.usage).toEqual(routed);
      expect((await s.ledger.listHolds("acct_a", 1_000_000n, 10))[0]?.resolution?.usage.endpoint).toBe(
        "bedrock-east",
      );
      // Without a router nothing is named: the usage reads back as it was written.
      await s.ledger.placeHold(newHold("h2", "acct_a", 100n, 11));
      await s.ledger.settle("h2", 10n, USAGE, 21, "");
      expect((await s.ledger.getHold("h2"))?.resolution?.usage).toEqual(USAGE);
    }));

  it("void releases; expireHolds expires holds placed before the cutoff, oldest first, each once, up to the limit", () =>
    withStores(async (s) => {
      await accounts(s, "acct_a");
      await s.ledger.credit(manualCredit("c1", "acct_a", 1000n));
      for (const [id, at, amount] of [
        ["e0", 5, 0n],
        ["e1", 10, 100n],
        ["e2", 20, 100n],
        ["e3", 30, 100n],
        ["e4", 40, 100n],
      ] as const) {
        await s.ledger.placeHold(newHold(id, "acct_a", amount, at));
      }
      expect(await s.ledger.void("e2", "released", 50)).toMatchObject({
        kind: "resolved",
        state: {
          resolution: {
            holdId: "e2",
            status: "released",
            amount: 0n,
            usage: { inputTokens: 0n, outputTokens: 0n, images: 0 },
            charges: "",
            resolvedAt: 50,
          },
        },
      });
      expect(await s.ledger.expireHolds(35, 60, 2)).toBe(2);
      expect((await s.ledger.getHold("e0"))!.resolution).toMatchObject({ status: "expired", resolvedAt: 60 });
      expect((await s.ledger.getHold("e1"))!.resolution).toMatchObject({ status: "expired", amount: 0n });
      expect((await s.ledger.getHold("e3"))!.resolution).toBeUndefined();
      expect(await s.ledger.expireHolds(35, 61, 10)).toBe(1);
      expect((await s.ledger.getHold("e3"))!.resolution).toMatchObject({ status: "expired", resolvedAt: 61 });
      expect(await s.ledger.expireHolds(35, 62, 10)).toBe(0);
      expect((await s.ledger.getHold("e4"))!.resolution).toBeUndefined();
      expect((await s.ledger.void("e1", "released", 70)).kind).toBe("already-resolved");
      expect(await s.ledger.balance("acct_a", CHAIN)).toMatchObject({
        debitsPending: 100n,
        debitsPosted: 0n,
      });
      expect(await s.ledger.balance(SYSTEM_REVENUE, CHAIN)).toMatchObject({ creditsPending: 100n });

      // Three sweepers at once over 21 due holds: each expires exactly once.
      for (let i = 0; i < 20; i++) await s.ledger.placeHold(newHold(`s${i}`, "acct_a", 10n, 100 + i));
      const counts = await Promise.all([
        s.ledger.expireHolds(1000, 200, 20),
        s.ledger.expireHolds(1000, 200, 20),
        s.ledger.expireHolds(1000, 200, 20),
      ]);
      expect(counts.reduce((a, b) => a + b, 0)).toBe(21);
      const holds = await s.ledger.listHolds("acct_a", FIRST_PAGE, 100);
      expect(holds.filter((h) => h.resolution === undefined)).toEqual([]);
      expect(await s.ledger.balance("acct_a", CHAIN)).toMatchObject({ debitsPending: 0n });
      expect(await s.ledger.balance(SYSTEM_REVENUE, CHAIN)).toEqual(zeroBalance(SYSTEM_REVENUE));
    }));

  it("credits: idempotent by entry id, conflict when it differs, overflow past int64 on either side", () =>
    withStores(async (s) => {
      await accounts(s, "acct_a", "acct_b");
      const c1 = manualCredit("c1", "acct_a", 500n);
      const after = { ...zeroBalance("acct_a"), creditsPosted: 500n };
      expect(await s.ledger.credit(c1)).toEqual({ kind: "credited", balance: after });
      expect(await s.ledger.credit(c1)).toEqual({ kind: "existing", balance: after });
      expect(await s.ledger.credit({ ...c1, amount: 600n })).toEqual({ kind: "conflict" });
      expect(await s.ledger.credit({ ...c1, accountId: "acct_b" })).toEqual({ kind: "conflict" });
      expect(await s.ledger.credit({ ...c1, chain: "solana" })).toEqual({ kind: "conflict" });

      const top = { ...zeroBalance("acct_a"), creditsPosted: INT64_MAX };
      expect(await s.ledger.credit(manualCredit("c2", "acct_a", INT64_MAX - 500n))).toEqual({
        kind: "credited",
        balance: top,
      });
      expect(await s.ledger.credit(manualCredit("c3", "acct_a", 1n))).toEqual({ kind: "overflow" });
      expect(await s.ledger.balance("acct_a", CHAIN)).toEqual(top);
      // The source side is full too: a credit to another account overflows it.
      expect(await s.ledger.credit(manualCredit("c4", "acct_b", 1n))).toEqual({ kind: "overflow" });
      expect(await s.ledger.balance(SYSTEM_MANUAL_CREDIT, CHAIN)).toEqual({
        ...zeroBalance(SYSTEM_MANUAL_CREDIT),
        debitsPosted: INT64_MAX,
      });
      expect(await s.ledger.balance("acct_b", CHAIN)).toEqual(zeroBalance("acct_b"));

      // Another chain is another balance; balances() lists chains in order.
      expect((await s.ledger.credit(manualCredit("c5", "acct_a", 7n, "solana"))).kind).toBe("credited");
      expect((await s.ledger.credit(manualCredit("c6", "acct_a", 3n, "arbitrum"))).kind).toBe("credited");
      expect(await s.ledger.balances("acct_a")).toEqual([
        { ...zeroBalance("acct_a", "arbitrum"), creditsPosted: 3n },
        top,
        { ...zeroBalance("acct_a", "solana"), creditsPosted: 7n },
      ]);
      expect(await s.ledger.balances("nobody")).toEqual([]);
      expect(await s.ledger.balance("nobody", CHAIN)).toEqual(zeroBalance("nobody"));
    }));

  it("accounts: exists, billing account in one read, default chain set and changed", () =>
    withStores(async (s) => {
      await accounts(s, "acct_a");
      expect(await s.ledger.accountExists("acct_a")).toBe(true);
      expect(await s.ledger.accountExists("nobody")).toBe(false);
      expect(await s.ledger.billingAccount("nobody")).toBeUndefined();
      expect(await s.ledger.billingAccount("acct_a")).toEqual({ defaultChain: undefined });
      expect(await s.ledger.defaultChain("acct_a")).toBeUndefined();
      await s.ledger.setDefaultChain("acct_a", "base", 5);
      expect(await s.ledger.defaultChain("acct_a")).toBe("base");
      expect(await s.ledger.billingAccount("acct_a")).toEqual({ defaultChain: "base" });
      await s.ledger.setDefaultChain("acct_a", "solana", 6);
      expect(await s.ledger.defaultChain("acct_a")).toBe("solana");
    }));

  it("listHolds: an account's holds newest first, with their outcomes, paged by seq", () =>
    withStores(async (s) => {
      await accounts(s, "acct_a", "acct_b");
      await s.ledger.credit(manualCredit("ca", "acct_a", 1000n));
      await s.ledger.credit(manualCredit("cb", "acct_b", 1000n));
      for (let i = 1; i <= 5; i++) {
        await s.ledger.placeHold(newHold(`a${i}`, "acct_a", 10n, i));
        await s.ledger.placeHold(newHold(`b${i}`, "acct_b", 10n, i));
      }
      await s.ledger.settle("a2", 4n, USAGE, 9, "");
      const all = await s.ledger.listHolds("acct_a", FIRST_PAGE, 10);
      expect(all.map((h) => h.hold.id)).toEqual(["a5", "a4", "a3", "a2", "a1"]);
      for (const h of all) expect(await s.ledger.getHold(h.hold.id)).toEqual(h);
      expect(all[3]!.resolution).toMatchObject({ status: "settled", amount: 4n });
      const pages: string[][] = [];
      let before = FIRST_PAGE;
      for (;;) {
        const page = await s.ledger.listHolds("acct_a", before, 2);
        if (page.length === 0) break;
        pages.push(page.map((h) => h.hold.id));
        before = BigInt(page.at(-1)!.hold.seq);
      }
      expect(pages).toEqual([["a5", "a4"], ["a3", "a2"], ["a1"]]);
      expect(await s.ledger.listHolds("nobody", FIRST_PAGE, 10)).toEqual([]);
    }));

  it("settlements: off-chain when operator credit backs the charge, onchain for what deposits back; queued → submitted → confirmed", () =>
    withStores(async (s) => {
      await accounts(s, "acct_a");
      await s.ledger.credit(manualCredit("c1", "acct_a", 1000n));
      await scan(s, [deposit("0xd1", "acct_a", 300n)]);
      await call(s, "s1", "acct_a", 400n, 10, 500n);
      await call(s, "s2", "acct_a", 100n, 20);
      await s.ledger.placeHold(newHold("s3", "acct_a", 50n));
      await s.ledger.void("s3", "released", 30);

      const views = await s.ledger.settlements(["s1", "s2", "s3", "missing"]);
      expect([...views.keys()]).toEqual(["s1", "s2"]);
      expect(views.get("s1")).toEqual({
        holdId: "s1",
        status: "queued",
        onchainAmount: 300n,
        offchainAmount: 100n,
        transferId: "",
        txHash: "",
      });
      expect(views.get("s2")).toEqual({
        holdId: "s2",
        status: "offchain",
        onchainAmount: 0n,
        offchainAmount: 100n,
        transferId: "",
        txHash: "",
      });

      expect(await s.work.batchIntents(CHAIN, true, 0, TREASURY, ids(), 100)).toBe(1);
      expect((await s.ledger.settlements(["s1"])).get("s1")).toMatchObject({
        status: "queued",
        transferId: "st1",
      });
      expect(await s.work.transfer("st1")).toMatchObject({
        kind: "settlement",
        accountId: "acct_a",
        to: TREASURY,
        amount: 300n,
        status: "queued",
        calls: 1,
      });
      await s.work.markPrepared("st1", "0xabc", "signed", 110);
      expect((await s.ledger.settlements(["s1"])).get("s1")).toMatchObject({
        status: "submitted",
        transferId: "st1",
        txHash: "0xabc",
      });
      await s.work.markSent("st1", 200, 120);
      expect((await s.ledger.settlements(["s1"])).get("s1")).toMatchObject({ status: "submitted" });
      await s.work.markConfirmed("st1", 130);
      expect((await s.ledger.settlements(["s1"])).get("s1")).toMatchObject({
        status: "confirmed",
        txHash: "0xabc",
      });
      expect((await s.ledger.settlements(["s2"])).get("s2")).toMatchObject({ status: "offchain" });
    }));

  it("withdraw: what a settled call's hold gave back is withdrawable at once", () =>
    withStores(async (s) => {
      await accounts(s, "acct_a");
      await scan(s, [deposit("0xd1", "acct_a", 300n)]);
      // On PostgreSQL the settlement's release sits beside the balance row (migration 22), which
      // alone still shows the whole deposit held; the withdrawal folds it in first.
      await call(s, "c1", "acct_a", 100n, 5, 300n);
      const w = { id: "w1", accountId: "acct_a", chain: CHAIN, to: "0xdest", amount: 200n, fee: 0n, now: 10 };
      expect((await s.ledger.withdraw(w)).kind).toBe("written");
      expect(await s.ledger.withdraw({ ...w, id: "w2", amount: 1n })).toEqual({
        kind: "insufficient",
        available: 0n,
      });
      expect(await s.ledger.balance("acct_a", CHAIN)).toMatchObject({
        debitsPending: 0n,
        debitsPosted: 300n,
      });
    }));

  it("withdraw: written against backed funds, existing or conflict by id, insufficient when not backed", () =>
    withStores(async (s) => {
      await accounts(s, "acct_a");
      await s.ledger.credit(manualCredit("c1", "acct_a", 1000n));
      const w = (id: string, amount: bigint, now = 10) => ({
        id,
        accountId: "acct_a",
        chain: CHAIN,
        to: "0xdest",
        amount,
        fee: 0n,
        now,
      });
      // Operator credit is spendable but nothing onchain backs it.
      expect(await s.ledger.withdraw(w("w0", 1n))).toEqual({ kind: "insufficient", available: 0n });
      await scan(s, [deposit("0xd1", "acct_a", 300n)]);

      const written = await s.ledger.withdraw(w("w1", 200n));
      const transfer: TransferRow = {
        seq: expect.any(Number),
        id: "w1",
        kind: "withdrawal",
        accountId: "acct_a",
        chain: CHAIN,
        to: "0xdest",
        amount: 200n,
        status: "queued",
        txHash: "",
        raw: "",
        attempts: 0,
        nextAttemptAt: 10,
        lastError: "",
        createdAt: 10,
        confirmedAt: undefined,
        calls: 0,
        fee: 0n,
      };
      expect(written).toEqual({ kind: "written", transfer });
      const first = (written as { transfer: TransferRow }).transfer;
      expect(await s.ledger.withdraw(w("w1", 200n, 99))).toEqual({ kind: "existing", transfer: first });
      expect(await s.ledger.withdraw(w("w1", 150n))).toEqual({ kind: "conflict" });
      expect(await s.ledger.withdraw({ ...w("w1", 200n), to: "0xelse" })).toEqual({ kind: "conflict" });
      expect(await s.ledger.withdraw(w("w2", 101n))).toEqual({ kind: "insufficient", available: 100n });

      // Held funds are not withdrawable either: 1100 available, 1050 held → 50.
      expect((await s.ledger.placeHold(newHold("h1", "acct_a", 1050n))).kind).toBe("placed");
      expect(await s.ledger.withdraw(w("w3", 51n))).toEqual({ kind: "insufficient", available: 50n });
      expect((await s.ledger.withdraw(w("w3", 50n, 20))).kind).toBe("written");

      expect(await s.ledger.balance("acct_a", CHAIN)).toEqual({
        ...zeroBalance("acct_a"),
        debitsPending: 1050n,
        debitsPosted: 250n,
        creditsPosted: 1300n,
      });
      expect(await s.ledger.balance(SYSTEM_WITHDRAWALS, CHAIN)).toEqual({
        ...zeroBalance(SYSTEM_WITHDRAWALS),
        creditsPosted: 250n,
      });
      const listed = await s.ledger.listTransfers("acct_a", "withdrawal", FIRST_PAGE, 10);
      expect(listed.map((t) => t.id)).toEqual(["w3", "w1"]);
      expect(listed[1]).toEqual(first);
      expect(
        (await s.ledger.listTransfers("acct_a", "withdrawal", BigInt(listed[0]!.seq), 10)).map((t) => t.id),
      ).toEqual(["w1"]);
      expect(await s.ledger.listTransfers("acct_a", "settlement", FIRST_PAGE, 10)).toEqual([]);
    }));

  it("withdraw with a fee: amount and fee debited in one transaction to their system accounts, within what may leave; charged once however many attempts", () =>
    withStores(async (s) => {
      await accounts(s, "acct_a");
      await scan(s, [deposit("0xd1", "acct_a", 1000n)]);
      const w = (id: string, amount: bigint, fee: bigint, now = 10) => ({
        id,
        accountId: "acct_a",
        chain: CHAIN,
        to: "0xdest",
        amount,
        fee,
        now,
      });
      // 1000 may leave: 951 + 50 is one unit too many, and nothing is written for it.
      expect(await s.ledger.withdraw(w("w1", 951n, 50n))).toEqual({ kind: "insufficient", available: 1000n });
      expect(await s.ledger.transfer("w1")).toBeUndefined();
      const written = await s.ledger.withdraw(w("w1", 600n, 50n));
      expect(written).toMatchObject({ kind: "written", transfer: { id: "w1", amount: 600n, fee: 50n } });
      expect(await s.ledger.transfer("w1")).toEqual((written as { transfer: TransferRow }).transfer);
      // A retry answers the first withdrawal, whatever the fee is now, and charges nothing more.
      expect(await s.ledger.withdraw(w("w1", 600n, 80n, 20))).toMatchObject({
        kind: "existing",
        transfer: { fee: 50n },
      });
      // What is left: 1000 − 650 = 350; a fee of 0 writes no fee entry.
      expect(await s.ledger.withdraw(w("w2", 301n, 50n))).toEqual({ kind: "insufficient", available: 350n });
      expect((await s.ledger.withdraw(w("w2", 300n, 50n))).kind).toBe("written");
      expect((await s.ledger.withdraw(w("w3", 1n, 0n))).kind).toBe("insufficient");

      expect(await s.ledger.balance("acct_a", CHAIN)).toEqual({
        ...zeroBalance("acct_a"),
        debitsPosted: 1000n,
        creditsPosted: 1000n,
      });
      expect(await s.ledger.balance(SYSTEM_WITHDRAWALS, CHAIN)).toEqual({
        ...zeroBalance(SYSTEM_WITHDRAWALS),
        creditsPosted: 900n,
      });
      expect(await s.ledger.balance(SYSTEM_WITHDRAWAL_FEES, CHAIN)).toEqual({
        ...zeroBalance(SYSTEM_WITHDRAWAL_FEES),
        creditsPosted: 100n,
      });
      // Conservation: what left the account is what the two system accounts hold, and the
      // deposits account gave exactly what the account was credited.
      expect((await s.ledger.balance(SYSTEM_DEPOSITS, CHAIN)).debitsPosted).toBe(1000n);

      // The transfer of w1 fails onchain and is prepared anew, then lands: its fee stays one fee.
      await s.work.markPrepared("w1", "0xtx1", "raw1", 30);
      await s.work.markSent("w1", 40, 31);
      await s.work.markRequeued("w1", "transaction 0xtx1 failed", 41, 41);
      await s.work.markPrepared("w1", "0xtx2", "raw2", 42);
      await s.work.markConfirmed("w1", 50);
      expect(await s.work.transfer("w1")).toMatchObject({ status: "confirmed", fee: 50n, amount: 600n });
      expect((await s.ledger.balance(SYSTEM_WITHDRAWAL_FEES, CHAIN)).creditsPosted).toBe(100n);
      expect(
        (await s.ledger.listTransfers("acct_a", "withdrawal", FIRST_PAGE, 10)).map((t) => t.fee),
      ).toEqual([50n, 50n]);
    }));

  it("deposit addresses: saved once, looked up by account, loaded by family after a seq", () =>
    withStores(async (s) => {
      await accounts(s, "acct_a", "acct_b");
      await s.work.saveDepositAddress("evm", "acct_a", "0xA", 1);
      await s.work.saveDepositAddress("evm", "acct_a", "0xA", 2);
      await s.work.saveDepositAddress("solana", "acct_a", "SoA", 3);
      await s.work.saveDepositAddress("evm", "acct_b", "0xB", 4);
      expect(await s.work.depositAddressOf("acct_a", "evm")).toBe("0xA");
      expect(await s.work.depositAddressOf("acct_a", "solana")).toBe("SoA");
      expect(await s.work.depositAddressOf("acct_b", "solana")).toBeUndefined();
      const evm = await s.work.addressesSince("evm", 0);
      expect(evm).toEqual([
        { seq: expect.any(Number), address: "0xA", accountId: "acct_a" },
        { seq: expect.any(Number), address: "0xB", accountId: "acct_b" },
      ]);
      expect(await s.work.addressesSince("evm", evm[0]!.seq)).toEqual([evm[1]]);
      expect(await s.work.addressesSince("evm", evm[1]!.seq)).toEqual([]);
      expect((await s.work.addressesSince("solana", 0)).map((a) => a.address)).toEqual(["SoA"]);
    }));

  it("recordScan: credits with the cursor, skips a deposit seen before, refuses when the cursor moved", () =>
    withStores(async (s) => {
      await accounts(s, "acct_a", "acct_b", "acct_c");
      expect(await s.work.cursor(CHAIN)).toBeUndefined();
      await s.work.initCursor(CHAIN, 100n, 1);
      await s.work.initCursor(CHAIN, 5n, 2);
      expect(await s.work.cursor(CHAIN)).toBe(100n);

      const d1 = deposit("0xd1", "acct_a", 250n, 101n);
      expect(await s.work.recordScan(CHAIN, 100n, 110n, [d1, deposit("0xd2", "acct_b", 50n, 102n)], 10)).toBe(
        true,
      );
      expect(await s.work.cursor(CHAIN)).toBe(110n);
      expect(await s.ledger.balance("acct_a", CHAIN)).toEqual({
        ...zeroBalance("acct_a"),
        creditsPosted: 250n,
      });
      expect(await s.ledger.balance(SYSTEM_DEPOSITS, CHAIN)).toEqual({
        ...zeroBalance(SYSTEM_DEPOSITS),
        debitsPosted: 300n,
      });
      // An overlapping scan: d1 again is skipped, d3 is new.
      const d3 = deposit("0xd3", "acct_a", 25n, 111n);
      expect(await s.work.recordScan(CHAIN, 110n, 120n, [d1, d3], 20)).toBe(true);
      expect((await s.ledger.balance("acct_a", CHAIN)).creditsPosted).toBe(275n);
      // A scan from a position the cursor has left: nothing written.
      expect(await s.work.recordScan(CHAIN, 100n, 130n, [deposit("0xd4", "acct_a", 1000n)], 30)).toBe(false);
      expect(await s.work.cursor(CHAIN)).toBe(120n);
      expect((await s.ledger.balance("acct_a", CHAIN)).creditsPosted).toBe(275n);
      // Dust: recorded, credited nothing.
      const dust = { ...deposit("0xd5", "acct_a", 0n, 120n), onchainAmount: 999n };
      expect(await s.work.recordScan(CHAIN, 120n, 121n, [dust], 40)).toBe(true);
      expect((await s.ledger.balance("acct_a", CHAIN)).creditsPosted).toBe(275n);

      const listed = await s.ledger.listDeposits("acct_a", 10);
      expect(listed).toEqual([
        { ...dust, chain: CHAIN, credited: true, at: 40 },
        { ...d3, chain: CHAIN, credited: true, at: 20 },
        { ...d1, chain: CHAIN, credited: true, at: 10 },
      ]);
      expect((await s.ledger.listDeposits("acct_a", 2)).map((d) => d.txHash)).toEqual(["0xd5", "0xd3"]);

      // A chain without a cursor takes the scan where it starts.
      expect(await s.work.recordScan("solana", 7n, 8n, [], 50)).toBe(true);
      expect(await s.work.cursor("solana")).toBe(8n);

      // A balance that would pass int64: the deposit is kept, credited nothing.
      await s.ledger.credit(manualCredit("c1", "acct_c", INT64_MAX - 10n));
      const big = deposit("0xd6", "acct_c", 20n, 121n);
      expect(await s.work.recordScan(CHAIN, 121n, 122n, [big], 60)).toBe(true);
      expect((await s.ledger.balance("acct_c", CHAIN)).creditsPosted).toBe(INT64_MAX - 10n);
      expect(await s.ledger.listDeposits("acct_c", 10)).toEqual([
        { ...big, amount: 0n, chain: CHAIN, credited: true, at: 60 },
      ]);

      // Two scans of one range at once: one records it, the other finds the cursor moved.
      const d7 = deposit("0xd7", "acct_b", 5n, 122n);
      const both = await Promise.all([
        s.work.recordScan(CHAIN, 122n, 130n, [d7], 70),
        s.work.recordScan(CHAIN, 122n, 130n, [d7], 70),
      ]);
      expect(both.sort()).toEqual([false, true]);
      expect((await s.ledger.balance("acct_b", CHAIN)).creditsPosted).toBe(55n);
      expect(await s.work.cursor(CHAIN)).toBe(130n);
    }));

  it("replacePending: the pending list is replaced, keeping when a deposit was first seen; listed before credited ones", () =>
    withStores(async (s) => {
      await accounts(s, "acct_a", "acct_b");
      const p1 = deposit("0xp1", "acct_a", 10n, 5n);
      const p2 = deposit("0xp2", "acct_a", 20n, 6n);
      const p3 = deposit("0xp3", "acct_a", 30n, 8n);
      const q = deposit("0xq", "acct_b", 40n, 7n);
      const pending = (d: DepositToCredit, at: number) => ({
        ...d,
        amount: 0n,
        chain: CHAIN,
        credited: false,
        at,
      });
      await s.work.replacePending(CHAIN, [p1, p2, q], 100);
      expect(await s.ledger.listDeposits("acct_a", 10)).toEqual([pending(p1, 100), pending(p2, 100)]);
      expect(await s.ledger.listDeposits("acct_b", 10)).toEqual([pending(q, 100)]);

      await s.work.replacePending(CHAIN, [p2, p3], 200);
      expect(await s.ledger.listDeposits("acct_a", 10)).toEqual([pending(p2, 100), pending(p3, 200)]);
      expect(await s.ledger.listDeposits("acct_b", 10)).toEqual([]);

      const d1 = deposit("0xd1", "acct_a", 70n, 4n);
      await scan(s, [d1], 300);
      expect(await s.ledger.listDeposits("acct_a", 10)).toEqual([
        pending(p2, 100),
        pending(p3, 200),
        { ...d1, chain: CHAIN, credited: true, at: 300 },
      ]);
      // Pending rows are all listed; the limit is on credited ones.
      expect((await s.ledger.listDeposits("acct_a", 0)).map((d) => d.txHash)).toEqual(["0xp2", "0xp3"]);
      await s.work.replacePending(CHAIN, [], 400);
      expect((await s.ledger.listDeposits("acct_a", 10)).map((d) => d.txHash)).toEqual(["0xd1"]);
    }));

  it("batchIntents: one transfer per account once its oldest intent passes the cutoff, or one per call; each intent once", () =>
    withStores(async (s) => {
      await accounts(s, "acct_a", "acct_b");
      await scan(s, [deposit("0xa", "acct_a", 1000n), deposit("0xb", "acct_b", 1000n)]);
      await call(s, "a1", "acct_a", 100n, 10);
      await call(s, "a2", "acct_a", 200n, 20);
      await call(s, "a3", "acct_a", 300n, 30);
      await call(s, "b1", "acct_b", 50n, 50);
      const newId = ids();

      expect(await s.work.batchIntents(CHAIN, false, 5, TREASURY, newId, 100)).toBe(0);
      expect(await s.work.batchIntents(CHAIN, false, 40, TREASURY, newId, 100)).toBe(1);
      expect(await s.work.transfer("st1")).toMatchObject({
        kind: "settlement",
        accountId: "acct_a",
        chain: CHAIN,
        to: TREASURY,
        amount: 600n,
        status: "queued",
        calls: 3,
        createdAt: 100,
        nextAttemptAt: 100,
      });
      expect((await s.work.backlog())[0]).toMatchObject({ unbatchedCalls: 1, unbatchedAmount: 50n });
      expect(await s.work.batchIntents(CHAIN, true, 0, TREASURY, newId, 110)).toBe(1);
      expect(await s.work.transfer("st2")).toMatchObject({ accountId: "acct_b", amount: 50n, calls: 1 });
      expect(await s.work.batchIntents(CHAIN, true, 0, TREASURY, newId, 120)).toBe(0);
      expect(await s.work.batchIntents(CHAIN, false, 1000, TREASURY, newId, 120)).toBe(0);

      await call(s, "a4", "acct_a", 70n, 130);
      await call(s, "a5", "acct_a", 30n, 140);
      expect(await s.work.batchIntents(CHAIN, true, 0, TREASURY, newId, 150)).toBe(2);
      const listed = await s.ledger.listTransfers("acct_a", "settlement", FIRST_PAGE, 10);
      expect(listed.map((t) => [t.id, t.amount, t.calls])).toEqual([
        ["st4", 30n, 1],
        ["st3", 70n, 1],
        ["st1", 600n, 3],
      ]);
      expect((await s.ledger.settlements(["a4", "a5"])).get("a5")).toMatchObject({ transferId: "st4" });

      // Two batchers at once: every intent in exactly one transfer.
      for (let i = 0; i < 10; i++) await call(s, `c${i}`, "acct_a", 10n, 200 + i);
      const made = await Promise.all([
        s.work.batchIntents(CHAIN, true, 0, TREASURY, () => `x${Math.random()}`, 300),
        s.work.batchIntents(CHAIN, true, 0, TREASURY, () => `y${Math.random()}`, 300),
      ]);
      expect(made[0] + made[1]).toBe(10);
      const views = await s.ledger.settlements(Array.from({ length: 10 }, (_, i) => `c${i}`));
      expect(new Set([...views.values()].map((v) => v.transferId)).size).toBe(10);
      expect(await s.work.backlog()).toMatchObject([{ unbatchedCalls: 0, unbatchedAmount: 0n }]);
    }));

  it("openTransfers: signed first, then oldest, only those due; each status change guarded by the state it leaves", () =>
    withStores(async (s) => {
      await accounts(s, "acct_a");
      await scan(s, [deposit("0xa", "acct_a", 1000n)]);
      await call(s, "k1", "acct_a", 10n, 1);
      await call(s, "k2", "acct_a", 20n, 2);
      await call(s, "k3", "acct_a", 30n, 3);
      expect(await s.work.batchIntents(CHAIN, true, 0, TREASURY, ids(), 100)).toBe(3);
      expect(
        (
          await s.ledger.withdraw({
            id: "w1",
            accountId: "acct_a",
            chain: CHAIN,
            to: "0xd",
            amount: 5n,
            fee: 0n,
            now: 150,
          })
        ).kind,
      ).toBe("written");
      const open = async (now: number, limit = 10) =>
        (await s.work.openTransfers(CHAIN, now, limit)).map((t) => t.id);
      expect(await open(1000)).toEqual(["st1", "st2", "st3", "w1"]);
      expect(await open(120)).toEqual(["st1", "st2", "st3"]);

      await s.work.markPrepared("st2", "0xh2", "raw2", 200);
      expect(await open(1000)).toEqual(["st2", "st1", "st3", "w1"]);
      await s.work.markPrepared("st2", "0xother", "rawx", 210);
      expect(await s.work.transfer("st2")).toMatchObject({ status: "prepared", txHash: "0xh2", raw: "raw2" });
      await s.work.markSent("st1", 500, 220);
      expect(await s.work.transfer("st1")).toMatchObject({ status: "queued", nextAttemptAt: 100 });
      await s.work.markSent("st2", 5000, 230);
      expect(await s.work.transfer("st2")).toMatchObject({ status: "sent", nextAttemptAt: 5000 });
      expect(await open(1000)).toEqual(["st1", "st3", "w1"]);
      expect(await open(5000)).toEqual(["st2", "st1", "st3", "w1"]);

      await s.work.markRetry("st1", "rpc down", 3000, 240);
      expect(await s.work.transfer("st1")).toMatchObject({
        status: "queued",
        attempts: 1,
        lastError: "rpc down",
        nextAttemptAt: 3000,
      });
      expect(await open(1000)).toEqual(["st3", "w1"]);

      await s.work.markRequeued("st2", "dropped", 300, 250);
      expect(await s.work.transfer("st2")).toMatchObject({
        status: "queued",
        txHash: "",
        raw: "",
        attempts: 1,
        lastError: "dropped",
        nextAttemptAt: 300,
      });
      await s.work.markRequeued("st3", "not signed yet", 9000, 255);
      expect(await s.work.transfer("st3")).toMatchObject({ status: "queued", attempts: 0, lastError: "" });

      await s.work.markPrepared("st3", "0xh3", "raw3", 260);
      await s.work.markConfirmed("st3", 270);
      const confirmed = await s.work.transfer("st3");
      expect(confirmed).toMatchObject({
        status: "confirmed",
        confirmedAt: 270,
        lastError: "",
        txHash: "0xh3",
      });
      await s.work.markConfirmed("st3", 280);
      await s.work.markRetry("st3", "late", 9999, 290);
      await s.work.markRequeued("st3", "late", 9999, 290);
      expect(await s.work.transfer("st3")).toEqual(confirmed);
      expect(await open(10_000)).toEqual(["st1", "st2", "w1"]);
      expect(await open(10_000, 2)).toEqual(["st1", "st2"]);

      await s.work.markRetry("w1", "x".repeat(600), 160, 300);
      expect((await s.work.transfer("w1"))!.lastError).toBe("x".repeat(500));
      expect(await s.work.transfer("none")).toBeUndefined();
      expect(await s.work.openTransfers("solana", 10_000, 10)).toEqual([]);
    }));

  it("backlog: unbatched calls, open transfers by kind, oldest, last error, confirmed and off-chain totals per chain", () =>
    withStores(async (s) => {
      await accounts(s, "acct_a", "acct_b");
      expect(await s.ledger.backlog()).toEqual([]);
      await scan(s, [deposit("0xa", "acct_a", 1000n)]);
      await s.ledger.credit(manualCredit("c1", "acct_a", 500n));
      await call(s, "c1", "acct_a", 300n, 10); // onchain 300
      await call(s, "c2", "acct_a", 900n, 20); // onchain 700, off-chain 200
      await call(s, "c3", "acct_a", 100n, 30); // off-chain 100
      expect(await s.work.batchIntents(CHAIN, true, 0, TREASURY, ids(), 40)).toBe(2);
      await s.work.markPrepared("st1", "0x1", "raw", 45);
      await s.work.markConfirmed("st1", 50);
      await s.work.markRetry("st2", "rpc down", 60, 55);

      await scan(s, [deposit("So1", "acct_b", 100n)], 60, "solana");
      await call(s, "d1", "acct_b", 40n, 70, 40n, "solana");
      const withdrawal = {
        id: "w1",
        accountId: "acct_b",
        chain: "solana",
        to: "So2",
        amount: 30n,
        fee: 0n,
        now: 80,
      };
      expect((await s.ledger.withdraw(withdrawal)).kind).toBe("written");

      const expected = [
        {
          chain: CHAIN,
          unbatchedCalls: 0,
          unbatchedAmount: 0n,
          openSettlements: 1,
          openSettlementAmount: 700n,
          openWithdrawals: 0,
          openWithdrawalAmount: 0n,
          oldestAt: 40,
          lastError: "rpc down",
          confirmedSettlementAmount: 300n,
          offchainAmount: 300n,
        },
        {
          chain: "solana",
          unbatchedCalls: 1,
          unbatchedAmount: 40n,
          openSettlements: 0,
          openSettlementAmount: 0n,
          openWithdrawals: 1,
          openWithdrawalAmount: 30n,
          oldestAt: 70,
          lastError: "",
          confirmedSettlementAmount: 0n,
          offchainAmount: 0n,
        },
      ];
      expect(await s.ledger.backlog()).toEqual(expected);
      expect(await s.work.backlog()).toEqual(expected);
      // The health probe's glance: the same backlog, counted up to a bound (issue 29).
      expect(await s.work.backlogGlance(CHAIN, 100)).toEqual({ waiting: 1, lastError: "rpc down" });
      expect(await s.work.backlogGlance("solana", 100)).toEqual({ waiting: 2, lastError: "" });
      expect(await s.work.backlogGlance("solana", 1)).toEqual({ waiting: 1, lastError: "" });
      expect(await s.work.backlogGlance("arbitrum", 100)).toEqual({ waiting: 0, lastError: "" });
    }));

  it("x402: authorised from system:x402, held, settled, and closed returning what the call did not spend; closed once; unknown is not-found", () =>
    withStores(async (s) => {
      await accounts(s, "acct_x");
      expect(await s.ledger.authoriseX402(x402Payment("pay_1", "h1", 1000n, 10))).toBe("authorised");
      expect(await s.ledger.balance("acct_x", CHAIN)).toEqual({
        ...zeroBalance("acct_x"),
        creditsPosted: 1000n,
      });
      expect(await s.ledger.balance(SYSTEM_X402, CHAIN)).toEqual({
        ...zeroBalance(SYSTEM_X402),
        debitsPosted: 1000n,
      });
      await call(s, "h1", "acct_x", 370n, 11, 1000n);
      const closing = {
        id: "pay_1",
        status: "settled",
        settled: 370n,
        txHash: "0xcollected",
        error: "",
        returned: 630n,
        now: 12,
      } as const;
      expect(await s.ledger.closeX402(closing)).toBe("closed");
      const account = await s.ledger.balance("acct_x", CHAIN);
      expect(account).toEqual({ ...zeroBalance("acct_x"), creditsPosted: 1000n, debitsPosted: 1000n });
      expect(availableOf(account)).toBe(0n);
      expect(await s.ledger.balance(SYSTEM_X402, CHAIN)).toEqual({
        ...zeroBalance(SYSTEM_X402),
        debitsPosted: 1000n,
        creditsPosted: 630n,
      });
      expect(await s.ledger.balance(SYSTEM_REVENUE, CHAIN)).toEqual({
        ...zeroBalance(SYSTEM_REVENUE),
        creditsPosted: 370n,
      });
      const read = await s.ledger.x402Payments(["h1", "h_unknown"]);
      expect([...read.keys()]).toEqual(["h1"]);
      expect(read.get("h1")).toEqual({
        id: "pay_1",
        holdId: "h1",
        accountId: "acct_x",
        chain: CHAIN,
        scheme: "upto",
        payer: "0xpayer",
        authorised: 1000n,
        payload: '{"payment":"pay_1"}',
        status: "settled",
        settled: 370n,
        txHash: "0xcollected",
        error: "",
        createdAt: 10,
        closedAt: 12,
      });
      // Closed once: a second closing, however it differs, changes nothing.
      expect(await s.ledger.closeX402({ ...closing, status: "failed", returned: 0n, now: 13 })).toBe(
        "already-closed",
      );
      expect(await s.ledger.balance("acct_x", CHAIN)).toEqual(account);
      expect((await s.ledger.x402Payments(["h1"])).get("h1")).toEqual(read.get("h1"));
      expect(await s.ledger.closeX402({ ...closing, id: "pay_unknown" })).toBe("not-found");
      expect(await s.ledger.x402Payments([])).toEqual(new Map());
    }));

  it("x402: a payment id seen before is replayed and writes nothing; a hold paid for twice throws and writes nothing", () =>
    withStores(async (s) => {
      await accounts(s, "acct_x");
      expect(await s.ledger.authoriseX402(x402Payment("pay_1", "h1", 500n))).toBe("authorised");
      const first = await s.ledger.x402Payments(["h1"]);
      const account = await s.ledger.balance("acct_x", CHAIN);
      const system = await s.ledger.balance(SYSTEM_X402, CHAIN);
      expect(await s.ledger.authoriseX402(x402Payment("pay_1", "h1", 500n))).toBe("replayed");
      // The same payment id for another call or amount is still the payment already seen.
      expect(await s.ledger.authoriseX402(x402Payment("pay_1", "h2", 900n, 5))).toBe("replayed");
      await expect(s.ledger.authoriseX402(x402Payment("pay_2", "h1", 700n))).rejects.toThrow();
      expect(await s.ledger.balance("acct_x", CHAIN)).toEqual(account);
      expect(await s.ledger.balance(SYSTEM_X402, CHAIN)).toEqual(system);
      expect(await s.ledger.x402Payments(["h1", "h2"])).toEqual(first);
      // Found by its id, whatever its call: what refuses a replay before the facilitator is asked.
      expect(await s.ledger.x402Payment("pay_1")).toEqual(first.get("h1"));
      expect(await s.ledger.x402Payment("pay_unknown")).toBeUndefined();
      // Many connections presenting one new payment at once: one authorises it, the rest replay.
      const answers = await Promise.all(
        Array.from({ length: 8 }, () => s.ledger.authoriseX402(x402Payment("pay_3", "h3", 40n))),
      );
      expect(answers.filter((a) => a === "authorised")).toHaveLength(1);
      expect(answers.filter((a) => a === "replayed")).toHaveLength(7);
      expect(await s.ledger.balance("acct_x", CHAIN)).toEqual({ ...account, creditsPosted: 540n });
    }));

  it("x402: a return beyond the account's available funds, or beyond the payment, throws and writes nothing", () =>
    withStores(async (s) => {
      await accounts(s, "acct_x");
      expect(await s.ledger.authoriseX402(x402Payment("pay_1", "h1", 500n))).toBe("authorised");
      // The call is still running: its hold keeps 400 of the 500 spoken for.
      expect((await s.ledger.placeHold(newHold("h1", "acct_x", 400n, 2))).kind).toBe("placed");
      const account = await s.ledger.balance("acct_x", CHAIN);
      const system = await s.ledger.balance(SYSTEM_X402, CHAIN);
      const payment = await s.ledger.x402Payments(["h1"]);
      const closing = {
        id: "pay_1",
        status: "unused",
        settled: 0n,
        txHash: "",
        error: "",
        returned: 500n,
        now: 3,
      } as const;
      await expect(s.ledger.closeX402(closing)).rejects.toThrow(/100 available/);
      await expect(s.ledger.closeX402({ ...closing, returned: 501n })).rejects.toThrow(/more than its 500/);
      await expect(s.ledger.closeX402({ ...closing, returned: -1n })).rejects.toThrow(/negative/);
      expect(await s.ledger.balance("acct_x", CHAIN)).toEqual(account);
      expect(await s.ledger.balance(SYSTEM_X402, CHAIN)).toEqual(system);
      expect(await s.ledger.x402Payments(["h1"])).toEqual(payment);
      expect(payment.get("h1")).toMatchObject({ status: "authorised", closedAt: undefined });
    }));

  it("x402: a released call's payment closes as unused, returning all it authorised", () =>
    withStores(async (s) => {
      await accounts(s, "acct_x");
      expect(await s.ledger.authoriseX402({ ...x402Payment("pay_1", "h1", 800n), scheme: "exact" })).toBe(
        "authorised",
      );
      expect((await s.ledger.placeHold(newHold("h1", "acct_x", 800n, 2))).kind).toBe("placed");
      expect((await s.ledger.void("h1", "released", 3)).kind).toBe("resolved");
      expect(
        await s.ledger.closeX402({
          id: "pay_1",
          status: "unused",
          settled: 0n,
          txHash: "",
          error: "",
          returned: 800n,
          now: 4,
        }),
      ).toBe("closed");
      expect(await s.ledger.balance("acct_x", CHAIN)).toEqual({
        ...zeroBalance("acct_x"),
        creditsPosted: 800n,
        debitsPosted: 800n,
      });
      expect(await s.ledger.balance(SYSTEM_X402, CHAIN)).toEqual({
        ...zeroBalance(SYSTEM_X402),
        debitsPosted: 800n,
        creditsPosted: 800n,
      });
      expect((await s.ledger.x402Payments(["h1"])).get("h1")).toMatchObject({
        scheme: "exact",
        status: "unused",
        settled: 0n,
        closedAt: 4,
      });
    }));

  it("x402: a payment whose collection failed closes with the charge still owed and the rest returned", () =>
    withStores(async (s) => {
      await accounts(s, "acct_x");
      expect(await s.ledger.authoriseX402(x402Payment("pay_1", "h1", 300n))).toBe("authorised");
      await call(s, "h1", "acct_x", 120n, 2, 300n);
      const failed = {
        id: "pay_1",
        status: "failed",
        settled: 0n,
        txHash: "",
        error: "transfer reverted",
        returned: 180n,
        now: 3,
      } as const;
      expect(await s.ledger.closeX402(failed)).toBe("closed");
      expect((await s.ledger.x402Payments(["h1"])).get("h1")).toMatchObject({
        status: "failed",
        error: "transfer reverted",
        closedAt: 3,
      });
      expect(await s.ledger.balance(SYSTEM_X402, CHAIN)).toMatchObject({
        debitsPosted: 300n,
        creditsPosted: 180n,
      });
    }));

  it("x402: the open payments are those still authorised and created before the cutoff, oldest first, at most the limit", () =>
    withStores(async (s) => {
      await accounts(s, "acct_x");
      // Beyond 2^53: an amount read through a JavaScript number would come back changed.
      const large = 2n ** 60n + 1n;
      const authorise = async (payment: NewX402Payment) =>
        expect(await s.ledger.authoriseX402(payment)).toBe("authorised");
      await authorise(x402Payment("pay_settled", "h_settled", 300n, 10));
      await authorise(x402Payment("pay_unused", "h_unused", 200n, 15));
      await authorise({ ...x402Payment("pay_d", "h_d", large, 20), scheme: "exact", payer: "0xOtherPayer" });
      // Created in the same millisecond as pay_d: their ids order them.
      await authorise(x402Payment("pay_c", "h_c", 40n, 20));
      await authorise(x402Payment("pay_b", "h_b", 50n, 30));
      await authorise(x402Payment("pay_failed", "h_failed", 60n, 35));
      // At the cutoff, not before it.
      await authorise(x402Payment("pay_at_cutoff", "h_at_cutoff", 70n, 45));
      await authorise(x402Payment("pay_late", "h_late", 80n, 50));
      const closing = (id: string, returned: bigint) =>
        ({ id, status: "unused", settled: 0n, txHash: "", error: "", returned, now: 60 }) as const;
      await call(s, "h_settled", "acct_x", 120n, 11, 300n);
      expect(
        await s.ledger.closeX402({
          ...closing("pay_settled", 180n),
          status: "settled",
          settled: 120n,
          txHash: "0xcollected",
        }),
      ).toBe("closed");
      expect(await s.ledger.closeX402(closing("pay_unused", 200n))).toBe("closed");
      await call(s, "h_failed", "acct_x", 60n, 36);
      expect(
        await s.ledger.closeX402({
          ...closing("pay_failed", 0n),
          status: "failed",
          error: "transfer reverted",
        }),
      ).toBe("closed");

      const open = await s.ledger.openX402Payments(45, 100);
      expect(open.map((p) => p.id)).toEqual(["pay_c", "pay_d", "pay_b"]);
      expect(open[1]).toEqual({
        id: "pay_d",
        holdId: "h_d",
        accountId: "acct_x",
        chain: CHAIN,
        scheme: "exact",
        payer: "0xOtherPayer",
        authorised: large,
        payload: '{"payment":"pay_d"}',
        status: "authorised",
        settled: 0n,
        txHash: "",
        error: "",
        createdAt: 20,
        closedAt: undefined,
      });
      // The same rows as the read by hold: nothing of a payment is lost on the way out.
      const byHold = await s.ledger.x402Payments(["h_c", "h_d", "h_b"]);
      expect(open).toEqual([byHold.get("h_c"), byHold.get("h_d"), byHold.get("h_b")]);
      expect((await s.ledger.openX402Payments(45, 2)).map((p) => p.id)).toEqual(["pay_c", "pay_d"]);
      expect((await s.ledger.openX402Payments(21, 100)).map((p) => p.id)).toEqual(["pay_c", "pay_d"]);
      expect((await s.ledger.openX402Payments(51, 100)).map((p) => p.id)).toEqual([
        "pay_c",
        "pay_d",
        "pay_b",
        "pay_at_cutoff",
        "pay_late",
      ]);
      expect(await s.ledger.openX402Payments(20, 100)).toEqual([]);
      // Closed, a payment is no longer open.
      expect(await s.ledger.closeX402(closing("pay_c", 40n))).toBe("closed");
      expect((await s.ledger.openX402Payments(45, 2)).map((p) => p.id)).toEqual(["pay_d", "pay_b"]);
    }));

  it("x402: a collection is recorded once, moving no money; a collected payment closes only as settled with what it collected, its return posted", () =>
    withStores(async (s) => {
      await accounts(s, "acct_x");
      expect(await s.ledger.authoriseX402(x402Payment("pay_1", "h1", 1000n, 10))).toBe("authorised");
      expect(await s.ledger.authoriseX402(x402Payment("pay_2", "h2", 50n, 10))).toBe("authorised");
      await call(s, "h1", "acct_x", 370n, 11, 1000n);
      const balances = async () => [
        await s.ledger.balance("acct_x", CHAIN),
        await s.ledger.balance(SYSTEM_X402, CHAIN),
        await s.ledger.balance(SYSTEM_REVENUE, CHAIN),
      ];
      const before = await balances();
      const collection = { id: "pay_1", collected: 370n, txHash: "0xcollected", now: 12 } as const;
      expect(await s.ledger.recordX402Collection(collection)).toBe("recorded");
      expect(await balances()).toEqual(before);
      const collected = (await s.ledger.x402Payments(["h1"])).get("h1");
      expect(collected).toEqual({
        id: "pay_1",
        holdId: "h1",
        accountId: "acct_x",
        chain: CHAIN,
        scheme: "upto",
        payer: "0xpayer",
        authorised: 1000n,
        payload: '{"payment":"pay_1"}',
        status: "collected",
        settled: 370n,
        txHash: "0xcollected",
        error: "",
        createdAt: 10,
        collectedAt: 12,
        closedAt: undefined,
        clearedAt: undefined,
      });
      // Recorded once: a second collection, however it differs, writes nothing.
      expect(await s.ledger.recordX402Collection({ ...collection, collected: 1000n, now: 13 })).toBe(
        "not-authorised",
      );
      expect(await s.ledger.recordX402Collection({ ...collection, id: "pay_unknown" })).toBe("not-found");
      // A collection the payment cannot have is a caller's bug: it throws and writes nothing.
      const unchanged = await s.ledger.x402Payments(["h2"]);
      const refused = { id: "pay_2", collected: 40n, txHash: "0xother", now: 13 } as const;
      await expect(s.ledger.recordX402Collection({ ...refused, collected: 51n })).rejects.toThrow(
        /more than its 50/,
      );
      await expect(s.ledger.recordX402Collection({ ...refused, collected: 0n })).rejects.toThrow(
        /a collection of 0/,
      );
      await expect(s.ledger.recordX402Collection({ ...refused, txHash: "" })).rejects.toThrow(
        /without its transaction/,
      );
      expect(await s.ledger.x402Payments(["h2"])).toEqual(unchanged);

      // Closed only as it was collected: another status, amount or transaction throws and
      // writes nothing, return included.
      const closing = {
        id: "pay_1",
        status: "settled",
        settled: 370n,
        txHash: "0xcollected",
        error: "",
        returned: 630n,
        now: 14,
      } as const;
      for (const wrong of [
        { ...closing, settled: 371n },
        { ...closing, txHash: "0xanother" },
        { ...closing, status: "unused", settled: 0n, txHash: "" },
        { ...closing, status: "failed", settled: 0n, txHash: "", error: "reverted" },
        { ...closing, status: "collected" },
      ] as const) {
        await expect(s.ledger.closeX402(wrong)).rejects.toThrow(/x402 payment pay_1: (collected|a closing)/);
      }
      expect(await balances()).toEqual(before);
      expect((await s.ledger.x402Payments(["h1"])).get("h1")).toEqual(collected);

      expect(await s.ledger.closeX402(closing)).toBe("closed");
      expect((await s.ledger.x402Payments(["h1"])).get("h1")).toEqual({
        ...collected,
        status: "settled",
        closedAt: 14,
      });
      expect(await s.ledger.balance("acct_x", CHAIN)).toEqual({
        ...zeroBalance("acct_x"),
        creditsPosted: 1050n,
        debitsPosted: 1000n,
      });
      expect(await s.ledger.balance(SYSTEM_X402, CHAIN)).toEqual({
        ...zeroBalance(SYSTEM_X402),
        debitsPosted: 1050n,
        creditsPosted: 630n,
      });
      expect(await s.ledger.closeX402(closing)).toBe("already-closed");
      expect(await s.ledger.recordX402Collection(collection)).toBe("not-authorised");
      // A closing as collected is refused from authorised too.
      await expect(
        s.ledger.closeX402({ ...closing, id: "pay_2", status: "collected", returned: 0n }),
      ).rejects.toThrow(/a closing as collected/);
      expect(await s.ledger.x402Payments(["h2"])).toEqual(unchanged);
    }));

  it("x402: collected payments are open until closed, with the authorised ones, oldest first", () =>
    withStores(async (s) => {
      await accounts(s, "acct_x");
      for (const [id, at] of [
        ["pay_a", 10],
        ["pay_b", 20],
        ["pay_c", 30],
        ["pay_late", 50],
      ] as const) {
        expect(await s.ledger.authoriseX402(x402Payment(id, `h_${id}`, 100n, at))).toBe("authorised");
      }
      await call(s, "h_pay_b", "acct_x", 60n, 21, 100n);
      const collection = { id: "pay_b", collected: 60n, txHash: "0xb", now: 22 } as const;
      expect(await s.ledger.recordX402Collection(collection)).toBe("recorded");
      expect(await s.ledger.recordX402Collection({ ...collection, id: "pay_late", now: 51 })).toBe(
        "recorded",
      );
      expect(
        await s.ledger.closeX402({
          id: "pay_a",
          status: "unused",
          settled: 0n,
          txHash: "",
          error: "",
          returned: 100n,
          now: 40,
        }),
      ).toBe("closed");
      const open = await s.ledger.openX402Payments(45, 100);
      expect(open.map((p) => [p.id, p.status])).toEqual([
        ["pay_b", "collected"],
        ["pay_c", "authorised"],
      ]);
      expect(open[0]).toMatchObject({ settled: 60n, txHash: "0xb", collectedAt: 22, closedAt: undefined });
      expect((await s.ledger.openX402Payments(51, 100)).map((p) => p.id)).toEqual([
        "pay_b",
        "pay_c",
        "pay_late",
      ]);
      expect(
        await s.ledger.closeX402({
          id: "pay_b",
          status: "settled",
          settled: 60n,
          txHash: "0xb",
          error: "",
          returned: 40n,
          now: 46,
        }),
      ).toBe("closed");
      expect((await s.ledger.openX402Payments(51, 100)).map((p) => p.id)).toEqual(["pay_c", "pay_late"]);
      // pay_late's hold was never placed: its collection stands until its call settles.
      await call(s, "h_pay_late", "acct_x", 60n, 52, 100n);
      expect(
        await s.ledger.closeX402({
          id: "pay_late",
          status: "settled",
          settled: 60n,
          txHash: "0xb",
          error: "",
          returned: 40n,
          now: 53,
        }),
      ).toBe("closed");
    }));

  it("x402: a payer's failed payments are listed until an operator clears them; another payer's are not; a later failure is listed again", () =>
    withStores(async (s) => {
      await accounts(s, "acct_x");
      /** A payment of `payer` whose call charged 30 of 100, closed as `status`. */
      const closed = async (
        id: string,
        payer: string,
        at: number,
        status: "failed" | "settled" | "unused",
      ) => {
        expect(await s.ledger.authoriseX402({ ...x402Payment(id, `h_${id}`, 100n, at), payer })).toBe(
          "authorised",
        );
        const charge = status === "unused" ? 0n : 30n;
        if (charge > 0n) await call(s, `h_${id}`, "acct_x", charge, at, 100n);
        expect(
          await s.ledger.closeX402({
            id,
            status,
            settled: status === "settled" ? charge : 0n,
            txHash: status === "settled" ? `0x${id}` : "",
            error: status === "failed" ? "transfer reverted" : "",
            returned: 100n - charge,
            now: at + 1,
          }),
        ).toBe("closed");
      };
      await closed("pay_f2", "0xpayer", 20, "failed");
      await closed("pay_f1", "0xpayer", 10, "failed");
      await closed("pay_ok", "0xpayer", 15, "settled");
      await closed("pay_unused", "0xpayer", 16, "unused");
      await closed("pay_other", "0xother", 12, "failed");
      // Open payments are not failures (yet).
      expect(await s.ledger.authoriseX402(x402Payment("pay_open", "h_open", 100n, 5))).toBe("authorised");

      const failed = await s.ledger.failedX402Payments("0xpayer", 10);
      expect(failed.map((p) => p.id)).toEqual(["pay_f1", "pay_f2"]);
      expect(failed[0]).toMatchObject({
        payer: "0xpayer",
        status: "failed",
        error: "transfer reverted",
        closedAt: 11,
        clearedAt: undefined,
      });
      expect((await s.ledger.failedX402Payments("0xpayer", 1)).map((p) => p.id)).toEqual(["pay_f1"]);
      expect((await s.ledger.failedX402Payments("0xother", 10)).map((p) => p.id)).toEqual(["pay_other"]);
      expect(await s.ledger.failedX402Payments("0xnobody", 10)).toEqual([]);

      expect(await s.ledger.clearFailedX402("0xpayer", 30)).toBe(2);
      expect(await s.ledger.failedX402Payments("0xpayer", 10)).toEqual([]);
      const cleared = await s.ledger.x402Payments(["h_pay_f1", "h_pay_f2", "h_pay_ok", "h_pay_other"]);
      expect(cleared.get("h_pay_f1")).toMatchObject({ status: "failed", clearedAt: 30 });
      expect(cleared.get("h_pay_f2")).toMatchObject({ status: "failed", clearedAt: 30 });
      expect(cleared.get("h_pay_ok")?.clearedAt).toBeUndefined();
      expect(cleared.get("h_pay_other")?.clearedAt).toBeUndefined();
      expect((await s.ledger.failedX402Payments("0xother", 10)).map((p) => p.id)).toEqual(["pay_other"]);
      // Cleared once: clearing again clears nothing and keeps the first time.
      expect(await s.ledger.clearFailedX402("0xpayer", 31)).toBe(0);
      expect(await s.ledger.clearFailedX402("0xnobody", 31)).toBe(0);
      expect((await s.ledger.x402Payments(["h_pay_f1"])).get("h_pay_f1")?.clearedAt).toBe(30);

      await closed("pay_f3", "0xpayer", 40, "failed");
      expect((await s.ledger.failedX402Payments("0xpayer", 10)).map((p) => p.id)).toEqual(["pay_f3"]);
      expect(await s.ledger.clearFailedX402("0xother", 50)).toBe(1);
      expect(await s.ledger.failedX402Payments("0xother", 10)).toEqual([]);
    }));

  it("x402: expireHolds leaves a due hold whose payment is collected pending, and expires one whose payment is authorised", () =>
    withStores(async (s) => {
      await accounts(s, "acct_x");
      expect(await s.ledger.authoriseX402(x402Payment("pay_c", "h_c", 500n, 1))).toBe("authorised");
      expect(await s.ledger.authoriseX402(x402Payment("pay_a", "h_a", 500n, 1))).toBe("authorised");
      expect((await s.ledger.placeHold(newHold("h_c", "acct_x", 400n, 2))).kind).toBe("placed");
      expect((await s.ledger.placeHold(newHold("h_a", "acct_x", 400n, 3))).kind).toBe("placed");
      // h_c's payment was collected (its call's settle not yet confirmed); both holds are due.
      expect(
        await s.ledger.recordX402Collection({ id: "pay_c", collected: 250n, txHash: "0xc", now: 4 }),
      ).toBe("recorded");
      expect(await s.ledger.expireHolds(100, 100, 10)).toBe(1);
      expect((await s.ledger.getHold("h_a"))?.resolution).toMatchObject({ status: "expired", amount: 0n });
      expect((await s.ledger.getHold("h_c"))?.resolution).toBeUndefined();
      expect(await s.ledger.expireHolds(100, 101, 10)).toBe(0);
      expect((await s.ledger.getHold("h_c"))?.resolution).toBeUndefined();
      expect(await s.ledger.balance("acct_x", CHAIN)).toMatchObject({ debitsPending: 400n });
      // The recovery pass settles it and closes the payment as collected.
      expect((await s.ledger.settle("h_c", 250n, USAGE, 102, "")).kind).toBe("resolved");
      expect(
        await s.ledger.closeX402({
          id: "pay_c",
          status: "settled",
          settled: 250n,
          txHash: "0xc",
          error: "",
          returned: 250n,
          now: 103,
        }),
      ).toBe("closed");
      expect(
        await s.ledger.closeX402({
          id: "pay_a",
          status: "unused",
          settled: 0n,
          txHash: "",
          error: "",
          returned: 500n,
          now: 103,
        }),
      ).toBe("closed");
      expect(await s.ledger.balance("acct_x", CHAIN)).toEqual({
        ...zeroBalance("acct_x"),
        creditsPosted: 1000n,
        debitsPosted: 1000n,
      });
    }));

  it("x402: a collection begun is marked on an authorised payment only, moving no money; expireHolds leaves its hold pending until the payment ends", () =>
    withStores(async (s) => {
      await accounts(s, "acct_x");
      expect(await s.ledger.authoriseX402(x402Payment("pay_m", "h_m", 500n, 1))).toBe("authorised");
      expect(await s.ledger.authoriseX402(x402Payment("pay_u", "h_u", 500n, 1))).toBe("authorised");
      expect((await s.ledger.placeHold(newHold("h_m", "acct_x", 400n, 2))).kind).toBe("placed");
      expect((await s.ledger.placeHold(newHold("h_u", "acct_x", 400n, 3))).kind).toBe("placed");
      const before = await s.ledger.balance("acct_x", CHAIN);
      expect(await s.ledger.markX402Collecting("pay_m", 4)).toBe("marked");
      expect(await s.ledger.markX402Collecting("pay_missing", 4)).toBe("not-found");
      expect(await s.ledger.balance("acct_x", CHAIN)).toEqual(before);
      expect(await s.ledger.x402Payment("pay_m")).toMatchObject({ status: "authorised", collectingAt: 4 });
      expect(await s.ledger.x402Payment("pay_u")).toMatchObject({ collectingAt: undefined });
      // A later collection of the same payment (a stream's, retried) marks it again.
      expect(await s.ledger.markX402Collecting("pay_m", 5)).toBe("marked");
      expect((await s.ledger.openX402Payments(100, 10)).map((p) => [p.id, p.collectingAt])).toEqual([
        ["pay_m", 5],
        ["pay_u", undefined],
      ]);
      // Both holds are due: the chain may have taken pay_m's collection, so its hold stays.
      expect(await s.ledger.expireHolds(100, 100, 10)).toBe(1);
      expect((await s.ledger.getHold("h_u"))?.resolution).toMatchObject({ status: "expired" });
      expect((await s.ledger.getHold("h_m"))?.resolution).toBeUndefined();
      expect(await s.ledger.expireHolds(100, 101, 10)).toBe(0);
      // Still so once its collection is recorded; the recovery pass settles it and closes it.
      expect(
        await s.ledger.recordX402Collection({ id: "pay_m", collected: 300n, txHash: "0xm", now: 102 }),
      ).toBe("recorded");
      expect(await s.ledger.markX402Collecting("pay_m", 103)).toBe("not-authorised");
      expect(await s.ledger.expireHolds(100, 103, 10)).toBe(0);
      expect((await s.ledger.settle("h_m", 300n, USAGE, 104, "")).kind).toBe("resolved");
      for (const [id, settled, txHash, returned] of [
        ["pay_m", 300n, "0xm", 200n],
        ["pay_u", 0n, "", 500n],
      ] as const) {
        const status = settled > 0n ? "settled" : "unused";
        expect(await s.ledger.closeX402({ id, status, settled, txHash, error: "", returned, now: 105 })).toBe(
          "closed",
        );
      }
      expect(await s.ledger.markX402Collecting("pay_u", 106)).toBe("not-authorised");
      expect(await s.ledger.x402Payment("pay_m")).toMatchObject({ status: "settled", collectingAt: 5 });
      expect(await s.ledger.balance("acct_x", CHAIN)).toEqual({
        ...zeroBalance("acct_x"),
        creditsPosted: 1000n,
        debitsPosted: 1000n,
      });
    }));

  it("raises: raised by pass, a retry holds nothing more, another amount conflicts, short funds write nothing, unknown is not-found", () =>
    withStores(async (s) => {
      await accounts(s, "acct_a");
      await s.ledger.credit(manualCredit("c1", "acct_a", 1000n));
      await s.ledger.placeHold(newHold("h1", "acct_a", 300n, 10));
      const raised = await s.ledger.raiseHold(newRaise("h1", 2, 200n, 11));
      expect(raised).toEqual({
        kind: "raised",
        state: {
          hold: { ...newHold("h1", "acct_a", 300n, 10), raised: 200n, seq: expect.any(Number) },
          resolution: undefined,
        },
      });
      const state = (raised as { state: HoldState }).state;
      expect(heldOf(state.hold)).toBe(500n);
      expect(await s.ledger.getHold("h1")).toEqual(state);
      // The same pass again: the first raise, nothing more held; another amount for it: conflict.
      expect(await s.ledger.raiseHold(newRaise("h1", 2, 200n, 12))).toEqual({ kind: "existing", state });
      expect(await s.ledger.raiseHold(newRaise("h1", 2, 201n, 12))).toEqual({ kind: "conflict" });
      expect(await s.ledger.balance("acct_a", CHAIN)).toEqual({
        ...zeroBalance("acct_a"),
        debitsPending: 500n,
        creditsPosted: 1000n,
      });

      // 500 left: a raise of 501 is refused with nothing written.
      const before = await ledgerRows(s);
      expect(await s.ledger.raiseHold(newRaise("h1", 3, 501n, 13))).toEqual({
        kind: "insufficient",
        available: 500n,
      });
      expect(await ledgerRows(s)).toEqual(before);
      expect((await s.ledger.raiseHold(newRaise("h1", 3, 500n, 13))).kind).toBe("raised");
      expect(await s.ledger.raiseHold(newRaise("h1", 4, 1n, 14))).toEqual({
        kind: "insufficient",
        available: 0n,
      });
      expect((await s.ledger.getHold("h1"))?.hold.raised).toBe(700n);
      expect(await s.ledger.holdRaises("h1")).toEqual([
        { holdId: "h1", pass: 2, amount: 200n, createdAt: 11 },
        { holdId: "h1", pass: 3, amount: 500n, createdAt: 13 },
      ]);
      expect((await s.ledger.listHolds("acct_a", FIRST_PAGE, 10)).map((h) => h.hold.raised)).toEqual([700n]);
      expect(await s.ledger.balance(SYSTEM_REVENUE, CHAIN)).toEqual({
        ...zeroBalance(SYSTEM_REVENUE),
        creditsPending: 1000n,
      });
      expect(await s.ledger.raiseHold(newRaise("missing", 2, 1n, 15))).toEqual({ kind: "not-found" });
      expect(await s.ledger.holdRaises("missing")).toEqual([]);
    }));

  it("raises: settle charges up to the hold and its raises and releases the rest; a resolved hold is not open; void and a zero hold raised", () =>
    withStores(async (s) => {
      await accounts(s, "acct_a", "acct_b");
      await s.ledger.credit(manualCredit("c1", "acct_a", 1000n));
      await s.ledger.placeHold(newHold("h1", "acct_a", 300n, 10));
      await s.ledger.raiseHold(newRaise("h1", 2, 200n, 11));
      await s.ledger.raiseHold(newRaise("h1", 3, 100n, 12));
      const open = (await s.ledger.getHold("h1"))!;
      // Above the hold and its raises (600): refused; up to it, even past the hold alone: charged.
      expect(await s.ledger.settle("h1", 601n, USAGE, 20, "")).toEqual({ kind: "exceeds", state: open });
      const settled = await s.ledger.settle("h1", 550n, USAGE, 20, "");
      expect(settled).toMatchObject({
        kind: "resolved",
        state: { hold: { raised: 300n }, resolution: { status: "settled", amount: 550n } },
      });
      expect(await s.ledger.getHold("h1")).toEqual((settled as { state: HoldState }).state);
      expect(await s.ledger.balance("acct_a", CHAIN)).toEqual({
        ...zeroBalance("acct_a"),
        debitsPosted: 550n,
        creditsPosted: 1000n,
      });
      expect(await s.ledger.balance(SYSTEM_REVENUE, CHAIN)).toEqual({
        ...zeroBalance(SYSTEM_REVENUE),
        creditsPosted: 550n,
      });
      expect((await s.ledger.settlements(["h1"])).get("h1")).toMatchObject({ offchainAmount: 550n });
      // Resolved: no raise is open to it, and nothing is written; a retried raise is still `existing`.
      const resolved = (await s.ledger.getHold("h1"))!;
      const before = await ledgerRows(s);
      expect(await s.ledger.raiseHold(newRaise("h1", 4, 10n, 21))).toEqual({
        kind: "not-open",
        state: resolved,
      });
      expect(await ledgerRows(s)).toEqual(before);
      expect(await s.ledger.raiseHold(newRaise("h1", 3, 100n, 21))).toEqual({
        kind: "existing",
        state: resolved,
      });

      // A voided hold releases its raises with it.
      await s.ledger.placeHold(newHold("h2", "acct_a", 50n, 30));
      await s.ledger.raiseHold(newRaise("h2", 2, 40n, 31));
      expect(await s.ledger.balance("acct_a", CHAIN)).toMatchObject({ debitsPending: 90n });
      expect(await s.ledger.void("h2", "released", 32)).toMatchObject({
        kind: "resolved",
        state: { hold: { raised: 40n }, resolution: { status: "released", amount: 0n } },
      });
      expect(await s.ledger.raiseHold(newRaise("h2", 3, 1n, 33))).toMatchObject({ kind: "not-open" });
      expect(await s.ledger.balance("acct_a", CHAIN)).toMatchObject({
        debitsPending: 0n,
        debitsPosted: 550n,
      });

      // A hold placed for nothing (no balance row of its own on the revenue side) raised, then settled.
      await s.ledger.credit(manualCredit("c2", "acct_b", 100n));
      await s.ledger.placeHold(newHold("z1", "acct_b", 0n, 40));
      expect(await s.ledger.raiseHold(newRaise("z1", 2, 100n, 41))).toMatchObject({
        kind: "raised",
        state: { hold: { amount: 0n, raised: 100n } },
      });
      expect(await s.ledger.settle("z1", 60n, USAGE, 42, "")).toMatchObject({ kind: "resolved" });
      expect(await s.ledger.balance("acct_b", CHAIN)).toEqual({
        ...zeroBalance("acct_b"),
        debitsPosted: 60n,
        creditsPosted: 100n,
      });
      // A settle for all of it: nothing released, nothing left pending.
      await s.ledger.placeHold(newHold("z2", "acct_b", 10n, 43));
      await s.ledger.raiseHold(newRaise("z2", 2, 30n, 44));
      expect(await s.ledger.settle("z2", 40n, USAGE, 45, "")).toMatchObject({ kind: "resolved" });
      expect(await s.ledger.balance("acct_b", CHAIN)).toMatchObject({
        debitsPending: 0n,
        debitsPosted: 100n,
      });
      expect(await s.ledger.balance(SYSTEM_REVENUE, CHAIN)).toEqual({
        ...zeroBalance(SYSTEM_REVENUE),
        creditsPosted: 650n,
      });
    }));

  it("raises: the sweeper expires a raised hold and releases it with its raises, each hold once", () =>
    withStores(async (s) => {
      await accounts(s, "acct_a");
      await s.ledger.credit(manualCredit("c1", "acct_a", 1000n));
      await s.ledger.placeHold(newHold("e1", "acct_a", 100n, 10));
      await s.ledger.raiseHold(newRaise("e1", 2, 50n, 11));
      await s.ledger.raiseHold(newRaise("e1", 3, 25n, 12));
      await s.ledger.placeHold(newHold("e2", "acct_a", 0n, 20));
      await s.ledger.raiseHold(newRaise("e2", 2, 30n, 21));
      await s.ledger.placeHold(newHold("e3", "acct_a", 100n, 50));
      await s.ledger.raiseHold(newRaise("e3", 2, 10n, 51));
      expect(await s.ledger.balance("acct_a", CHAIN)).toMatchObject({ debitsPending: 315n });
      // Three sweepers at once over the two holds due (e3 is not): each expires once, raises and all.
      const counts = await Promise.all([
        s.ledger.expireHolds(30, 100, 10),
        s.ledger.expireHolds(30, 100, 10),
        s.ledger.expireHolds(30, 100, 10),
      ]);
      expect(counts.reduce((a, b) => a + b, 0)).toBe(2);
      for (const id of ["e1", "e2"]) {
        expect((await s.ledger.getHold(id))?.resolution).toMatchObject({ status: "expired", amount: 0n });
        expect(await s.ledger.raiseHold(newRaise(id, 9, 1n, 101))).toMatchObject({ kind: "not-open" });
      }
      expect(await s.ledger.balance("acct_a", CHAIN)).toMatchObject({
        debitsPending: 110n,
        debitsPosted: 0n,
      });
      expect(await s.ledger.balance(SYSTEM_REVENUE, CHAIN)).toMatchObject({ creditsPending: 110n });
      expect(await s.ledger.expireHolds(1000, 200, 10)).toBe(1);
      expect(await s.ledger.balance("acct_a", CHAIN)).toMatchObject({ debitsPending: 0n });
      expect(await s.ledger.balance(SYSTEM_REVENUE, CHAIN)).toEqual(zeroBalance(SYSTEM_REVENUE));
    }));

  it("raises: 16 raisers racing on one balance never overdraw it; each raise granted or refused, holds and raises within the credit", () =>
    withStores(async (s) => {
      await accounts(s, "acct_a");
      await s.ledger.credit(manualCredit("c1", "acct_a", 1000n));
      for (let i = 0; i < 16; i++) await s.ledger.placeHold(newHold(`r${i}`, "acct_a", 10n, i));
      // 840 left; each raiser raises its hold by 100 a pass until a raise is refused.
      const raiser = async (i: number) => {
        const outcomes: string[] = [];
        for (let pass = 2; pass <= 20; pass++) {
          const result = await s.ledger.raiseHold(newRaise(`r${i}`, pass, 100n, 100 + pass));
          outcomes.push(result.kind);
          if (result.kind !== "raised") break;
        }
        return outcomes;
      };
      const outcomes = (await Promise.all(Array.from({ length: 16 }, (_, i) => raiser(i)))).flat();
      for (const kind of outcomes) expect(["raised", "insufficient"]).toContain(kind);
      expect(outcomes.filter((k) => k === "raised")).toHaveLength(8);
      expect(outcomes.filter((k) => k === "insufficient")).toHaveLength(16);
      const balance = await s.ledger.balance("acct_a", CHAIN);
      expect(balance).toEqual({ ...zeroBalance("acct_a"), debitsPending: 960n, creditsPosted: 1000n });
      expect(availableOf(balance)).toBe(40n);
      const holds = await s.ledger.listHolds("acct_a", FIRST_PAGE, 100);
      expect(holds.reduce((sum, h) => sum + heldOf(h.hold), 0n)).toBe(960n);
      // Settled at once, each for what it holds or less: every raise released or charged once.
      const settled = await Promise.all(
        holds.map((h, i) => s.ledger.settle(h.hold.id, heldOf(h.hold) - BigInt(i % 3), USAGE, 200, "")),
      );
      expect(settled.every((r) => r.kind === "resolved")).toBe(true);
      expect(await s.ledger.balance("acct_a", CHAIN)).toMatchObject({ debitsPending: 0n });
      expect(await s.ledger.balance(SYSTEM_REVENUE, CHAIN)).toMatchObject({ creditsPending: 0n });
    }));
});

describe("the SQLite ledger's writer thread", () => {
  it("carries raises across: bigints in and out, a refusal as an answer, the hold's total back", async () => {
    const dir = tempDir();
    const db = openDatabase(dir.path);
    const ledger = await openSqliteLedger(db, dir.path, { thread: true });
    try {
      await new AuthRepository(db).insertAccount("acct_a", "", 1);
      await ledger.credit(manualCredit("c1", "acct_a", 2n ** 61n));
      expect((await ledger.placeHold(newHold("h1", "acct_a", 2n ** 59n, 2))).kind).toBe("placed");
      const raised = await ledger.raiseHold(newRaise("h1", 2, 2n ** 60n, 3));
      expect(raised).toMatchObject({
        kind: "raised",
        state: { hold: { amount: 2n ** 59n, raised: 2n ** 60n } },
      });
      expect(await ledger.raiseHold(newRaise("h1", 2, 2n ** 60n, 4))).toMatchObject({ kind: "existing" });
      expect(await ledger.raiseHold(newRaise("h1", 3, 2n ** 60n, 4))).toEqual({
        kind: "insufficient",
        available: 2n ** 61n - 2n ** 59n - 2n ** 60n,
      });
      expect(await ledger.holdRaises("h1")).toEqual([
        { holdId: "h1", pass: 2, amount: 2n ** 60n, createdAt: 3 },
      ]);
      expect((await ledger.settle("h1", 2n ** 60n + 1n, USAGE, 5, "")).kind).toBe("resolved");
      expect(auditLedger(db)).toEqual([]);
    } finally {
      await ledger.close();
      db.close();
      dir.cleanup();
    }
  });

  it("carries the x402 writes across: bigints in and out, a refused return or collection as an error, nothing of it written; collections and clearings too", async () => {
    const dir = tempDir();
    const db = openDatabase(dir.path);
    const ledger = await openSqliteLedger(db, dir.path, { thread: true });
    try {
      await new AuthRepository(db).insertAccount("acct_x", "", 1);
      expect(await ledger.authoriseX402(x402Payment("pay_1", "h1", 2n ** 60n))).toBe("authorised");
      expect(await ledger.authoriseX402(x402Payment("pay_1", "h1", 2n ** 60n))).toBe("replayed");
      expect((await ledger.placeHold(newHold("h1", "acct_x", 2n ** 59n, 2))).kind).toBe("placed");
      expect((await ledger.settle("h1", 2n ** 58n, USAGE, 3, "")).kind).toBe("resolved");
      const closing = {
        id: "pay_1",
        status: "settled",
        settled: 2n ** 58n,
        txHash: "0xcollected",
        error: "",
        returned: 2n ** 60n,
        now: 4,
      } as const;
      await expect(ledger.closeX402(closing)).rejects.toThrow(/available/);
      expect((await ledger.x402Payments(["h1"])).get("h1")?.status).toBe("authorised");
      const collection = { id: "pay_1", collected: 2n ** 58n, txHash: "0xcollected", now: 4 } as const;
      await expect(ledger.recordX402Collection({ ...collection, collected: 2n ** 60n + 1n })).rejects.toThrow(
        /more than its/,
      );
      expect(await ledger.recordX402Collection(collection)).toBe("recorded");
      expect(await ledger.recordX402Collection(collection)).toBe("not-authorised");
      expect((await ledger.x402Payments(["h1"])).get("h1")).toMatchObject({
        status: "collected",
        settled: 2n ** 58n,
        collectedAt: 4,
      });
      await expect(ledger.closeX402({ ...closing, settled: 2n ** 58n + 1n })).rejects.toThrow(/collected/);
      expect(await ledger.closeX402({ ...closing, returned: 2n ** 60n - 2n ** 58n })).toBe("closed");
      expect(availableOf(await ledger.balance("acct_x", CHAIN))).toBe(0n);
      // A failed payment of another payer, cleared across the thread.
      expect(await ledger.authoriseX402({ ...x402Payment("pay_2", "h2", 5n), payer: "0xfailed" })).toBe(
        "authorised",
      );
      expect(
        await ledger.closeX402({
          ...closing,
          id: "pay_2",
          status: "failed",
          settled: 0n,
          txHash: "",
          returned: 5n,
        }),
      ).toBe("closed");
      expect((await ledger.failedX402Payments("0xfailed", 10)).map((p) => p.id)).toEqual(["pay_2"]);
      expect(await ledger.clearFailedX402("0xfailed", 5)).toBe(1);
      expect(await ledger.failedX402Payments("0xfailed", 10)).toEqual([]);
      expect(auditLedger(db)).toEqual([]);
    } finally {
      await ledger.close();
      db.close();
      dir.cleanup();
    }
  });
});

describe("the PostgreSQL ledger under concurrency, and its chain roles", () => {
  /** Runs `body` on a fresh PostgreSQL store and ends with its audit. */
  async function withPg(body: (s: Awaited<ReturnType<typeof openPgStores>>) => Promise<void>): Promise<void> {
    const s = await openPgStores();
    try {
      await body(s);
      expect(await s.audit()).toEqual([]);
    } finally {
      await s.close();
    }
  }

  it("keeps a settle the server's full disk refused (53100), and writes it before any sweep once it has space", () =>
    withPg(async (s) => {
      await s.accounts.insertAccount("acct_a", "", 1);
      await s.ledger.credit(manualCredit("c1", "acct_a", 1000n));
      expect((await s.ledger.placeHold(newHold("h1", "acct_a", 300n, 10))).kind).toBe("placed");
      // What PostgreSQL answers when its disk is full: SQLSTATE 53100 on the write.
      await s.pool.query(`CREATE FUNCTION disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
                            BEGIN RAISE EXCEPTION 'could not extend file' USING ERRCODE = '53100'; END $$;
                          CREATE TRIGGER disk_full BEFORE INSERT ON hold_resolutions
                            FOR EACH ROW EXECUTE FUNCTION disk_full()`);
      const refused = await s.ledger.settle("h1", 120n, USAGE, 20, "").then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(isStorageFull(refused)).toBe(true);
      expect((await s.ledger.getHold("h1"))?.resolution).toBeUndefined();
      // Space returns; the sweeper, due for this hold, writes the kept settle first.
      await s.pool.query("DROP TRIGGER disk_full ON hold_resolutions; DROP FUNCTION disk_full()");
      expect(await s.ledger.expireHolds(1_000_000, 1_000_000, 100)).toBe(0);
      expect((await s.ledger.getHold("h1"))?.resolution).toMatchObject({ status: "settled", amount: 120n });
      expect(await s.ledger.balance("acct_a", CHAIN)).toMatchObject({
        debitsPosted: 120n,
        debitsPending: 0n,
      });
    }));

  it("migration 9 fills spend_days from the holds an older ledger has, across days, keys and outcomes", () =>
    withPg(async (s) => {
      await s.accounts.insertAccount("acct_a", "", 1);
      await s.ledger.credit(manualCredit("c1", "acct_a", 10_000n));
      const day = 86_400_000;
      await call(s, "m1", "acct_a", 40n, 5, 100n); // settled below its hold, day 0
      await s.ledger.placeHold({ ...newHold("m2", "acct_a", 70n, 6), keyId: "key_2" }); // open, day 0
      await s.ledger.placeHold(newHold("m3", "acct_a", 90n, day + 1)); // released, day 1
      await s.ledger.void("m3", "released", day + 2);
      await call(s, "m4", "acct_a", 30n, day + 3, 30n); // day 1
      // What caps read: spend_days less what settlements gave back beside it (migration 23).
      const read = async () =>
        (
          await s.pool.query<{ key_id: string; day: string; spent: string }>(
            "SELECT key_id, day::text, spent::text FROM spend_totals ORDER BY day, key_id",
          )
        ).rows;
      const written = await read();
      expect(written).toEqual([
        { key_id: "key_1", day: "0", spent: "40" },
        { key_id: "key_2", day: "0", spent: "70" },
        { key_id: "key_1", day: `${day}`, spent: "30" },
      ]);
      // The ledger as version 8 left it (without migration 23's returns beside spend_days), then
      // migrated again: 9 fills spend_days, 23 puts its returns and spend_totals back, empty.
      await s.pool.query(`DROP VIEW spend_totals; DROP TABLE spend_returns; DROP TABLE spend_days;
                          CREATE INDEX holds_by_chain_time ON holds (account_id, chain, created_at);
                          DELETE FROM schema_migrations WHERE version IN (9, 23)`);
      await migratePostgres(s.pool);
      expect(await read()).toEqual(written);
    }));

  it("migration 10 admits the kind 'x402' in ledger_entries, keeping its entries, and adds x402_payments", () =>
    withPg(async (s) => {
      await s.accounts.insertAccount("acct_x", "", 1);
      await s.ledger.credit(manualCredit("c1", "acct_x", 1000n));
      await call(s, "m1", "acct_x", 40n, 5, 100n);
      const entries = async () =>
        (await s.pool.query("SELECT seq::text, id, kind, amount::text FROM ledger_entries ORDER BY seq"))
          .rows;
      const kinds = async () =>
        (
          await s.pool.query<{ def: string }>(
            `SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint
              WHERE conrelid = 'ledger_entries'::regclass AND conname = 'ledger_entries_kind_check'`,
          )
        ).rows;
      const written = await entries();
      // The ledger as version 9 left it (migration 11's index and migration 12's columns and
      // indexes went with the table), then migrated again.
      await s.pool.query(`DROP TABLE x402_payments;
                          ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_kind_check;
                          ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_kind_check
                            CHECK (kind IN ('credit', 'hold', 'charge', 'deposit', 'withdrawal'));
                          DELETE FROM schema_migrations WHERE version IN (10, 11, 12)`);
      expect((await kinds())[0]?.def).not.toMatch(/x402/);
      await migratePostgres(s.pool);
      expect(await kinds()).toEqual([{ def: expect.stringMatching(/'x402'::text/) }]);
      expect(await entries()).toEqual(written);
      expect(await s.ledger.authoriseX402(x402Payment("pay_1", "h1", 50n))).toBe("authorised");
      expect(
        await s.ledger.closeX402({
          id: "pay_1",
          status: "unused",
          settled: 0n,
          txHash: "",
          error: "",
          returned: 50n,
          now: 6,
        }),
      ).toBe("closed");
    }));

  it("migration 12 admits 'collected' in x402_payments, keeping its payments, and adds collected_at, cleared_at and their indexes", () =>
    withPg(async (s) => {
      await s.accounts.insertAccount("acct_x", "", 1);
      expect(await s.ledger.authoriseX402(x402Payment("pay_open", "h_open", 100n, 2))).toBe("authorised");
      expect(
        await s.ledger.authoriseX402({ ...x402Payment("pay_failed", "h_failed", 50n, 3), payer: "0xf" }),
      ).toBe("authorised");
      await call(s, "h_failed", "acct_x", 20n, 4, 50n);
      const failed = {
        id: "pay_failed",
        status: "failed",
        settled: 0n,
        txHash: "",
        error: "reverted",
        returned: 30n,
        now: 5,
      } as const;
      expect(await s.ledger.closeX402(failed)).toBe("closed");
      const statuses = async () =>
        (
          await s.pool.query<{ def: string }>(
            `SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint
              WHERE conrelid = 'x402_payments'::regclass AND conname = 'x402_payments_status_check'`,
          )
        ).rows;
      const indexes = async () =>
        (
          await s.pool.query<{ indexname: string; indexdef: string }>(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'x402_payments' ORDER BY indexname",
          )
        ).rows;
      // The table as version 11 left it, then migrated again.
      await s.pool.query(`DROP INDEX x402_payments_failed;
                          DROP INDEX x402_payments_open;
                          CREATE INDEX x402_payments_open ON x402_payments (created_at) WHERE status = 'authorised';
                          ALTER TABLE x402_payments DROP COLUMN collected_at, DROP COLUMN cleared_at;
                          ALTER TABLE x402_payments DROP CONSTRAINT x402_payments_status_check;
                          ALTER TABLE x402_payments ADD CONSTRAINT x402_payments_status_check
                            CHECK (status IN ('authorised', 'settled', 'unused', 'failed'));
                          DELETE FROM schema_migrations WHERE version = 12`);
      const payments = async () =>
        (await s.pool.query("SELECT *, settled::text, authorised::text FROM x402_payments ORDER BY id")).rows;
      const before = await payments();
      expect(before).toHaveLength(2);
      await expect(
        s.pool.query("UPDATE x402_payments SET status = 'collected' WHERE id = 'pay_open'"),
      ).rejects.toThrow(/x402_payments_status_check/);

      await migratePostgres(s.pool);
      expect(await statuses()).toEqual([{ def: expect.stringMatching(/'collected'::text/) }]);
      const after = await payments();
      expect(after.map(({ collected_at, cleared_at, ...kept }) => kept)).toEqual(before);
      expect(after.map((p) => [p.collected_at, p.cleared_at])).toEqual([
        [null, null],
        [null, null],
      ]);
      expect((await indexes()).map((i) => i.indexname)).toEqual([
        "x402_payments_failed",
        "x402_payments_hold_id_key",
        "x402_payments_open",
        "x402_payments_pkey",
      ]);
      // The ledger carries on: the open payment is collected and still open, the failure listed.
      expect(
        await s.ledger.recordX402Collection({ id: "pay_open", collected: 40n, txHash: "0xo", now: 6 }),
      ).toBe("recorded");
      expect((await s.ledger.openX402Payments(10, 10)).map((p) => [p.id, p.status])).toEqual([
        ["pay_open", "collected"],
      ]);
      expect((await s.ledger.failedX402Payments("0xf", 10)).map((p) => p.id)).toEqual(["pay_failed"]);
      expect(await s.ledger.clearFailedX402("0xf", 7)).toBe(1);
    }));

  it("the x402 reads and the sweep use their indexes in a generic plan: open and failed payments their partial ones, a hold's payment an index", () =>
    withPg(async (s) => {
      const client = await s.pool.connect();
      try {
        // Empty tables: scanning them whole would be cheapest, so only a usable index is chosen.
        await client.query("SET enable_seqscan = off; SET plan_cache_mode = force_generic_plan");
        const plan = async (sql: string, params: string) => {
          await client.query(`PREPARE q AS ${sql}`);
          const { rows } = await client.query<{ "QUERY PLAN": string }>(`EXPLAIN EXECUTE q(${params})`);
          await client.query("DEALLOCATE q");
          return rows.map((r) => r["QUERY PLAN"]).join("\n");
        };
        expect(
          await plan(
            `SELECT * FROM x402_payments WHERE status IN ('authorised', 'collected') AND created_at < $1::bigint
              ORDER BY created_at, id LIMIT $2::integer`,
            "1, 2",
          ),
        ).toMatch(/Index Scan using x402_payments_open/);
        expect(
          await plan(
            `SELECT * FROM x402_payments WHERE payer = $1::text AND status = 'failed' AND cleared_at IS NULL
              ORDER BY created_at, id LIMIT $2::integer`,
            "'0xp', 2",
          ),
        ).toMatch(/Index Scan using x402_payments_failed/);
        // Either index bounds the sweep's check: by hold (hold_id's unique key) or among the few
        // collected payments (x402_payments_open covers them), whichever the planner finds cheaper.
        expect(
          await plan(
            `SELECT o.hold_id FROM open_holds o
              WHERE o.created_at < $1::bigint AND NOT EXISTS (
                SELECT 1 FROM x402_payments p WHERE p.hold_id = o.hold_id AND p.status = 'collected')
              ORDER BY o.created_at LIMIT $2::integer FOR UPDATE OF o SKIP LOCKED`,
            "1, 2",
          ),
        ).toMatch(/Index Scan (using|on) x402_payments_(hold_id_key|open)/);
      } finally {
        client.release();
      }
    }));

  it("64 holds at once on 16 connections against a balance covering exactly 10: 10 placed, 54 insufficient", () =>
    withPg(async (s) => {
      await s.accounts.insertAccount("acct_a", "", 1);
      await s.ledger.credit(manualCredit("c1", "acct_a", 1000n));
      const outcomes = await Promise.all(
        Array.from({ length: 64 }, (_, i) => s.ledger.placeHold(newHold(`h${i}`, "acct_a", 100n, i))),
      );
      const placed = outcomes.filter((o) => o.kind === "placed");
      expect(placed).toHaveLength(10);
      expect(outcomes.filter((o) => o.kind === "insufficient")).toEqual(
        Array(54).fill({ kind: "insufficient", available: 0n }),
      );
      expect(await s.ledger.balance("acct_a", CHAIN)).toMatchObject({
        debitsPending: 1000n,
        creditsPosted: 1000n,
      });
      const { rows } = await s.pool.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM holds UNION ALL SELECT count(*)::int FROM ledger_entries WHERE kind = 'hold'",
      );
      expect(rows.map((r) => r.n)).toEqual([10, 10]);
      // The revenue side is on the paying account's own row (migration 18): no row another
      // account's holds write, let alone one every hold waits on.
      const revenueRows = await s.pool.query(
        "SELECT account, revenue_pending::text AS pending FROM ledger_balances WHERE account = $1 OR revenue_pending <> 0",
        [SYSTEM_REVENUE],
      );
      expect(revenueRows.rows).toEqual([{ account: "acct_a", pending: "1000" }]);
      expect(await s.ledger.balance(SYSTEM_REVENUE, CHAIN)).toMatchObject({ creditsPending: 1000n });

      // And all of them settled at once: each charge posted once, the revenue shards back to no pending.
      const settled = await Promise.all(
        placed.map((p, i) =>
          s.ledger.settle((p as { state: HoldState }).state.hold.id, BigInt(10 * i), USAGE, 100, ""),
        ),
      );
      expect(settled.every((r) => r.kind === "resolved")).toBe(true);
      expect(await s.ledger.balance(SYSTEM_REVENUE, CHAIN)).toEqual({
        ...zeroBalance(SYSTEM_REVENUE),
        creditsPosted: 450n,
      });
    }));

  it("settles racing on one account commit exactly the backing there is: the rest of the charges settle off-chain", () =>
    withPg(async (s) => {
      await s.accounts.insertAccount("acct_a", "", 1);
      await s.ledger.credit(manualCredit("c1", "acct_a", 5000n));
      await scan(s, [deposit("0xa", "acct_a", 1000n)]);
      const n = 40;
      await Promise.all(
        Array.from({ length: n }, (_, i) => s.ledger.placeHold(newHold(`h${i}`, "acct_a", 100n, i))),
      );
      const settled = await Promise.all(
        Array.from({ length: n }, (_, i) => s.ledger.settle(`h${i}`, 60n, USAGE, 100, "")),
      );
      expect(settled.every((r) => r.kind === "resolved")).toBe(true);
      const views = [...(await s.ledger.settlements(Array.from({ length: n }, (_, i) => `h${i}`))).values()];
      expect(views).toHaveLength(n);
      expect(views.reduce((sum, v) => sum + v.onchainAmount, 0n)).toBe(1000n);
      expect(views.reduce((sum, v) => sum + v.offchainAmount, 0n)).toBe(1400n);
      const { rows } = await s.pool.query<{ deposited: string; committed: string }>(
        "SELECT deposited::text, committed::text FROM onchain_backing WHERE account_id = 'acct_a'",
      );
      expect(rows).toEqual([{ deposited: "1000", committed: "1000" }]);
      // Nothing backed is left to withdraw.
      expect(
        await s.ledger.withdraw({
          id: "w1",
          accountId: "acct_a",
          chain: CHAIN,
          to: "0xd",
          amount: 1n,
          fee: 0n,
          now: 200,
        }),
      ).toEqual({ kind: "insufficient", available: 0n });
    }));

  it("settle, void and two sweepers racing over the same holds: each hold resolves exactly once", () =>
    withPg(async (s) => {
      await s.accounts.insertAccount("acct_a", "", 1);
      await s.ledger.credit(manualCredit("c1", "acct_a", 10_000n));
      const n = 30;
      for (let i = 0; i < n; i++) await s.ledger.placeHold(newHold(`h${i}`, "acct_a", 100n, i));
      const [settles, voids, swept] = await Promise.all([
        Promise.all(Array.from({ length: n }, (_, i) => s.ledger.settle(`h${i}`, 40n, USAGE, 100, ""))),
        Promise.all(Array.from({ length: n }, (_, i) => s.ledger.void(`h${i}`, "released", 100))),
        Promise.all([s.ledger.expireHolds(1000, 100, n), s.ledger.expireHolds(1000, 100, n)]),
      ]);
      const resolvedBySettle = settles.filter((r) => r.kind === "resolved").length;
      const resolvedByVoid = voids.filter((r) => r.kind === "resolved").length;
      expect(resolvedBySettle + resolvedByVoid + swept[0] + swept[1]).toBe(n);
      for (const r of [...settles, ...voids]) expect(["resolved", "already-resolved"]).toContain(r.kind);
      expect(await s.ledger.balance("acct_a", CHAIN)).toMatchObject({
        debitsPending: 0n,
        debitsPosted: 40n * BigInt(resolvedBySettle),
      });
    }));

  it("raises racing with settles, voids and sweepers over the same holds: each hold resolves once, releasing exactly what it held", () =>
    withPg(async (s) => {
      await s.accounts.insertAccount("acct_a", "", 1);
      await s.ledger.credit(manualCredit("c1", "acct_a", 100_000n));
      const n = 40;
      for (let i = 0; i < n; i++) await s.ledger.placeHold(newHold(`h${i}`, "acct_a", 100n, i));
      // Each hold: two raises, a settle for more than the hold alone (it fits only once a raise
      // landed), a void and two sweepers, all at once; whoever deletes the open-list row first wins,
      // and a resolution that waited on a raise releases the raised total.
      const [raises, settles, voids, swept] = await Promise.all([
        Promise.all(
          Array.from({ length: n }, (_, i) =>
            Promise.all([
              s.ledger.raiseHold(newRaise(`h${i}`, 2, 50n, 100)),
              s.ledger.raiseHold(newRaise(`h${i}`, 3, 25n, 100)),
            ]),
          ),
        ),
        Promise.all(Array.from({ length: n }, (_, i) => s.ledger.settle(`h${i}`, 120n, USAGE, 100, ""))),
        Promise.all(Array.from({ length: n }, (_, i) => s.ledger.void(`h${i}`, "released", 100))),
        Promise.all([s.ledger.expireHolds(1000, 100, n), s.ledger.expireHolds(1000, 100, n)]),
      ]);
      for (const r of raises.flat()) expect(["raised", "not-open"]).toContain(r.kind);
      for (const r of settles) expect(["resolved", "already-resolved", "exceeds"]).toContain(r.kind);
      for (const r of voids) expect(["resolved", "already-resolved"]).toContain(r.kind);
      const resolved =
        settles.filter((r) => r.kind === "resolved").length +
        voids.filter((r) => r.kind === "resolved").length +
        swept[0] +
        swept[1];
      expect(resolved).toBe(n);
      let charged = 0n;
      for (let i = 0; i < n; i++) {
        const state = (await s.ledger.getHold(`h${i}`))!;
        expect(state.resolution).toBeDefined();
        // What the hold holds is what its granted raises added, and the store answered each so.
        const granted = raises[i]!.reduce(
          (sum, r, pass) => sum + (r.kind === "raised" ? [50n, 25n][pass]! : 0n),
          0n,
        );
        expect(state.hold.raised).toBe(granted);
        expect((await s.ledger.holdRaises(`h${i}`)).reduce((sum, r) => sum + r.amount, 0n)).toBe(granted);
        if (settles[i]!.kind === "resolved") expect(state.resolution).toMatchObject({ amount: 120n });
        charged += state.resolution!.amount;
      }
      expect(await s.ledger.balance("acct_a", CHAIN)).toEqual({
        ...zeroBalance("acct_a"),
        debitsPosted: charged,
        creditsPosted: 100_000n,
      });
      expect(await s.ledger.balance(SYSTEM_REVENUE, CHAIN)).toEqual({
        ...zeroBalance(SYSTEM_REVENUE),
        creditsPosted: charged,
      });
    }));

  it("a settle waiting on a raise releases what the raise added; a raise waiting on a settle writes nothing; the sweeper passes a hold being raised", () =>
    withPg(async (s) => {
      await s.accounts.insertAccount("acct_a", "", 1);
      await s.ledger.credit(manualCredit("c1", "acct_a", 10_000n));
      for (const id of ["h1", "h2", "h3", "h4"]) await s.ledger.placeHold(newHold(id, "acct_a", 100n, 1));
      // Raises, then resolutions, made slow by a trigger that sleeps once their locks are held, so
      // that the other side starts its statement (and takes its snapshot) while they run.
      await s.pool.query(`CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$
                            BEGIN PERFORM pg_sleep(0.3); RETURN NEW; END $$;
                          CREATE TRIGGER slow BEFORE INSERT ON hold_raises FOR EACH ROW EXECUTE FUNCTION slow()`);
      // h1: settled for 80 while a raise of 50 runs: the settle's snapshot has no raise, yet it
      // waits for the raise and releases 150.
      let raising = s.ledger.raiseHold(newRaise("h1", 2, 50n, 2));
      await sleep(100);
      expect(await s.ledger.settle("h1", 80n, USAGE, 3, "")).toMatchObject({
        kind: "resolved",
        state: { hold: { raised: 50n }, resolution: { amount: 80n } },
      });
      expect(await raising).toMatchObject({ kind: "raised" });
      // h2: settled for 120 while a raise of 50 runs: asked before the raise committed, it does
      // not fit the hold it found (nothing written); once the raise has answered, it does.
      raising = s.ledger.raiseHold(newRaise("h2", 2, 50n, 2));
      await sleep(100);
      expect(await s.ledger.settle("h2", 120n, USAGE, 3, "")).toMatchObject({ kind: "exceeds" });
      expect(await raising).toMatchObject({ kind: "raised" });
      expect(await s.ledger.settle("h2", 120n, USAGE, 3, "")).toMatchObject({
        kind: "resolved",
        state: { hold: { raised: 50n }, resolution: { amount: 120n } },
      });
      // h3: the sweeper runs while h3 is being raised: it passes the locked hold, and expires it,
      // raise and all, on its next run.
      raising = s.ledger.raiseHold(newRaise("h3", 2, 50n, 2));
      await sleep(100);
      const swept = await s.ledger.expireHolds(10, 4, 10);
      expect(await raising).toMatchObject({ kind: "raised" });
      expect(swept).toBe(1); // h4
      expect(await s.ledger.expireHolds(10, 5, 10)).toBe(1);
      expect((await s.ledger.getHold("h3"))?.resolution).toMatchObject({ status: "expired" });
      expect(await s.ledger.balance("acct_a", CHAIN)).toEqual({
        ...zeroBalance("acct_a"),
        debitsPosted: 200n,
        creditsPosted: 10_000n,
      });
      await s.pool.query("DROP TRIGGER slow ON hold_raises");

      // A raise waiting on a settle finds the hold resolved, and writes nothing.
      await s.ledger.placeHold(newHold("h5", "acct_a", 100n, 6));
      await s.pool.query(
        "CREATE TRIGGER slow BEFORE INSERT ON hold_resolutions FOR EACH ROW EXECUTE FUNCTION slow()",
      );
      const settling = s.ledger.settle("h5", 60n, USAGE, 7, "");
      await sleep(100);
      expect(await s.ledger.raiseHold(newRaise("h5", 2, 50n, 7))).toMatchObject({
        kind: "not-open",
        state: { hold: { raised: 0n }, resolution: { status: "settled", amount: 60n } },
      });
      expect((await settling).kind).toBe("resolved");
      expect(await s.ledger.holdRaises("h5")).toEqual([]);
      await s.pool.query("DROP TRIGGER slow ON hold_resolutions; DROP FUNCTION slow()");
      expect(await s.ledger.balance("acct_a", CHAIN)).toMatchObject({
        debitsPending: 0n,
        debitsPosted: 260n,
      });
    }));

  it("raises with a cap racing on one key: 16 at once against what a daily cap leaves for 7, exactly 7 raised", () =>
    withPg(async (s) => {
      await s.accounts.insertAccount("acct_a", "", 1);
      await s.ledger.credit(manualCredit("c1", "acct_a", 100_000n));
      await s.ledger.setSpendCap(
        { accountId: "acct_a", keyId: "key_1", chain: CHAIN, period: "day", amount: 1000n },
        1,
      );
      for (let i = 0; i < 16; i++) await s.ledger.placeHold(newHold(`h${i}`, "acct_a", 10n, 1000 + i));
      const results = await Promise.all(
        Array.from({ length: 16 }, (_, i) => s.ledger.raiseHold(newRaise(`h${i}`, 2, 120n, 2000))),
      );
      expect(results.filter((r) => r.kind === "raised")).toHaveLength(7);
      expect(results.filter((r) => r.kind === "capped")).toHaveLength(9);
      expect((await s.ledger.balance("acct_a", CHAIN)).debitsPending).toBe(160n + 7n * 120n);
    }));

  it("migration 14 adds hold_raises and the open holds' raised total, keeping every open hold", () =>
    withPg(async (s) => {
      await s.accounts.insertAccount("acct_a", "", 1);
      await s.ledger.credit(manualCredit("c1", "acct_a", 1000n));
      await call(s, "m1", "acct_a", 40n, 5, 100n);
      await s.ledger.placeHold(newHold("m2", "acct_a", 70n, 6));
      await s.ledger.placeHold(newHold("m3", "acct_a", 80n, 7));
      const open = async () =>
        (await s.pool.query("SELECT hold_id, created_at::text FROM open_holds ORDER BY hold_id")).rows;
      const written = await open();
      expect(written).toHaveLength(2);
      // The ledger as version 13 left it, then migrated again.
      await s.pool.query(`DROP TABLE hold_raises;
                          ALTER TABLE open_holds DROP COLUMN raised;
                          DELETE FROM schema_migrations WHERE version = 14`);
      await expect(s.ledger.raiseHold(newRaise("m2", 2, 10n, 8))).rejects.toThrow(/hold_raises|raised/);
      await migratePostgres(s.pool);
      expect(await open()).toEqual(written);
      expect(
        (await s.pool.query("SELECT raised::text FROM open_holds ORDER BY hold_id")).rows.map(
          (r) => r.raised,
        ),
      ).toEqual(["0", "0"]);
      // The ledger carries on: an open hold is raised and settled above its own amount.
      expect((await s.ledger.raiseHold(newRaise("m2", 2, 30n, 8))).kind).toBe("raised");
      expect((await s.ledger.settle("m2", 90n, USAGE, 9, "")).kind).toBe("resolved");
      await expect(s.pool.query("UPDATE hold_raises SET amount = 1")).rejects.toThrow(/append-only/);
    }));

  it("one credit id sent from many connections at once credits once; withdrawals at once never overdraw the backing, fees included", () =>
    withPg(async (s) => {
      await s.accounts.insertAccount("acct_a", "", 1);
      const credits = await Promise.all(
        Array.from({ length: 16 }, () => s.ledger.credit(manualCredit("c1", "acct_a", 500n))),
      );
      expect(credits.filter((c) => c.kind === "credited")).toHaveLength(1);
      expect(credits.filter((c) => c.kind === "existing")).toHaveLength(15);
      await scan(s, [deposit("0xa", "acct_a", 1000n)]);
      const withdrawals = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          s.ledger.withdraw({
            id: `w${i}`,
            accountId: "acct_a",
            chain: CHAIN,
            to: "0xd",
            amount: 90n,
            fee: 10n,
            now: i,
          }),
        ),
      );
      expect(withdrawals.filter((w) => w.kind === "written")).toHaveLength(10);
      expect(withdrawals.filter((w) => w.kind === "insufficient")).toEqual(
        Array(10).fill({ kind: "insufficient", available: 0n }),
      );
      expect(await s.ledger.balance("acct_a", CHAIN)).toMatchObject({
        debitsPosted: 1000n,
        creditsPosted: 1500n,
      });
      expect((await s.ledger.balance(SYSTEM_WITHDRAWALS, CHAIN)).creditsPosted).toBe(900n);
      expect((await s.ledger.balance(SYSTEM_WITHDRAWAL_FEES, CHAIN)).creditsPosted).toBe(100n);
    }));

  it("chain roles: one process holds a chain; another takes over after close() or when the holder's connection dies", () =>
    withPg(async (s) => {
      const first = new PgChainRoles(s.url);
      const second = new PgChainRoles(s.url);
      const third = new PgChainRoles(s.url);
      try {
        const taken = await Promise.all([first.hold(CHAIN), second.hold(CHAIN)]);
        expect(taken.filter(Boolean)).toHaveLength(1);
        const [holder, other] = taken[0] ? [first, second] : [second, first];
        expect(await holder.hold(CHAIN)).toBe(true);
        expect(await other.hold(CHAIN)).toBe(false);
        // Roles are per chain.
        expect(await other.hold("solana")).toBe(true);
        expect(await holder.hold("solana")).toBe(false);

        await holder.close();
        expect(await holder.hold(CHAIN)).toBe(false);
        expect(await other.hold(CHAIN)).toBe(true);
        expect(await third.hold(CHAIN)).toBe(false);

        // The server ends the holder's session: its next hold() says so, and the role is free.
        const { rows } = await s.pool.query<{ pid: number }>(
          `SELECT DISTINCT pid FROM pg_locks
            WHERE locktype = 'advisory' AND granted
              AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
        );
        expect(rows).toHaveLength(1);
        await s.pool.query("SELECT pg_terminate_backend($1)", [rows[0]!.pid]);
        let tookOver = false;
        for (let i = 0; i < 50 && !tookOver; i++) {
          tookOver = await third.hold(CHAIN);
          if (!tookOver) await sleep(100);
        }
        expect(tookOver).toBe(true);
        // The one whose session ended learns it lost its roles (its check fails, or it reconnects
        // and finds the chain taken), and keeps answering on a new connection: solana is free again.
        expect(await other.hold(CHAIN)).toBe(false);
        expect(await other.hold(CHAIN)).toBe(false);
        expect(await other.hold("solana")).toBe(true);
        await third.close();
        expect(await other.hold(CHAIN)).toBe(true);
      } finally {
        await Promise.all([first.close(), second.close(), third.close()]);
      }
    }));
});
