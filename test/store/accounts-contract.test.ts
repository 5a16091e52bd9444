import { createHash } from "node:crypto";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AccountStore, SessionStore } from "../../src/core/ports/accounts.js";
import { PgAccountStore, PgAuthStamp } from "../../src/store/postgres/accounts.js";
import { openPostgres } from "../../src/store/postgres/database.js";
import { PG_MIGRATIONS } from "../../src/store/postgres/migrations.js";
import { PgSessionStore } from "../../src/store/postgres/sessions.js";
import { AuthRepository } from "../../src/store/sqlite/accounts.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { SessionRepository } from "../../src/store/sqlite/sessions.js";
import { type PostgresServer, startPostgres } from "../helpers/postgres.js";
import { tempDir, until } from "../helpers/process.js";

/** One store under test: its account and session ports, and how to let it go. */
interface Stores {
  readonly accounts: AccountStore;
  readonly sessions: SessionStore;
  /** The same store through a connection (or pool) of its own, as another host (or process) has it. */
  otherHost(): Promise<AccountStore>;
  close(): Promise<void>;
}

let server: PostgresServer;
beforeAll(async () => {
  server = await startPostgres();
});
afterAll(async () => {
  await server?.stop();
});

/** The same suite, against each store the ports have. */
const stores: Record<string, () => Promise<Stores>> = {
  sqlite: async () => {
    const dir = tempDir();
    const db = openDatabase(dir.path);
    const others: ReturnType<typeof openDatabase>[] = [];
    return {
      accounts: new AuthRepository(db),
      sessions: new SessionRepository(db),
      otherHost: async () => {
        const other = openDatabase(dir.path);
        others.push(other);
        return new AuthRepository(other);
      },
      close: async () => {
        for (const other of others) other.close();
        db.close();
        dir.cleanup();
      },
    };
  },
  postgres: async () => {
    // Each run migrates a database of its own.
    const url = await server.freshDatabase();
    const pool: pg.Pool = await openPostgres(url);
    const others: pg.Pool[] = [];
    return {
      accounts: new PgAccountStore(pool),
      sessions: new PgSessionStore(pool),
      otherHost: async () => {
        const other = await openPostgres(url);
        others.push(other);
        return new PgAccountStore(other);
      },
      close: async () => {
        await Promise.all(others.map((other) => other.end()));
        await pool.end();
      },
    };
  },
};

const digest = (text: string) => createHash("sha256").update(text).digest();

