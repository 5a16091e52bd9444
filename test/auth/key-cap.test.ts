/**
 * The live-key cap (issue 29, item 10): an account has at most TOLLGATE_MAX_LIVE_KEYS unrevoked
 * keys, so one free sign-in cannot mint keys to multiply per-key limits. Tried the way a hostile
 * account would: through the dashboard with its session, and with its own key on the core's
 * port, many at once.
 */
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { errorInfo } from "../../src/core/errors.js";
import { AuthService, KeyStatus } from "../../src/gen/tollgate/auth/v1/auth_pb.js";
import { remoteCoreTransport } from "../../src/runtime/remote-core.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { cookieOf, dashboardRpc } from "../dashboard/dashboard-rpc.js";
import { evmWallet, siweMessage } from "../dashboard/wallets.js";
import { startTestGateway, type TestGateway } from "../helpers/app.js";

const CAP = 3;

let gateway: TestGateway;
beforeAll(async () => {
  gateway = await startTestGateway({ TOLLGATE_MAX_LIVE_KEYS: `${CAP}` });
});
// Issue 29's "done when": the ledger audit is clean after each attack.
afterEach(() => {
  expect(auditLedger(gateway.db)).toEqual([]);
});
afterAll(async () => {
  await gateway?.close();
});

/** A fresh wallet's first sign-in: a new account with its dashboard session. */
async function freshSession() {
  const base = gateway.facadeUrl;
  const nonce = (await dashboardRpc(base, "AuthService/CreateSignInNonce", {})).body.nonce as string;
  const wallet = evmWallet();
  const message = siweMessage(wallet.address, { domain: new URL(base).host, origin: base, nonce });
  const res = await dashboardRpc(base, "AuthService/SignIn", {
    family: "WALLET_FAMILY_EVM",
    message,
    signature: await wallet.signMessage({ message }),
    link: false,
  });
  expect(res.status).toBe(200);
  return {
    cookie: cookieOf(res.setCookie),
    csrf: res.body.csrfToken as string,
    accountId: res.body.account.id,
  };
}

describe("the live-key cap", () => {
  it("refuses the dashboard's key past the cap with a 4xx naming the fix; a revoked key frees its place", async () => {
    const session = await freshSession();
    const create = (name: string) =>
      dashboardRpc(gateway.facadeUrl, "AuthService/CreateKey", { name }, session);
    const made: string[] = [];
    for (let i = 0; i < CAP; i++) {
      const res = await create(`k${i}`);
      expect(res.status).toBe(200);
      made.push(res.body.key.id);
    }
    const refused = await create("one too many");
    expect(refused.status).toBe(400);
    expect(refused.body.code).toBe("failed_precondition");
    expect(refused.body.message).toMatch(/already has 3 live API keys.*revoke one/);
    const listed = await dashboardRpc(gateway.facadeUrl, "AuthService/ListKeys", {}, session);
    expect(listed.body.keys).toHaveLength(CAP);

    const revoked = await dashboardRpc(
      gateway.facadeUrl,
      "AuthService/RevokeKey",
      { keyId: made[0] },
      session,
    );
    expect(revoked.status).toBe(200);
    expect((await create("in its place")).status).toBe(200);
    expect((await create("again too many")).status).toBe(400);
  });

  it("lets one of many concurrent CreateKey calls with the account's own key take the last place", async () => {
    const { accountId } = await freshSession();
    const operator = createClient(AuthService, remoteCoreTransport(gateway.coreUrl));
    // The account's first key, made by the operator over the CLI's port.
    const first = await gateway.operator.createKey({ accountId, name: "first" });
    await gateway.operator.createKey({ accountId, name: "second" });
    const asKey = { headers: { "x-api-key": first.secret } };
    const outcomes = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        operator.createKey({ name: `race ${i}` }, asKey).then(
          () => "created" as const,
          (error: unknown) => ConnectError.from(error),
        ),
      ),
    );
    expect(outcomes.filter((o) => o === "created")).toHaveLength(1);
    for (const outcome of outcomes) {
      if (outcome === "created") continue;
      expect(outcome.code).toBe(Code.FailedPrecondition);
      expect(errorInfo(outcome)?.reason).toBe("KEY_LIMIT");
      expect(errorInfo(outcome)?.metadata.limit).toBe(`${CAP}`);
    }
    const { keys } = await gateway.operator.listKeys({ accountId });
    expect(keys.filter((k) => k.status === KeyStatus.ACTIVE)).toHaveLength(CAP);
    // The operator is held to the same cap: the account's keys are what the cap counts.
    await expect(gateway.operator.createKey({ accountId, name: "operator's" })).rejects.toThrow(
      /already has 3 live API keys/,
    );
  });
});
