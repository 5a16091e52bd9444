import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { holdIdFor } from "../../src/core/billing/hold-ids.js";
import { NO_USAGE } from "../../src/core/billing/pricing.js";
import { DATABASE_FILE } from "../../src/store/sqlite/database.js";
import { GroupCommit } from "../../src/store/sqlite/group-commit.js";
import { LedgerRepository } from "../../src/store/sqlite/ledger.js";
import { tempDir } from "../helpers/process.js";
import { expectSoundLedger, ledgerCounts, ledgerFixture, SMALL_TEXT_CALL } from "./fixtures.js";

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

/**
 * A billing core on a real file. Its ledger is `new SqliteLedger(db, groupCommittedWrites(db))`
 * (see ledgerFixture): every write goes through one GroupCommit on `db`, so the calls' writes
 * issued in one turn of the event loop share a transaction.
 */
async function fixture() {
  const dir = tempDir("tollgate-group-");
  const ledger = ledgerFixture({ dataDir: dir.path });
  cleanups.push(() => {
    ledger.db.close();
    dir.cleanup();
  });
  const funded = ledger.account();
  await ledger.billing.credit({
    accountId: funded,
    chain: "base",
    amount: 1_000_000n,
    reason: "t",
    creditId: "",
  });
  return { ...ledger, dir: dir.path, funded };
}

const holdFor = (accountId: string, requestId: string) => ({
  accountId,
  requestId,
  keyId: "",
  chain: "base",
  call: SMALL_TEXT_CALL,
});

/** A second connection to the same file: sees only what was committed. */
function otherConnection(dir: string): Database.Database {
  const db = new Database(`${dir}/${DATABASE_FILE}`, { readonly: true });
  cleanups.unshift(() => db.close());
  return db;
}

/** How many commits another connection has seen (SQLite's data_version, as a number). */
const version = (db: Database.Database) => db.pragma("data_version", { simple: true }) as number;

