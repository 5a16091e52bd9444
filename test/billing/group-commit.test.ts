import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { groupedCallBilling } from "../../src/core/billing/call-billing.js";
import { NO_USAGE } from "../../src/core/billing/pricing.js";
import { DATABASE_FILE } from "../../src/store/database.js";
import { GroupCommit } from "../../src/store/group-commit.js";
import { tempDir } from "../helpers/process.js";
import { expectSoundLedger, ledgerCounts, ledgerFixture, SMALL_TEXT_CALL } from "./fixtures.js";

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

/** A billing core on a real file, with grouped call billing over it. */
function fixture() {
  const dir = tempDir("tollgate-group-");
  const ledger = ledgerFixture({ dataDir: dir.path });
  cleanups.push(() => {
    ledger.db.close();
    dir.cleanup();
  });
  const commits = new GroupCommit(ledger.db);
  const calls = groupedCallBilling(ledger.billing, commits);
  const funded = ledger.account();
  ledger.billing.credit({ accountId: funded, chain: "base", amount: 1_000_000n, reason: "t", creditId: "" });
  return { ...ledger, dir: dir.path, commits, calls, funded };
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

describe("group commit", () => {
  it("commits the writes queued in one turn together, and answers each only after the commit", async () => {
    const f = fixture();
    const other = otherConnection(f.dir);
    const versionBefore = other.pragma("data_version", { simple: true });
    const committed = () => (other.prepare("SELECT count(*) AS n FROM holds").get() as { n: number }).n;
    const answers = Array.from({ length: 20 }, (_, i) => f.calls.holdNewCall(holdFor(f.funded, `req_${i}`)));
    // Nothing is written before the turn ends: the group has not run yet.
    expect(committed()).toBe(0);
    const states = await Promise.all(answers);
    expect(states.map((s) => s.hold.requestId)).toEqual(answers.map((_, i) => `req_${i}`));
    // Every answered hold is visible to another connection: it was committed before the answer.
    expect(committed()).toBe(20);
    // One commit for the whole group: another connection saw the file change exactly once.
    expect(other.pragma("data_version", { simple: true })).toBe((versionBefore as number) + 1);
    expectSoundLedger(f.db);
  });

  it("rolls back only the write that failed; the rest of its group commits", async () => {
    const f = fixture();
    const poor = f.account();
    const results = await Promise.allSettled([
      f.calls.holdNewCall(holdFor(f.funded, "req_a")),
      f.calls.holdNewCall(holdFor(poor, "req_b")),
      f.calls.holdNewCall(holdFor(f.funded, "req_c")),
    ]);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect((results[1] as PromiseRejectedResult).reason.message).toMatch(/insufficient/i);
    expect(ledgerCounts(f.db).holds).toBe(2);
    expectSoundLedger(f.db);
  });

  it("undoes a write that threw half-way, inside its own savepoint", async () => {
    const f = fixture();
    const insert = f.db.prepare(
      "INSERT INTO billing_accounts (account_id, default_chain, updated_at) VALUES (?, ?, ?)",
    );
    const results = await Promise.allSettled([
      f.commits.run(() => {
        insert.run(f.funded, "base", 1);
        throw new Error("failed after writing");
      }),
      f.calls.holdNewCall(holdFor(f.funded, "req_ok")),
    ]);
    expect(results.map((r) => r.status)).toEqual(["rejected", "fulfilled"]);
    expect(ledgerCounts(f.db).billing_accounts).toBe(0);
    expect(ledgerCounts(f.db).holds).toBe(1);
  });

  it("settles and releases through the same groups, keeping the ledger sound", async () => {
    const f = fixture();
    const holds = await Promise.all(
      Array.from({ length: 10 }, (_, i) => f.calls.holdNewCall(holdFor(f.funded, `req_${i}`))),
    );
    const ends = await Promise.all(
      holds.map((state, i) =>
        i % 2 === 0
          ? f.calls.settleDelivered(state.hold.id, { ...NO_USAGE, inputTokens: 10n, outputTokens: 5n })
          : f.calls.release(state.hold.id).then((s) => ({ state: s, capped: false })),
      ),
    );
    expect(ends.map((e) => e.state.resolution?.status)).toEqual(
      holds.map((_, i) => (i % 2 === 0 ? "settled" : "released")),
    );
    expect(ledgerCounts(f.db).open_holds).toBe(0);
    expectSoundLedger(f.db);
  });

  it("fails every write of a group whose commit fails, and none of them happened", async () => {
    const f = fixture();
    // Another process holds the write lock past the busy timeout: BEGIN IMMEDIATE cannot start.
    f.db.pragma("busy_timeout = 50");
    const blocker = new Database(`${f.dir}/${DATABASE_FILE}`);
    cleanups.unshift(() => blocker.close());
    blocker.prepare("BEGIN IMMEDIATE").run();
    const results = await Promise.allSettled([
      f.calls.holdNewCall(holdFor(f.funded, "req_x")),
      f.calls.holdNewCall(holdFor(f.funded, "req_y")),
    ]);
    blocker.prepare("ROLLBACK").run();
    expect(results.map((r) => r.status)).toEqual(["rejected", "rejected"]);
    expect((results[0] as PromiseRejectedResult).reason.code).toBe("SQLITE_BUSY");
    expect(ledgerCounts(f.db).holds).toBe(0);
    // The committer recovers: the next group goes through.
    await f.calls.holdNewCall(holdFor(f.funded, "req_z"));
    expect(ledgerCounts(f.db).holds).toBe(1);
    expectSoundLedger(f.db);
  });
});
