import type * as grpc from "@grpc/grpc-js";
import { afterEach, describe, expect, it } from "vitest";
import { AuthService } from "../../src/gen/tollgate/auth/v1/auth_pb.js";
import { grpcClient, unary } from "../helpers/grpc.js";
import { cliJson, type GatewayProcess, runCli, startGateway, tempDir } from "../helpers/process.js";

const ADMIN_TOKEN = "test-operator-token-0123456789abcdef";
const UNAUTHENTICATED = 16;
const PERMISSION_DENIED = 7;

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function dataDir(): Record<string, string> {
  const dir = tempDir();
  cleanups.push(dir.cleanup);
  return { TOLLGATE_DATA_DIR: dir.path };
}

async function gateway(env: Record<string, string>): Promise<GatewayProcess> {
  const gw = await startGateway(env);
  cleanups.push(() => gw.stop("SIGKILL"));
  return gw;
}

/** An account and key created with the CLI against `env`'s data dir. */
async function cliKey(env: Record<string, string>) {
  const account = await cliJson<{ id: string }>(["account", "create", "--name", "e2e"], env);
  const key = await cliJson<{ id: string; secret: string }>(["key", "create", "--account", account.id], env);
  return { accountId: account.id, keyId: key.id, secret: key.secret };
}

async function post(url: string, headers: Record<string, string> = {}) {
  const response = await fetch(`${url}/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: "{}",
  });
  return { status: response.status, body: (await response.json()) as { error: { type: string } } };
}

function client(gw: GatewayProcess): grpc.Client {
  const c = grpcClient(AuthService, gw.coreUrl);
  cleanups.push(() => c.close());
  return c;
}

describe("a key created with the CLI", () => {
  it("authenticates through the facade and through gRPC (grpc-js) on the core's port", async () => {
    const env = { ...dataDir(), TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN };
    const gw = await gateway(env);
    const key = await cliKey(env);

    // Authenticated: the empty body is then refused for its content (400), not for the key.
    expect((await post(gw.facadeUrl, { authorization: `Bearer ${key.secret}` })).status).toBe(400);

    const auth = client(gw);
    const answer = await unary<{ principal: { accountId: string; keyId: string } }>(auth, "Authenticate", {
      key: key.secret,
    });
    expect(answer.principal).toMatchObject({ accountId: key.accountId, keyId: key.keyId });

    // The key as call credentials: a key holder sees its own account's keys.
    const own = await unary<{ keys: { id: string }[] }>(auth, "ListKeys", {}, { "x-api-key": key.secret });
    expect(own.keys.map((k) => k.id)).toEqual([key.keyId]);

    const typo = `${key.secret.slice(0, -1)}${key.secret.endsWith("x") ? "y" : "x"}`;
    await expect(unary(auth, "Authenticate", { key: typo })).rejects.toMatchObject({
      code: UNAUTHENTICATED,
    });
    await expect(unary(auth, "CreateAccount", {}, { "x-api-key": key.secret })).rejects.toMatchObject({
      code: PERMISSION_DENIED,
    });
    await expect(unary(auth, "CreateAccount", {})).rejects.toMatchObject({ code: UNAUTHENTICATED });

    // The operator token unlocks account management over gRPC; revocation bites at once.
    const operator = { authorization: `Bearer ${ADMIN_TOKEN}` };
    const created = await unary<{ account: { id: string } }>(
      auth,
      "CreateAccount",
      { name: "grpc" },
      operator,
    );
    expect(created.account.id).toMatch(/^acct_/);
    await unary(auth, "RevokeKey", { keyId: key.keyId }, operator);
    await expect(unary(auth, "Authenticate", { key: key.secret })).rejects.toMatchObject({
      code: PERMISSION_DENIED,
    });
    expect((await post(gw.facadeUrl, { "x-api-key": key.secret })).status).toBe(403);
  });

  it("still authenticates after the gateway restarts (the database is real)", async () => {
    const env = dataDir();
    const first = await gateway(env);
    const key = await cliKey(env);
    expect((await post(first.facadeUrl, { "x-api-key": key.secret })).status).toBe(400);
    expect(await first.stop("SIGTERM")).toBe(0);

    const second = await gateway(env);
    expect((await post(second.facadeUrl, { "x-api-key": key.secret })).status).toBe(400);
    expect(
      (
        await post(second.facadeUrl, {
          "x-api-key": `${key.secret.slice(0, -2)}${key.secret.endsWith("zz") ? "yy" : "zz"}`,
        })
      ).status,
    ).toBe(401);
  });
});

describe("facade-only mode", () => {
  it("serves the facade against a core running in another process", async () => {
    const env = { ...dataDir(), TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN };
    const core = await gateway(env);
    // No data dir for the facade tier: it must not need one.
    const facade = await gateway({
      TOLLGATE_CORE_URL: core.coreUrl,
      TOLLGATE_DATA_DIR: "/nonexistent/tollgate",
    });
    expect(facade.coreUrl).toBe(core.coreUrl);

    // The operator CLI can also drive the remote core over gRPC with the operator token.
    const remote = { TOLLGATE_CORE_URL: core.coreUrl, TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN };
    const key = await cliKey(remote);

    expect((await post(facade.facadeUrl, { "x-api-key": key.secret })).status).toBe(400);
    const missing = await post(facade.facadeUrl);
    expect(missing.status).toBe(401);
    expect(missing.body.error.type).toBe("authentication_error");

    const health = await fetch(`${facade.facadeUrl}/v1/health`);
    expect(health.status).toBe(200);
    const report = (await health.json()) as { dependencies: { name: string }[] };
    expect(report.dependencies.map((d) => d.name)).toEqual(["core", "database", "storage"]);
    // Public health names no internal address (issue 29): the core's URL used to be its detail.
    expect(JSON.stringify(report)).not.toContain(new URL(core.coreUrl).host);

    // Without the operator token, the remote core refuses account management.
    const refused = await runCli(["account", "create"], { TOLLGATE_CORE_URL: core.coreUrl });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain("set TOLLGATE_ADMIN_TOKEN to its operator token");

    // The core goes away: health turns 503 and calls fail cleanly in the envelope.
    await core.stop("SIGKILL");
    const down = await fetch(`${facade.facadeUrl}/v1/health`);
    expect(down.status).toBe(503);
    const unavailable = await post(facade.facadeUrl, { "x-api-key": key.secret });
    expect(unavailable.status).toBe(503);
    expect(unavailable.body.error.type).toBe("api_error");
  });
});

describe("process lifecycle", () => {
  it("exits 0 on SIGTERM and on SIGINT", async () => {
    const env = dataDir();
    expect(await (await gateway(env)).stop("SIGTERM")).toBe(0);
    expect(await (await gateway(env)).stop("SIGINT")).toBe(0);
  });

  it("refuses to start when the core URL is invalid, naming the variable", async () => {
    await expect(startGateway({ TOLLGATE_CORE_URL: "core:8788" })).rejects.toThrow(/TOLLGATE_CORE_URL/);
  });
});