describe.each(Object.keys(stores))("the account and session ports on %s", (name) => {
  const open = stores[name]!;

  it("accounts: insert, read, page by cursor; status changes move the change stamp, inserts do not", async () => {
    const { accounts, close } = await open();
    try {
      const stamp0 = await accounts.changeStamp();
      for (let i = 1; i <= 5; i++) {
        const row = await accounts.insertAccount(`acct_${i}`, `n${i}`, 1_000 + i);
        expect(row).toEqual({
          id: `acct_${i}`,
          name: `n${i}`,
          status: "active",
          suspended_reason: "",
          created_at: 1_000 + i,
        });
      }
      expect(await accounts.changeStamp()).toBe(stamp0);
      const first = await accounts.listAccounts(0, 2);
      expect(first.rows.map((r) => r.id)).toEqual(["acct_1", "acct_2"]);
      const rest = await accounts.listAccounts(first.lastSeq!, 10);
      expect(rest.rows.map((r) => r.id)).toEqual(["acct_3", "acct_4", "acct_5"]);
      expect((await accounts.listAccounts(rest.lastSeq!, 10)).lastSeq).toBeUndefined();
      await accounts.setAccountStatus("acct_2", "suspended", "chargeback");
      expect(await accounts.getAccount("acct_2")).toMatchObject({
        status: "suspended",
        suspended_reason: "chargeback",
      });
      const stamp1 = await accounts.changeStamp();
      expect(stamp1).toBeGreaterThan(stamp0);
      // A status set to what it is already changes nothing an authentication depends on.
      await accounts.setAccountStatus("acct_2", "suspended", "another reason");
      expect(await accounts.changeStamp()).toBe(stamp1);
      expect(await accounts.getAccount("acct_none")).toBeUndefined();
    } finally {
      await close();
    }
  });

  it("keys: stored by digest, found with their account's status, revoked once, touched only when stale", async () => {
    const { accounts, close } = await open();
    try {
      await accounts.insertAccount("acct_k", "", 1);
      const a = await accounts.insertKey("key_a", "acct_k", "laptop", "tg_aaaa", digest("a"), 10);
      expect(a).toEqual({
        id: "key_a",
        account_id: "acct_k",
        name: "laptop",
        prefix: "tg_aaaa",
        created_at: 10,
        last_used_at: null,
        revoked_at: null,
      });
      await accounts.insertKey("key_b", "acct_k", "ci", "tg_bbbb", digest("b"), 20);
      expect((await accounts.listKeys("acct_k")).map((k) => k.id)).toEqual(["key_b", "key_a"]);
      await expect(accounts.insertKey("key_c", "acct_k", "", "tg_cccc", digest("a"), 30)).rejects.toThrow();
      await expect(
        accounts.insertKey("key_d", "acct_missing", "", "tg_dddd", digest("d"), 30),
      ).rejects.toThrow();
      const found = await accounts.findKeyByDigest(digest("a"));
      expect(found).toMatchObject({ id: "key_a", account_status: "active" });
      expect(Buffer.compare(found!.digest, digest("a"))).toBe(0);
      expect(await accounts.findKeyByDigest(digest("zzz"))).toBeUndefined();

      const stamp = await accounts.changeStamp();
      await accounts.touchKey("key_a", 100, 50);
      await accounts.touchKey("key_a", 120, 60); // not stale: 100 ≥ 60
      expect((await accounts.getKey("key_a"))!.last_used_at).toBe(100);
      expect(await accounts.changeStamp()).toBe(stamp);

      await accounts.revokeKey("key_a", 200);
      await accounts.revokeKey("key_a", 300);
      expect((await accounts.getKey("key_a"))!.revoked_at).toBe(200);
      expect(await accounts.changeStamp()).toBe(stamp + 1);
    } finally {
      await close();
    }
  });

  it("keys: the live-key cap counts unrevoked keys only, and holds against concurrent inserts from two hosts", async () => {
    const { accounts, otherHost, close } = await open();
    try {
      const hostB = await otherHost();
      await accounts.insertAccount("acct_cap", "", 1);
      await accounts.insertAccount("acct_free", "", 1);
      const insert = (store: AccountStore, id: string, account = "acct_cap") =>
        store.insertKeyWithinCap(id, account, "", `tg_${id}`, digest(id), 10, 3);
      for (const id of ["k1", "k2", "k3"]) expect((await insert(accounts, id))?.id).toBe(id);
      // At the cap: nothing is written, on either host.
      expect(await insert(accounts, "k4")).toBeUndefined();
      expect(await insert(hostB, "k5")).toBeUndefined();
      expect((await accounts.listKeys("acct_cap")).map((k) => k.id).sort()).toEqual(["k1", "k2", "k3"]);
      expect(await accounts.findKeyByDigest(digest("k4"))).toBeUndefined();
      // Another account's keys are its own count.
      expect((await insert(accounts, "f1", "acct_free"))?.id).toBe("f1");

      // A revoked key frees its place: exactly one of many concurrent inserts takes it.
      await accounts.revokeKey("k1", 20);
      const racers = Array.from({ length: 12 }, (_, i) => insert(i % 2 === 0 ? accounts : hostB, `r${i}`));
      const won = (await Promise.all(racers)).filter((row) => row !== undefined);
      expect(won).toHaveLength(1);
      const live = (await accounts.listKeys("acct_cap")).filter((k) => k.revoked_at === null);
      expect(live).toHaveLength(3);
      expect(live.map((k) => k.id)).toContain(won[0]!.id);
    } finally {
      await close();
    }
  });

  it("sign-in: a nonce is used once and never after expiry; concurrent first sign-ins make one account", async () => {
    const { accounts, sessions, close } = await open();
    try {
      await sessions.insertNonce("n1", 1_000);
      await sessions.insertNonce("n2", 500);
      const uses = await Promise.all([sessions.useNonce("n1", 100), sessions.useNonce("n1", 100)]);
      expect(uses.filter(Boolean)).toHaveLength(1);
      expect(await sessions.useNonce("n2", 600)).toBe(false);
      expect(await sessions.useNonce("unknown", 100)).toBe(false);
      await sessions.purgeNonces(600);
      await sessions.insertNonce("n2", 2_000); // purged: the name is free again

      const firsts = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          sessions.accountForIdentity("evm", "0xabc", { id: `acct_w${i}`, name: "0xabc" }, 10),
        ),
      );
      expect(firsts.filter((f) => f.created)).toHaveLength(1);
      const owner = firsts.find((f) => f.created)!.accountId;
      expect(new Set(firsts.map((f) => f.accountId))).toEqual(new Set([owner]));
      expect((await accounts.listAccounts(0, 100)).rows.filter((r) => r.name === "0xabc")).toHaveLength(1);

      await accounts.insertAccount("acct_other", "", 1);
      expect(await sessions.linkIdentity("solana", "So1", owner, 20)).toBe(owner);
      expect(await sessions.linkIdentity("solana", "So1", "acct_other", 30)).toBe(owner);
      expect(await sessions.listIdentities(owner)).toEqual([
        { family: "evm", address: "0xabc", account_id: owner, linked_at: 10 },
        { family: "solana", address: "So1", account_id: owner, linked_at: 20 },
      ]);
    } finally {
      await close();
    }
  });

  it("sessions: stored by digest, ended once", async () => {
    const { accounts, sessions, close } = await open();
    try {
      await accounts.insertAccount("acct_s", "", 1);
      await sessions.insertSession("sess_1", digest("t1"), "acct_s", 10, 1_000);
      expect(await sessions.findSession(digest("t1"))).toEqual({
        id: "sess_1",
        account_id: "acct_s",
        created_at: 10,
        expires_at: 1_000,
        ended_at: null,
      });
      await sessions.endSession("sess_1", 50);
      await sessions.endSession("sess_1", 60);
      expect((await sessions.findSession(digest("t1")))!.ended_at).toBe(50);
      expect(await sessions.findSession(digest("t2"))).toBeUndefined();
    } finally {
      await close();
    }
  });
});

