import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { coreOver } from "../helpers/core.js";
import { tempDir } from "../helpers/process.js";
import { requireBuild, startWorker } from "./child-process.js";
import { expectSoundLedger, ledgerFixture } from "./fixtures.js";

const MAX_CALL_MS = 15 * 60_000;
const cleanups: (() => void)[] = [];

afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

/** Reopens the database as a restarted gateway would, some time after the crash, and sweeps. */
async function restartAndSweep(dataDir: string, laterMs: number) {
  const db = openDatabase(dataDir);
  cleanups.unshift(() => db.close());
  const core = coreOver(db, { maxCallMs: MAX_CALL_MS, now: () => Date.now() + laterMs });
  const voided = await core.sweeper.start();
  core.sweeper.stop();
  return { db, core, voided };
}

describe("a gateway killed with SIGKILL while holding funds", () => {
  beforeAll(requireBuild);

  it("leaves its holds pending until the restarted sweeper voids them; balances are exact", async () => {
    const dir = tempDir();
    cleanups.push(dir.cleanup);
    const f = ledgerFixture({ dataDir: dir.path });
    cleanups.unshift(() => f.db.close());
    const account = f.account();
    await f.billing.credit({
      accountId: account,
      chain: "base",
      amount: 100_000n,
      reason: "load",
      creditId: "",
    });

    const worker = await startWorker({
      dataDir: dir.path,
      accountId: account,
      prefix: "k",
      attempts: 10,
      mode: "hang",
    });
    expect((await worker.go()).held).toBe(10);
    worker.child.kill("SIGKILL");
    expect(await worker.exited).toBe("SIGKILL");
    expect(await f.billing.available(account, "base")).toBe(100_000n - 10n * 7000n);
    expectSoundLedger(f.db);

    // Restarted too soon, the holds might belong to live calls: they stay.
    expect((await restartAndSweep(dir.path, 0)).voided).toBe(0);
    // Restarted after the longest possible call: every orphaned hold is voided, nothing charged.
    const { db, core, voided } = await restartAndSweep(dir.path, MAX_CALL_MS + 1);
    expect(voided).toBe(10);
    expect(await core.billing.available(account, "base")).toBe(100_000n);
    expect(db.prepare("SELECT count(*) AS n FROM open_holds").get()).toEqual({ n: 0 });
    expect(
      db
        .prepare("SELECT status, count(*) AS n, sum(amount) AS charged FROM hold_resolutions GROUP BY status")
        .all(),
    ).toEqual([{ status: "expired", n: 10, charged: 0 }]);
    expectSoundLedger(db);
  });

  it("killed during a burst, it loses no acknowledged hold or settlement; the sweeper voids the rest", async () => {
    const dir = tempDir();
    cleanups.push(dir.cleanup);
    const f = ledgerFixture({ dataDir: dir.path });
    cleanups.unshift(() => f.db.close());
    const account = f.account();
    const funds = 7000n * 1_000_000n;
    await f.billing.credit({
      accountId: account,
      chain: "base",
      amount: funds,
      reason: "load",
      creditId: "",
    });

    const worker = await startWorker({
      dataDir: dir.path,
      accountId: account,
      prefix: "m",
      attempts: 1_000_000,
      mode: "cycle",
      concurrency: 16,
      acks: true,
    });
    void worker.go().catch(() => {});
    // Let it commit a good number of hold/settle pairs, then pull the plug mid-loop.
    while ((f.db.prepare("SELECT count(*) AS n FROM holds").get() as { n: number }).n < 200) await sleep(5);
    worker.child.kill("SIGKILL");
    expect(await worker.exited).toBe("SIGKILL");
    expectSoundLedger(f.db);
    // Everything the process was told is durable is on disk, exactly as it was told.
    const { held, settled: acked } = worker.acks;
    expect(held.length).toBeGreaterThan(0);
    const holdsOnDisk = new Set(
      (f.db.prepare("SELECT id FROM holds").all() as { id: string }[]).map((r) => r.id),
    );
    expect(held.filter((id) => !holdsOnDisk.has(id))).toEqual([]);
    const resolution = f.db
      .prepare("SELECT status, amount FROM hold_resolutions WHERE hold_id = ?")
      .safeIntegers(true);
    for (const [id, charge] of acked)
      expect(resolution.get(id)).toEqual({ status: "settled", amount: charge });

    const { db, core } = await restartAndSweep(dir.path, MAX_CALL_MS + 1);
    expect(db.prepare("SELECT count(*) AS n FROM open_holds").get()).toEqual({ n: 0 });
    const { settled } = db
      .prepare("SELECT count(*) AS settled FROM hold_resolutions WHERE status = 'settled'")
      .get() as { settled: number };
    // Every settled call charged exactly 500 units; nothing else was taken.
    expect(settled).toBeGreaterThanOrEqual(acked.size);
    expect(await core.billing.available(account, "base")).toBe(funds - 500n * BigInt(settled));
    expectSoundLedger(db);
  });
});
