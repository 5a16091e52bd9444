import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { Authenticator } from "../../src/core/auth/authenticator.js";
import { generateKey } from "../../src/core/auth/keys.js";
import { AuthRepository } from "../../src/store/sqlite/accounts.js";
import { type Db, openDatabase } from "../../src/store/sqlite/database.js";
import { cliJson, type GatewayProcess, startGateway, tempDir } from "../helpers/process.js";

/**
 * Key lookups are cached on the hot path; these pin that revocation and suspension still take
 * effect on the very next request, whichever process makes them.
 */
describe("key lookup cache", () => {
  const dirs: ReturnType<typeof tempDir>[] = [];
  const dbs: Db[] = [];
  afterEach(() => {
    for (const db of dbs.splice(0)) db.close();
    for (const dir of dirs.splice(0)) dir.cleanup();
  });

  /** Two connections to one file: the gateway's, and another process's (the CLI's). */
  async function twoConnections(clock: { now: number } = { now: 1_000_000 }) {
    const dir = tempDir("tollgate-keycache-");
    dirs.push(dir);
    const gatewayDb = openDatabase(dir.path);
    const otherDb = openDatabase(dir.path);
    dbs.push(gatewayDb, otherDb);
    const repo = new AuthRepository(gatewayDb);
    const other = new AuthRepository(otherDb);
    const authenticator = new Authenticator(repo, () => clock.now);
    await repo.insertAccount("acct_a", "a", 0);
    const key = generateKey();
    await repo.insertKey("key_a", "acct_a", "k", key.prefix, key.digest, 0);
    return { repo, other, otherDb, authenticator, secret: key.secret, clock };
  }

  /** Counts the key lookups that reach the store (the change stamp read is not one). */
  function countLookups(repo: AuthRepository): () => number {
    let lookups = 0;
    const find = repo.findKeyByDigest.bind(repo);
    repo.findKeyByDigest = (digest) => {
      lookups += 1;
      return find(digest);
    };
    return () => lookups;
  }

  it("answers repeat lookups from memory while nothing changed", async () => {
    const { repo, authenticator, secret } = await twoConnections();
    const lookups = countLookups(repo);
    for (let i = 0; i < 5; i++) expect((await authenticator.authenticate(secret)).keyId).toBe("key_a");
    expect(lookups()).toBe(1);
  });

  it("refuses a key revoked by another connection on the very next request", async () => {
    const { other, authenticator, secret } = await twoConnections();
    expect((await authenticator.authenticate(secret)).keyId).toBe("key_a");
    await other.revokeKey("key_a", 5);
    await expect(authenticator.authenticate(secret)).rejects.toThrow(/revoked/i);
  });

  it("refuses a key whose account another connection suspended, and admits it again on reactivation", async () => {
    const { other, authenticator, secret } = await twoConnections();
    expect((await authenticator.authenticate(secret)).accountId).toBe("acct_a");
    await other.setAccountStatus("acct_a", "suspended", "test");
    await expect(authenticator.authenticate(secret)).rejects.toThrow(/suspended/i);
    await other.setAccountStatus("acct_a", "active", "");
    expect((await authenticator.authenticate(secret)).accountId).toBe("acct_a");
  });

  it("refuses a key revoked through the gateway's own connection on the very next request", async () => {
    const { repo, authenticator, secret } = await twoConnections();
    expect((await authenticator.authenticate(secret)).keyId).toBe("key_a");
    await repo.revokeKey("key_a", 5);
    await expect(authenticator.authenticate(secret)).rejects.toThrow(/revoked/i);
  });

  it("keeps the cache across other connections' commits to other tables, not across a revocation", async () => {
    const { repo, other, otherDb, authenticator, secret } = await twoConnections();
    const stamp = await repo.changeStamp();
    expect((await authenticator.authenticate(secret)).keyId).toBe("key_a");
    const lookups = countLookups(repo);
    // Another connection commits a ledger row, a sign-in nonce, a new account and key, a last use
    // and a rename: none of them can change an authentication, so none moves the stamp.
    otherDb
      .prepare("INSERT INTO billing_accounts (account_id, default_chain, updated_at) VALUES (?, ?, ?)")
      .run("acct_a", "base", 1);
    otherDb.prepare("INSERT INTO sign_in_nonces (nonce, expires_at) VALUES (?, ?)").run("n", 1);
    await other.insertAccount("acct_b", "b", 1);
    await other.insertKey("key_b", "acct_b", "k", "tg_b", generateKey().digest, 1);
    await other.touchKey("key_a", 2, 2);
    otherDb.prepare("UPDATE accounts SET name = 'renamed' WHERE id = 'acct_a'").run();
    otherDb.prepare("UPDATE accounts SET status = 'active' WHERE id = 'acct_a'").run();
    expect(await repo.changeStamp()).toBe(stamp);
    expect((await authenticator.authenticate(secret)).keyId).toBe("key_a");
    expect(lookups()).toBe(0);
    // A revocation by the other connection moves it, and the next request looks the key up.
    await other.revokeKey("key_a", 5);
    expect(await repo.changeStamp()).not.toBe(stamp);
    await expect(authenticator.authenticate(secret)).rejects.toThrow(/revoked/i);
    expect(lookups()).toBe(1);
  });

  it("does not cache a row read while a concurrent request saw the stamp move", async () => {
    const { repo, other, authenticator, secret } = await twoConnections();
    // The first request reads the stamp, then its lookup is held until a revocation has been
    // committed and a second request has seen the new stamp.
    const find = repo.findKeyByDigest.bind(repo);
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let calls = 0;
    repo.findKeyByDigest = async (digest) => {
      calls += 1;
      const row = await find(digest);
      if (calls === 1) await held;
      return row;
    };
    const first = authenticator.authenticate(secret);
    await new Promise((resolve) => setImmediate(resolve));
    await other.revokeKey("key_a", 5);
    await expect(authenticator.authenticate(secret)).rejects.toThrow(/revoked/i);
    release();
    expect((await first).keyId).toBe("key_a");
    // The first request's row predates the revocation: it must not have been remembered.
    await expect(authenticator.authenticate(secret)).rejects.toThrow(/revoked/i);
  });

  it("still records last use at most once a minute", async () => {
    const { other, authenticator, secret, clock } = await twoConnections();
    const lastUsed = async () => (await other.getKey("key_a"))!.last_used_at;
    await authenticator.authenticate(secret);
    expect(await lastUsed()).toBe(1_000_000);
    clock.now += 30_000;
    await authenticator.authenticate(secret);
    expect(await lastUsed()).toBe(1_000_000);
    clock.now += 31_000;
    await authenticator.authenticate(secret);
    expect(await lastUsed()).toBe(1_061_000);
  });
});

describe("key lookup cache in a running gateway", () => {
  let dir: ReturnType<typeof tempDir>;
  let gateway: GatewayProcess;
  const env = () => ({ TOLLGATE_DATA_DIR: dir.path });

  beforeAll(async () => {
    dir = tempDir("tollgate-keycache-e2e-");
    gateway = await startGateway(env());
  });
  afterAll(async () => {
    await gateway?.stop();
    dir.cleanup();
  });

  const models = (secret: string) =>
    fetch(`${gateway.facadeUrl}/v1/models`, { headers: { "x-api-key": secret } }).then((r) => r.status);

  it("honours `tollgate key revoke` from the CLI process on the very next request", async () => {
    const account = await cliJson<{ id: string }>(["account", "create", "--name", "cache"], env());
    const key = await cliJson<{ id: string; secret: string }>(
      ["key", "create", "--account", account.id],
      env(),
    );
    // Warm the cache: the key is looked up once and then served from memory.
    expect(await models(key.secret)).toBe(200);
    expect(await models(key.secret)).toBe(200);
    await cliJson(["key", "revoke", key.id], env());
    expect(await models(key.secret)).toBe(403);
  });
});
