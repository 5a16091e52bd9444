import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { Authenticator } from "../../src/core/auth/authenticator.js";
import { generateKey } from "../../src/core/auth/keys.js";
import { AuthRepository } from "../../src/store/auth-repository.js";
import { type Db, openDatabase } from "../../src/store/database.js";
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
  function twoConnections(clock: { now: number } = { now: 1_000_000 }) {
    const dir = tempDir("tollgate-keycache-");
    dirs.push(dir);
    const gatewayDb = openDatabase(dir.path);
    const otherDb = openDatabase(dir.path);
    dbs.push(gatewayDb, otherDb);
    const repo = new AuthRepository(gatewayDb);
    const other = new AuthRepository(otherDb);
    const authenticator = new Authenticator(repo, () => clock.now);
    repo.createAccount("acct_a", "a", 0);
    const key = generateKey();
    repo.createKey("key_a", "acct_a", "k", key.prefix, key.digest, 0);
    return { repo, other, authenticator, secret: key.secret, clock };
  }

  it("answers repeat lookups from memory while nothing changed", () => {
    const { repo, authenticator, secret } = twoConnections();
    let lookups = 0;
    const find = repo.findKeyByDigest.bind(repo);
    repo.findKeyByDigest = (digest) => {
      lookups += 1;
      return find(digest);
    };
    for (let i = 0; i < 5; i++) expect(authenticator.authenticate(secret).keyId).toBe("key_a");
    expect(lookups).toBe(1);
  });

  it("refuses a key revoked by another connection on the very next request", () => {
    const { other, authenticator, secret } = twoConnections();
    expect(authenticator.authenticate(secret).keyId).toBe("key_a");
    other.revokeKey("key_a", 5);
    expect(() => authenticator.authenticate(secret)).toThrow(/revoked/i);
  });

  it("refuses a key whose account another connection suspended, and admits it again on reactivation", () => {
    const { other, authenticator, secret } = twoConnections();
    expect(authenticator.authenticate(secret).accountId).toBe("acct_a");
    other.setAccountStatus("acct_a", "suspended", "test");
    expect(() => authenticator.authenticate(secret)).toThrow(/suspended/i);
    other.setAccountStatus("acct_a", "active", "");
    expect(authenticator.authenticate(secret).accountId).toBe("acct_a");
  });

  it("refuses a key revoked through the gateway's own connection on the very next request", () => {
    const { repo, authenticator, secret } = twoConnections();
    expect(authenticator.authenticate(secret).keyId).toBe("key_a");
    repo.revokeKey("key_a", 5);
    expect(() => authenticator.authenticate(secret)).toThrow(/revoked/i);
  });

  it("still records last use at most once a minute", () => {
    const { other, authenticator, secret, clock } = twoConnections();
    const lastUsed = () => other.getKey("key_a")!.last_used_at;
    authenticator.authenticate(secret);
    expect(lastUsed()).toBe(1_000_000);
    clock.now += 30_000;
    authenticator.authenticate(secret);
    expect(lastUsed()).toBe(1_000_000);
    clock.now += 31_000;
    authenticator.authenticate(secret);
    expect(lastUsed()).toBe(1_061_000);
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
