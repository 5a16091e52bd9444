import { createClient } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config/config.js";
import { SYSTEM_MANUAL_CREDIT } from "../../src/core/ports/ledger.js";
import { startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { AuthService } from "../../src/gen/tollgate/auth/v1/auth_pb.js";
import { openRuntime, type Runtime, ServeRefused } from "../../src/runtime/runtime.js";
import { tempDir } from "../helpers/process.js";

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function config(env: Record<string, string> = {}) {
  const dir = tempDir();
  cleanups.push(dir.cleanup);
  return loadConfig({ TOLLGATE_DATA_DIR: dir.path, TOLLGATE_DEV_CHAINS: "off", ...env });
}

/** Everything a gateway runtime opened, checked closed. */
async function expectClosed(runtime: Runtime, facadeUrl: string, coreUrl: string) {
  await expect(runtime.stores!.ledger.balances("acct_x")).rejects.toThrow();
  const credit = {
    entryId: "credit_after_close",
    accountId: "acct_x",
    chain: "base",
    amount: 1n,
    from: SYSTEM_MANUAL_CREDIT,
    memo: "after close",
    createdAt: Date.now(),
  };
  await expect(runtime.stores!.ledger.credit(credit)).rejects.toThrow(/ledger writer/);
  await expect(fetch(`${facadeUrl}/v1/health`)).rejects.toThrow();
  await expect(fetch(`${coreUrl}/tollgate.health.v1.HealthService/Check`)).rejects.toThrow();
}

describe("the composition root (openRuntime)", () => {
  it("owns what it opens: close() drains and closes the facade, the core, the ledger's writer thread and the database", async () => {
    const upstream = await startDevUpstream();
    cleanups.push(() => upstream.close());
    const runtime = await openRuntime(config({ TOLLGATE_ANTHROPIC_URL: upstream.url }), { mode: "embedded" });
    const facadeUrl = await runtime.facade!.listen({ host: "127.0.0.1", port: 0 });
    const coreUrl = await runtime.core!.server.listen({ host: "127.0.0.1", port: 0 });
    const health = await fetch(`${facadeUrl}/v1/health`);
    expect(health.status).toBe(200);
    expect(runtime.textUpstream).toBeDefined();
    expect(runtime.chains).toBeUndefined();
    await runtime.close(1_000);
    await expectClosed(runtime, facadeUrl, coreUrl);
    // A second close is the first one's promise: nothing is closed twice.
    await runtime.close(1_000);
  });

  it("the operator runtime is the CLI's core: no facade, no listener, its writes seen by a gateway on the same data dir", async () => {
    const upstream = await startDevUpstream();
    cleanups.push(() => upstream.close());
    const settings = config({ TOLLGATE_ANTHROPIC_URL: upstream.url });
    const gateway = await openRuntime(settings, { mode: "embedded" });
    cleanups.push(() => gateway.close());
    const operator = await openRuntime(settings, { mode: "operator" });
    expect(operator.facade).toBeUndefined();
    expect(operator.core).toBeUndefined();
    const { account } = await createClient(AuthService, operator.transport!).createAccount({ name: "op" });
    await operator.close();
    await expect(operator.stores!.ledger.balances("acct_x")).rejects.toThrow();
    expect(await gateway.stores!.ledger.accountExists(account!.id)).toBe(true);
  });

  it("serve refuses without a provider, a chain registry, a master secret and a public URL, naming each, and opens nothing", async () => {
    const settings = config({ TOLLGATE_DEV_CHAINS: "auto" });
    const refused = await openRuntime(settings, { mode: "serve" }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(ServeRefused);
    const { missing } = refused as ServeRefused;
    expect(missing.map((m) => m.split(" ")[0])).toEqual([
      "TOLLGATE_ANTHROPIC_API_KEY",
      "TOLLGATE_CHAINS",
      "TOLLGATE_MASTER_SECRET",
      "TOLLGATE_PUBLIC_URL",
    ]);
    // A facade-only tier needs its public URL and the token that vouches for it to the core.
    const tier = config({ TOLLGATE_CORE_URL: "http://127.0.0.1:9" });
    const refusedTier = await openRuntime(tier, { mode: "serve" }).catch((error: unknown) => error);
    expect((refusedTier as ServeRefused).missing.map((m) => m.split(" ")[0])).toEqual([
      "TOLLGATE_PUBLIC_URL",
      "TOLLGATE_FACADE_TOKEN",
    ]);
    const worker = await openRuntime(settings, { mode: "worker" }).catch((error: unknown) => error);
    expect((worker as ServeRefused).missing.map((m) => m.split(" ")[0])).toEqual([
      "TOLLGATE_CHAINS",
      "TOLLGATE_MASTER_SECRET",
    ]);
  });
});