describe("the PostgreSQL schema", () => {
  it("migrates once when two hosts start together, and reopens without change", async () => {
    // A database no host has migrated yet.
    const fresh = await server.freshDatabase();
    const pools = await Promise.all([openPostgres(fresh, 2), openPostgres(fresh, 2)]);
    try {
      const { rows } = await pools[0]!.query<{ version: number }>(
        "SELECT version FROM schema_migrations ORDER BY version",
      );
      expect(rows.map((r) => r.version)).toEqual(PG_MIGRATIONS.map((m) => m.version));
    } finally {
      await Promise.all(pools.map((p) => p.end()));
    }
  });
});

describe("auth changes announced to every host (LISTEN/NOTIFY)", () => {
  it("reach another host by notification, bite at once on the host that made them, and survive a lost listener", async () => {
    const url = await server.freshDatabase();
    const [poolA, poolB] = [await openPostgres(url, 2), await openPostgres(url, 2)];
    const stampB = new PgAuthStamp(url);
    await stampB.start();
    try {
      const hostA = new PgAccountStore(poolA);
      const hostB = new PgAccountStore(poolB, stampB);
      await hostA.insertAccount("acct_n", "n", 1);
      await hostA.insertKey("key_n", "acct_n", "k", "tg_n", digest("n"), 1);
      const before = await hostB.changeStamp();

      // A revocation on host A: host B hears of it by notification.
      await hostA.revokeKey("key_n", 2);
      const heard = await until("host B to hear of the revocation", async () => {
        const now = stampB.current();
        return now !== undefined && now > before ? now : undefined;
      });
      expect(await hostB.changeStamp()).toBe(heard);

      // Host B's own change bites on its very next read, notification or not.
      await hostB.setAccountStatus("acct_n", "suspended", "test");
      expect(await hostB.changeStamp()).toBe(heard + 1);

      // The listener's session ended by the server: the counter is read per call meanwhile (a
      // change is seen at once), and the listener comes back.
      await poolA.query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'tollgate auth listener'",
      );
      await until("the lost listener to be noticed", async () =>
        stampB.current() === undefined ? true : undefined,
      );
      await hostA.setAccountStatus("acct_n", "active", "");
      expect(await hostB.changeStamp()).toBe(heard + 2);
      await until(
        "the listener to come back",
        async () => (stampB.current() === heard + 2 ? true : undefined),
        10_000,
      );
    } finally {
      await stampB.close();
      await Promise.all([poolA.end(), poolB.end()]);
    }
  });
});
