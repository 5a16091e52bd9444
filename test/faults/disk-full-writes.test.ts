import { execFileSync } from "node:child_process";
import { closeSync, mkdtempSync, openSync, rmdirSync, statfsSync, unlinkSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConnectError } from "@connectrpc/connect";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { NO_USAGE } from "../../src/core/billing/pricing.js";
import { errorInfo } from "../../src/core/errors.js";
import type { Db } from "../../src/store/sqlite/database.js";
import { GroupCommit } from "../../src/store/sqlite/group-commit.js";
import {
  expectSoundLedger,
  type LedgerFixture,
  ledgerCounts,
  ledgerFixture,
  SMALL_TEXT_CALL,
} from "../billing/fixtures.js";

// The ledger's writes on a real SQLite file on a small tmpfs this test mounts (we run as root)
// and fills: what SQLite does on SQLITE_FULL, and what the group commit and the kept
// resolutions make of it. The gateway as a whole: test/faults/disk-full.test.ts.

let mount: string;
let mounted = false;
let dir: string;
let fixture: LedgerFixture;
let n = 0;

beforeAll(() => {
  mount = mkdtempSync(join(tmpdir(), "tollgate-full-writes-"));
  execFileSync("mount", ["-t", "tmpfs", "-o", "size=8m", "tmpfs", mount]);
  mounted = true;
});

afterAll(() => {
  try {
    if (mounted) execFileSync("umount", [mount]);
  } finally {
    rmdirSync(mount);
  }
});

afterEach(() => {
  fixture?.db.close();
  try {
    unlinkSync(filler());
  } catch {}
});

/** A fresh ledger in its own directory on the tmpfs, with a funded account. */
async function freshLedger(): Promise<{ funded: string }> {
  dir = join(mount, `ledger-${++n}`);
  fixture = ledgerFixture({ dataDir: dir });
  const funded = fixture.account();
  await fixture.billing.credit({
    accountId: funded,
    chain: "base",
    amount: 1_000_000n,
    reason: "t",
    creditId: "",
  });
  return { funded };
}

/** A usage cursor before which every hold lies (the newest first). */
const NEWEST = 2n ** 63n - 1n;

const filler = () => join(mount, "filler");

/** Fills the tmpfs to the last byte, the WAL truncated first so that no write fits in it. */
function fillDisk(db: Db): void {
  db.pragma("wal_checkpoint(TRUNCATE)");
  const fd = openSync(filler(), "a");
  try {
    for (const size of [1 << 20, 4096, 1]) {
      try {
        for (;;) writeSync(fd, Buffer.alloc(size));
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "ENOSPC") throw error;
      }
    }
  } finally {
    closeSync(fd);
  }
  expect(statfsSync(mount).bavail).toBe(0);
}

const freeDisk = () => unlinkSync(filler());

function holdFor(accountId: string, requestId: string) {
  return { accountId, requestId, keyId: "", chain: "base", call: SMALL_TEXT_CALL };
}

function expectStorageFull(error: unknown): void {
  expect(error).toBeInstanceOf(ConnectError);
  expect(errorInfo(error as ConnectError)?.reason).toBe("STORAGE_FULL");
}

describe("GroupCommit on a full disk", () => {
  it("fails a whole group when SQLITE_FULL rolled its transaction back: no later write of it commits on its own", async () => {
    const { funded } = await freshLedger();
    const { db } = fixture;
    db.exec("CREATE TABLE scratch (b BLOB)");
    // A small page cache: a big write spills to the WAL before the commit, and meets the full disk.
    db.pragma("cache_size = 10");
    const commits = new GroupCommit(db);
    fillDisk(db);
    const before = ledgerCounts(db);
    const results = await Promise.allSettled([
      commits.run(() => db.prepare("INSERT INTO scratch VALUES (?)").run(Buffer.alloc(16))),
      commits.run(() => {
        try {
          const insert = db.prepare("INSERT INTO scratch VALUES (?)");
          for (let i = 0; i < 500; i++) insert.run(Buffer.alloc(4096));
        } finally {
          // SQLite has rolled the whole transaction back by now (measured: inTransaction is
          // false). Space returns at this very moment: a write run after this one would fit.
          expect(db.inTransaction).toBe(false);
          freeDisk();
        }
      }),
      commits.run(() => db.prepare("INSERT INTO scratch VALUES (?)").run(Buffer.alloc(16))),
    ]);
    expect(results.map((r) => r.status)).toEqual(["rejected", "rejected", "rejected"]);
    expect((results[1] as PromiseRejectedResult).reason.code).toBe("SQLITE_FULL");
    // None of the group happened: not the first write, nor the third outside any transaction.
    expect((db.prepare("SELECT count(*) AS n FROM scratch").get() as { n: number }).n).toBe(0);
    expect(ledgerCounts(db)).toEqual(before);
    // The next group goes through.
    await fixture.billing.holdNewCall(holdFor(funded, "req_after"));
    expectSoundLedger(db);
  });
});

describe("a resolution the full disk refuses", () => {
  it("is kept and written once space returns, before the sweep could void its hold", async () => {
    const { funded } = await freshLedger();
    const placed = await fixture.billing.holdNewCall(holdFor(funded, "req_kept"));
    fillDisk(fixture.db);
    const usage = { ...NO_USAGE, inputTokens: 100n, outputTokens: 20n };
    expectStorageFull(await fixture.billing.settleDelivered(placed.hold, usage).catch((e: unknown) => e));
    // While the disk is full the sweep fails too, rather than void a hold whose settle waits.
    expectStorageFull(await fixture.billing.expireHolds(0).catch((e: unknown) => e));
    expect((await fixture.billing.usage(funded, NEWEST, 10))[0]!.resolution).toBeUndefined();
    freeDisk();
    // A sweep of every hold (none is younger than 0 ms): the kept settle is written first.
    expect(await fixture.billing.expireHolds(0)).toBe(0);
    const [row] = await fixture.billing.usage(funded, NEWEST, 10);
    expect(row!.resolution).toMatchObject({ status: "settled" });
    expect(row!.resolution!.amount).toBeGreaterThan(0n);
    expectSoundLedger(fixture.db);
  });

  it("is replaced by a later resolution of the same hold: a refused settle then a release releases", async () => {
    const { funded } = await freshLedger();
    const placed = await fixture.billing.holdNewCall(holdFor(funded, "req_replaced"));
    fillDisk(fixture.db);
    const usage = { ...NO_USAGE, inputTokens: 100n, outputTokens: 20n };
    expectStorageFull(await fixture.billing.settleDelivered(placed.hold, usage).catch((e: unknown) => e));
    expectStorageFull(await fixture.billing.release(placed.hold.id).catch((e: unknown) => e));
    freeDisk();
    expect(await fixture.billing.expireHolds(0)).toBe(0);
    const [row] = await fixture.billing.usage(funded, NEWEST, 10);
    expect(row!.resolution).toMatchObject({ status: "released", amount: 0n });
    expect(await fixture.billing.available(funded, "base")).toBe(1_000_000n);
    expectSoundLedger(fixture.db);
  });
});
