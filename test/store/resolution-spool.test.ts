import { readFileSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isStorageFull } from "../../src/core/errors.js";
import { type NewCredit, type NewHold, SYSTEM_MANUAL_CREDIT } from "../../src/core/ports/ledger.js";
import { PgAccountStore } from "../../src/store/postgres/accounts.js";
import { auditPostgres } from "../../src/store/postgres/audit.js";
import { openPostgres } from "../../src/store/postgres/database.js";
import { PgLedger } from "../../src/store/postgres/ledger.js";
import {
  openResolutionSpool,
  type Resolution,
  SPOOL_DIR,
  SpoolCorrupted,
} from "../../src/store/shared/resolution-spool.js";
import { AuthRepository } from "../../src/store/sqlite/accounts.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { openSqliteLedger } from "../../src/store/sqlite/ledger-store.js";
import { EVERY_COUNT } from "../helpers/ledger-shapes.js";
import { type PostgresServer, startPostgres } from "../helpers/postgres.js";
import { tempDir } from "../helpers/process.js";

// The resolution spool (src/store/shared/resolution-spool.ts): its file survives a reopen, a
// torn last record is ignored, a damaged one stops the start, one process holds it; replayed
// into a real ledger (SQLite, PostgreSQL) a record lands once however often it is replayed.

const USAGE = EVERY_COUNT;

const settle = (
  holdId: string,
  charge: bigint,
  charges = '{"lines":[]}',
): Extract<Resolution, { kind: "settle" }> => ({
  kind: "settle",
  holdId,
  charge,
  usage: USAGE,
  now: 20,
  charges,
});
const release = (holdId: string): Resolution => ({ kind: "void", holdId, status: "released", now: 30 });

const SMALL = 64 << 10;

function spoolFile(dir: string): string {
  return join(dir, SPOOL_DIR, `${hostname().replace(/[^A-Za-z0-9._-]/g, "_")}.spool`);
}

describe("the spool file", () => {
  it("is preallocated, keeps what was appended across a reopen, exactly, and is empty once cleared", async () => {
    const dir = tempDir();
    try {
      const first = await openResolutionSpool(dir.path, SMALL);
      expect(readFileSync(spoolFile(dir.path)).length).toBe(SMALL);
      expect(first.found).toEqual([]);
      const routed: Resolution = { ...settle("h4", 99n), usage: { ...USAGE, endpoint: "bedrock-east" } };
      const written = [settle("h1", 120n), release("h2"), settle("h3", 2n ** 62n, "x".repeat(3000)), routed];
      for (const r of written) await first.append(r);
      await first.close();

      const second = await openResolutionSpool(dir.path, SMALL);
      expect(second.found).toEqual(written);
      expect(second.torn).toBe(false);
      await second.clearIfEmpty(() => false);
      expect(second.used).toBeGreaterThan(0);
      await second.clearIfEmpty(() => true);
      expect(second.used).toBe(0);
      await second.close();
      expect(readFileSync(spoolFile(dir.path)).every((b) => b === 0)).toBe(true);

      const third = await openResolutionSpool(dir.path, SMALL);
      expect(third.found).toEqual([]);
      await third.close();
    } finally {
      dir.cleanup();
    }
  });

  it("ignores a torn last record (its payload never reached the disk) and writes over it", async () => {
    const dir = tempDir();
    try {
      const spool = await openResolutionSpool(dir.path, SMALL);
      await spool.append(settle("h1", 120n));
      const before = spool.used;
      await spool.append(settle("h2", 75n));
      const after = spool.used;
      await spool.close();
      // The header of h2's record is on disk, the end of its payload is not (still zeros).
      const content = readFileSync(spoolFile(dir.path));
      content.fill(0, after - 12, after);
      writeFileSync(spoolFile(dir.path), content);

      const reopened = await openResolutionSpool(dir.path, SMALL);
      expect(reopened.found).toEqual([settle("h1", 120n)]);
      expect(reopened.torn).toBe(true);
      expect(reopened.used).toBe(before);
      // The torn bytes were zeroed: the next record takes its place, and nothing is damaged.
      await reopened.append(release("h3"));
      await reopened.close();
      const again = await openResolutionSpool(dir.path, SMALL);
      expect(again.found).toEqual([settle("h1", 120n), release("h3")]);
      expect(again.torn).toBe(false);
      await again.close();
    } finally {
      dir.cleanup();
    }
  });

  it("refuses loudly a damaged record that is not the last one", async () => {
    const dir = tempDir();
    try {
      const spool = await openResolutionSpool(dir.path, SMALL);
      await spool.append(settle("h1", 120n));
      await spool.append(settle("h2", 75n));
      await spool.close();
      const content = readFileSync(spoolFile(dir.path));
      // One flipped bit in the first record's payload (the charge's digits).
      const at = content.indexOf('"120"');
      expect(at).toBeGreaterThan(0);
      content[at + 1] = content[at + 1]! ^ 0x01;
      writeFileSync(spoolFile(dir.path), content);

      const refused = await openResolutionSpool(dir.path, SMALL).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(refused).toBeInstanceOf(SpoolCorrupted);
      expect((refused as Error).message).toMatch(/damaged at byte 0/);
      // Refused, not repaired: the file is as it was, for the operator to look at.
      expect(readFileSync(spoolFile(dir.path)).equals(content)).toBe(true);
    } finally {
      dir.cleanup();
    }
  });

  it("gives each process on one data dir a slot of its own; a slot whose process is gone is adopted", async () => {
    const dir = tempDir();
    try {
      const first = await openResolutionSpool(dir.path, SMALL);
      const second = await openResolutionSpool(dir.path, SMALL);
      expect(first.path).toBe(spoolFile(dir.path));
      expect(second.path).not.toBe(first.path);
      // The second process keeps a settle and dies.
      await second.append(settle("h9", 5n));
      await second.close();
      await first.close();

      const third = await openResolutionSpool(dir.path, SMALL);
      expect(third.path).toBe(spoolFile(dir.path));
      expect(third.found).toEqual([settle("h9", 5n)]);
      // Moved, not copied: the slot left behind is empty, and the record is in the adopter's own.
      expect(readFileSync(second.path).every((b) => b === 0)).toBe(true);
      await third.close();
      const fourth = await openResolutionSpool(dir.path, SMALL);
      expect(fourth.found).toEqual([settle("h9", 5n)]);
      await fourth.close();
    } finally {
      dir.cleanup();
    }
  });
});