describe("group commit of the ledger's writes", () => {
  it("commits the writes queued in one turn together, and answers each only after the commit", async () => {
    const f = await fixture();
    const other = otherConnection(f.dir);
    const versionBefore = version(other);
    const committed = () => (other.prepare("SELECT count(*) AS n FROM holds").get() as { n: number }).n;
    const answers = Array.from({ length: 20 }, (_, i) =>
      f.billing.holdNewCall(holdFor(f.funded, `req_${i}`)),
    );
    // Nothing is written before the turn ends: the group has not run yet.
    expect(committed()).toBe(0);
    const states = await Promise.all(answers);
    expect(states.map((s) => s.hold.requestId)).toEqual(answers.map((_, i) => `req_${i}`));
    // Every answered hold is visible to another connection: it was committed before the answer.
    expect(committed()).toBe(20);
    // One commit for the whole group: another connection saw the file change exactly once.
    expect(version(other)).toBe(versionBefore + 1);
    expectSoundLedger(f.db);
  });

  it("rolls back only the write that failed; the rest of its group commits", async () => {
    const f = await fixture();
    const poor = f.account();
    const results = await Promise.allSettled([
      f.billing.holdNewCall(holdFor(f.funded, "req_a")),
      f.billing.holdNewCall(holdFor(poor, "req_b")),
      f.billing.holdNewCall(holdFor(f.funded, "req_c")),
    ]);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect((results[1] as PromiseRejectedResult).reason.message).toMatch(/insufficient/i);
    expect(ledgerCounts(f.db).holds).toBe(2);
    expectSoundLedger(f.db);
  });

  it("undoes a ledger write that threw half-way, inside its own savepoint", async () => {
    const f = await fixture();
    const other = otherConnection(f.dir);
    const versionBefore = version(other);
    // The hold row and its open-list row are written before its ledger entry, which this
    // connection-local trigger refuses: the write throws half-way through.
    const boom = holdIdFor(f.funded, "req_boom");
    f.db.exec(
      `CREATE TEMP TRIGGER boom BEFORE INSERT ON main.ledger_entries WHEN NEW.id = '${boom}/hold'
       BEGIN SELECT RAISE(ABORT, 'failed after writing'); END`,
    );
    const results = await Promise.allSettled([
      f.billing.holdNewCall(holdFor(f.funded, "req_ok1")),
      f.billing.holdNewCall(holdFor(f.funded, "req_boom")),
      f.billing.holdNewCall(holdFor(f.funded, "req_ok2")),
    ]);
    f.db.exec("DROP TRIGGER temp.boom");
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect((results[1] as PromiseRejectedResult).reason.message).toMatch(/failed after writing/);
    // Its half-written hold is gone; the others, in the same single commit, are not.
    expect(f.db.prepare("SELECT count(*) AS n FROM holds WHERE id = ?").get(boom)).toEqual({ n: 0 });
    expect(ledgerCounts(f.db)).toMatchObject({ holds: 2, open_holds: 2 });
    expect(version(other)).toBe(versionBefore + 1);
    expectSoundLedger(f.db);
  });

  it("settles and releases through the same groups, keeping the ledger sound", async () => {
    const f = await fixture();
    const other = otherConnection(f.dir);
    const holds = await Promise.all(
      Array.from({ length: 10 }, (_, i) => f.billing.holdNewCall(holdFor(f.funded, `req_${i}`))),
    );
    const versionBefore = version(other);
    const ends = await Promise.all(
      holds.map((state, i) =>
        i % 2 === 0
          ? f.billing.settleDelivered(state.hold, { ...NO_USAGE, inputTokens: 10n, outputTokens: 5n })
          : f.billing.release(state.hold.id).then((s) => ({ state: s, capped: false })),
      ),
    );
    expect(ends.map((e) => e.state.resolution?.status)).toEqual(
      holds.map((_, i) => (i % 2 === 0 ? "settled" : "released")),
    );
    // The ten settles and releases, issued in one turn, were one commit.
    expect(version(other)).toBe(versionBefore + 1);
    expect(ledgerCounts(f.db).open_holds).toBe(0);
    expectSoundLedger(f.db);
  });

  it("fails every write of a group whose commit fails, and none of them happened", async () => {
    const f = await fixture();
    // Another process holds the write lock past the busy timeout: BEGIN IMMEDIATE cannot start.
    f.db.pragma("busy_timeout = 50");
    const blocker = new Database(`${f.dir}/${DATABASE_FILE}`);
    cleanups.unshift(() => blocker.close());
    blocker.prepare("BEGIN IMMEDIATE").run();
    const results = await Promise.allSettled([
      f.billing.holdNewCall(holdFor(f.funded, "req_x")),
      f.billing.holdNewCall(holdFor(f.funded, "req_y")),
    ]);
    blocker.prepare("ROLLBACK").run();
    expect(results.map((r) => r.status)).toEqual(["rejected", "rejected"]);
    expect((results[0] as PromiseRejectedResult).reason.code).toBe("SQLITE_BUSY");
    expect(ledgerCounts(f.db).holds).toBe(0);
    // The committer recovers: the next group goes through.
    await f.billing.holdNewCall(holdFor(f.funded, "req_z"));
    expect(ledgerCounts(f.db).holds).toBe(1);
    expectSoundLedger(f.db);
  });
});

describe("GroupCommit", () => {
  it("undoes a write that threw half-way, inside its own savepoint", async () => {
    const f = await fixture();
    const commits = new GroupCommit(f.db);
    const ledger = new LedgerRepository(f.db);
    const insert = f.db.prepare(
      "INSERT INTO billing_accounts (account_id, default_chain, updated_at) VALUES (?, ?, ?)",
    );
    const results = await Promise.allSettled([
      commits.run(() => {
        insert.run(f.funded, "base", 1);
        throw new Error("failed after writing");
      }),
      commits.run(() =>
        ledger.placeHold({
          id: holdIdFor(f.funded, "req_ok"),
          accountId: f.funded,
          requestId: "req_ok",
          keyId: "",
          chain: "base",
          amount: 7000n,
          callKind: "text",
          model: SMALL_TEXT_CALL.model,
          inputTokens: 1000n,
          maxTokens: 1000n,
          imageSize: "",
          imageCount: 0,
          createdAt: 1,
        }),
      ),
    ]);
    expect(results.map((r) => r.status)).toEqual(["rejected", "fulfilled"]);
    expect(ledgerCounts(f.db).billing_accounts).toBe(0);
    expect(ledgerCounts(f.db).holds).toBe(1);
    expectSoundLedger(f.db);
  });
});