const hold = (id: string, amount: bigint): NewHold => ({
  id,
  accountId: "acct_a",
  requestId: `req_${id}`,
  keyId: "key_1",
  chain: "base",
  amount,
  callKind: "text",
  model: "claude-test",
  inputTokens: 12n,
  maxTokens: 1024n,
  imageSize: "",
  imageCount: 0,
  createdAt: 10,
});
const credit = (amount: bigint): NewCredit => ({
  entryId: "c1",
  accountId: "acct_a",
  chain: "base",
  amount,
  from: SYSTEM_MANUAL_CREDIT,
  memo: "operator",
  createdAt: 1,
});

describe("replayed into the SQLite ledger", () => {
  it("lands each hold's last resolution once, however often it is replayed", async () => {
    const dir = tempDir();
    const db = openDatabase(dir.path);
    try {
      new AuthRepository(db).insertAccount("acct_a", "", 1);
      const ledger = await openSqliteLedger(db, dir.path, { thread: false });
      await ledger.credit(credit(1000n));
      for (const id of ["h1", "h2"]) expect((await ledger.placeHold(hold(id, 300n))).kind).toBe("placed");
      // What a process that died left: h1's settle; h2's settle, then its release (the last wins).
      const left = await openResolutionSpool(dir.path, SMALL);
      for (const r of [settle("h1", 120n), settle("h2", 50n), release("h2")]) await left.append(r);
      await left.close();

      const replay = async () => {
        await ledger.keepIn(await openResolutionSpool(dir.path, SMALL));
        await ledger.close();
      };
      await replay();
      const afterOnce = {
        h1: (await ledger.getHold("h1"))?.resolution,
        h2: (await ledger.getHold("h2"))?.resolution,
        balance: await ledger.balance("acct_a", "base"),
      };
      expect(afterOnce.h1).toMatchObject({ status: "settled", amount: 120n });
      expect(afterOnce.h2).toMatchObject({ status: "released", amount: 0n });
      expect(afterOnce.balance).toMatchObject({ debitsPosted: 120n, debitsPending: 0n });
      // Landed, the records were cleared.
      const cleared = await openResolutionSpool(dir.path, SMALL);
      expect(cleared.found).toEqual([]);
      // The same records replayed again (a process that died after the write landed, before the
      // clear): nothing changes.
      for (const r of [settle("h1", 120n), settle("h2", 50n), release("h2")]) await cleared.append(r);
      await cleared.close();
      const again = await openSqliteLedger(db, dir.path, { thread: false });
      await again.keepIn(await openResolutionSpool(dir.path, SMALL));
      expect({
        h1: (await again.getHold("h1"))?.resolution,
        h2: (await again.getHold("h2"))?.resolution,
        balance: await again.balance("acct_a", "base"),
      }).toEqual(afterOnce);
      await again.close();
      expect(auditLedger(db)).toEqual([]);
    } finally {
      db.close();
      dir.cleanup();
    }
  });
});

describe("the PostgreSQL ledger with a spool", () => {
  let server: PostgresServer;
  beforeAll(async () => {
    server = await startPostgres();
  });
  afterAll(async () => {
    await server?.stop();
  });

  it("spools a settle the server refused, and the next process on the host writes it", async () => {
    const dir = tempDir();
    const pool = await openPostgres(await server.freshDatabase(), 4);
    try {
      await new PgAccountStore(pool).insertAccount("acct_a", "", 1);
      const first = new PgLedger(pool);
      await first.keepIn(await openResolutionSpool(dir.path, SMALL));
      await first.credit(credit(1000n));
      expect((await first.placeHold(hold("h1", 300n))).kind).toBe("placed");
      // What PostgreSQL answers when its disk is full: SQLSTATE 53100 on the write.
      await pool.query(`CREATE FUNCTION disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
                          BEGIN RAISE EXCEPTION 'could not extend file' USING ERRCODE = '53100'; END $$;
                        CREATE TRIGGER disk_full BEFORE INSERT ON hold_resolutions
                          FOR EACH ROW EXECUTE FUNCTION disk_full()`);
      const refused = await first.settle("h1", 120n, USAGE, 20, "").catch((error: unknown) => error);
      expect(isStorageFull(refused)).toBe(true);
      // The process ends without the server taking it (its last try is refused too).
      await first.close();
      expect((await first.getHold("h1"))?.resolution).toBeUndefined();

      await pool.query("DROP TRIGGER disk_full ON hold_resolutions; DROP FUNCTION disk_full()");
      const next = new PgLedger(pool);
      await next.keepIn(await openResolutionSpool(dir.path, SMALL));
      expect((await next.getHold("h1"))?.resolution).toMatchObject({ status: "settled", amount: 120n });
      expect(await next.balance("acct_a", "base")).toMatchObject({ debitsPosted: 120n, debitsPending: 0n });
      await next.close();
      expect(await auditPostgres(pool)).toEqual([]);
    } finally {
      await pool.end();
      dir.cleanup();
    }
  });
});
