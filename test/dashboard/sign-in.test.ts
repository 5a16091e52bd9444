import { request } from "node:http";
import { text } from "node:stream/consumers";
import { createClient, createRouterTransport } from "@connectrpc/connect";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { AuthService, WalletFamily } from "../../src/gen/tollgate/auth/v1/auth_pb.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { startTestGateway, type TestGateway } from "../helpers/app.js";
import { coreOver } from "../helpers/core.js";
import { tempDir } from "../helpers/process.js";
import { cookieOf, dashboardRpc, type RpcOptions, type RpcResult } from "./dashboard-rpc.js";
import { evmWallet, type MessageFields, siweMessage, solanaMessage, solanaWallet } from "./wallets.js";

let gateway: TestGateway;
let base: string;
let where: { domain: string; origin: string };

beforeAll(async () => {
  gateway = await startTestGateway();
  base = gateway.facadeUrl;
  where = { domain: new URL(base).host, origin: base };
});
// Issue 29's "done when": the ledger audit is clean after each test (sign-ins open accounts).
afterEach(() => {
  expect(auditLedger(gateway.db)).toEqual([]);
});
afterAll(async () => {
  await gateway?.close();
});

async function nonce(): Promise<string> {
  const res = await dashboardRpc(base, "AuthService/CreateSignInNonce", {});
  expect(res.status).toBe(200);
  return res.body.nonce;
}

/** Signs in with a fresh (or given) EVM wallet; returns the cookie, CSRF token and response. */
async function signInEvm(
  wallet = evmWallet(),
  fields: Partial<MessageFields> = {},
  options: RpcOptions & { link?: boolean } = {},
) {
  const message = siweMessage(wallet.address, { ...where, nonce: await nonce(), ...fields });
  const signature = await wallet.signMessage({ message });
  const res = await dashboardRpc(
    base,
    "AuthService/SignIn",
    { family: "WALLET_FAMILY_EVM", message, signature, link: options.link ?? false },
    options,
  );
  return { res, message, signature, wallet };
}

/** A dashboard RPC over a real socket with the `Host` header the caller chose. */
async function rpcWithHost(baseUrl: string, method: string, body: unknown, host: string) {
  const url = new URL(`${baseUrl}/dashboard/rpc/tollgate.auth.v1.${method}`);
  const payload = JSON.stringify(body);
  return await new Promise<{ status: number; body: RpcResult["body"]; setCookie: string[] | undefined }>(
    (resolve, reject) => {
      const req = request(
        url,
        {
          method: "POST",
          headers: { host, "content-type": "application/json", "content-length": Buffer.byteLength(payload) },
        },
        async (res) => {
          resolve({
            status: res.statusCode!,
            body: JSON.parse(await text(res)),
            setCookie: res.headers["set-cookie"],
          });
        },
      );
      req.on("error", reject);
      req.end(payload);
    },
  );
}

async function session(wallet = evmWallet()) {
  const { res } = await signInEvm(wallet);
  expect(res.status).toBe(200);
  return {
    cookie: cookieOf(res.setCookie),
    csrf: res.body.csrfToken as string,
    accountId: res.body.account.id,
  };
}

describe("wallet sign-in through the dashboard bridge", () => {
  it("creates the account at the first sign-in and sets an HttpOnly, SameSite=Strict cookie", async () => {
    const wallet = evmWallet();
    const first = await signInEvm(wallet);
    expect(first.res.status).toBe(200);
    expect(first.res.body.created).toBe(true);
    expect(first.res.body.sessionToken ?? "").toBe("");
    expect(first.res.setCookie).toMatch(
      /^tollgate_session=tgs_[\w-]+; Max-Age=43200; Path=\/dashboard; HttpOnly; SameSite=Strict$/,
    );
    const again = await signInEvm(wallet);
    expect(again.res.body.created ?? false).toBe(false);
    expect(again.res.body.account.id).toBe(first.res.body.account.id);
    const me = await dashboardRpc(
      base,
      "AuthService/GetSession",
      {},
      { cookie: cookieOf(again.res.setCookie) },
    );
    expect(me.body.identities).toEqual([
      expect.objectContaining({ family: "WALLET_FAMILY_EVM", address: wallet.address }),
    ]);
    expect(me.body.csrfToken).toBe(again.res.body.csrfToken);
  });

  it("refuses a replayed message: the nonce is single-use", async () => {
    const { res, message, signature } = await signInEvm();
    expect(res.status).toBe(200);
    const replay = await dashboardRpc(base, "AuthService/SignIn", {
      family: "WALLET_FAMILY_EVM",
      message,
      signature,
    });
    expect(replay.status).toBe(401);
    expect(replay.body.details[0].debug).toMatchObject({
      reason: "SIGN_IN_REFUSED",
      metadata: { problem: "nonce" },
    });
    expect(replay.setCookie).toBeNull();
  });

  it("refuses an expired message, another domain, another origin, an unknown chain and a forged signature", async () => {
    const cases: [Partial<MessageFields>, string][] = [
      [{ expirationTime: new Date(Date.now() - 1_000), issuedAt: new Date(Date.now() - 60_000) }, "expired"],
      [{ domain: "evil.example" }, "domain"],
      [{ origin: "http://evil.example" }, "uri"],
      [{ chainId: 1 }, "chain"],
      [{ issuedAt: new Date(Date.now() + 3_600_000) }, "issued_at"],
    ];
    for (const [fields, problem] of cases) {
      const { res } = await signInEvm(evmWallet(), fields);
      expect([res.status, res.body.details?.[0]?.debug?.metadata?.problem]).toEqual([401, problem]);
    }
    const victim = evmWallet();
    const message = siweMessage(victim.address, { ...where, nonce: await nonce() });
    const forged = await evmWallet().signMessage({ message });
    const res = await dashboardRpc(base, "AuthService/SignIn", {
      family: "WALLET_FAMILY_EVM",
      message,
      signature: forged,
    });
    expect([res.status, res.body.details[0].debug.metadata.problem]).toEqual([401, "signature"]);
  });

  it("checks the gateway's own origin, never the caller's Host: a message signed for another site opens no session", async () => {
    // A page on evil.example fetches a nonce, has the victim's wallet sign an ordinary sign-in
    // for evil.example (the wallet sees nothing odd: the domain matches the page), and replays
    // it here with `Host: evil.example` (or through DNS rebinding, which sends the same).
    const victim = evmWallet();
    const evil = { domain: "evil.example", origin: "http://evil.example" };
    const message = siweMessage(victim.address, { ...evil, nonce: await nonce() });
    const signature = await victim.signMessage({ message });
    const res = await rpcWithHost(
      base,
      "AuthService/SignIn",
      { family: "WALLET_FAMILY_EVM", message, signature },
      "evil.example",
    );
    expect(res.status).toBe(401);
    expect(res.body.details[0].debug).toMatchObject({
      reason: "SIGN_IN_REFUSED",
      metadata: { problem: "domain" },
    });
    expect(res.setCookie).toBeUndefined();
    // Without a public URL the gateway is where it listens, under either loopback spelling.
    const local = {
      domain: `localhost:${new URL(base).port}`,
      origin: `http://localhost:${new URL(base).port}`,
    };
    const { res: viaLocalhost } = await signInEvm(evmWallet(), local);
    expect(viaLocalhost.status).toBe(200);
  });

  it("signs in with a Solana wallet (ed25519), and refuses a signature by another key", async () => {
    const wallet = solanaWallet();
    const message = solanaMessage(wallet.address, { ...where, nonce: await nonce() });
    const signature = Buffer.from(wallet.signMessage(new TextEncoder().encode(message))).toString("base64");
    const res = await dashboardRpc(base, "AuthService/SignIn", {
      family: "WALLET_FAMILY_SOLANA",
      message,
      signature,
    });
    expect(res.status).toBe(200);
    expect(res.body.identities).toEqual([
      expect.objectContaining({ family: "WALLET_FAMILY_SOLANA", address: wallet.address }),
    ]);

    const other = solanaMessage(wallet.address, { ...where, nonce: await nonce() });
    const forged = Buffer.from(solanaWallet().signMessage(new TextEncoder().encode(other))).toString(
      "base64",
    );
    const refused = await dashboardRpc(base, "AuthService/SignIn", {
      family: "WALLET_FAMILY_SOLANA",
      message: other,
      signature: forged,
    });
    expect([refused.status, refused.body.details[0].debug.metadata.problem]).toEqual([401, "signature"]);
  });

  it("links a Solana identity to the signed-in account, once", async () => {
    const { cookie, csrf, accountId } = await session();
    const sol = solanaWallet();
    const link = async (options: RpcOptions) => {
      const message = solanaMessage(sol.address, { ...where, nonce: await nonce() });
      const signature = Buffer.from(sol.signMessage(new TextEncoder().encode(message))).toString("base64");
      return await dashboardRpc(
        base,
        "AuthService/SignIn",
        { family: "WALLET_FAMILY_SOLANA", message, signature, link: true },
        options,
      );
    };
    expect((await link({ cookie })).status).toBe(403); // no CSRF token
    const linked = await link({ cookie, csrf });
    expect(linked.status).toBe(200);
    expect(linked.body.account.id).toBe(accountId);
    expect(linked.body.identities.map((i: { family: string }) => i.family)).toEqual([
      "WALLET_FAMILY_EVM",
      "WALLET_FAMILY_SOLANA",
    ]);
    // Signing in with the linked Solana wallet now opens the same account.
    const message = solanaMessage(sol.address, { ...where, nonce: await nonce() });
    const signature = Buffer.from(sol.signMessage(new TextEncoder().encode(message))).toString("base64");
    const viaSolana = await dashboardRpc(base, "AuthService/SignIn", {
      family: "WALLET_FAMILY_SOLANA",
      message,
      signature,
    });
    expect(viaSolana.body.account.id).toBe(accountId);
    // Another account cannot take it.
    const other = await session();
    const stolen = await link(other);
    expect([stolen.status, stolen.body.details[0].debug.reason]).toEqual([409, "IDENTITY_LINKED"]);
  });

  it("refuses a state-changing call without the CSRF token, or with another session's", async () => {
    const mine = await session();
    const theirs = await session();
    const noToken = await dashboardRpc(base, "AuthService/CreateKey", { name: "k" }, { cookie: mine.cookie });
    expect([noToken.status, noToken.body.details[0].debug.reason]).toEqual([403, "CSRF_TOKEN_INVALID"]);
    const wrong = await dashboardRpc(
      base,
      "AuthService/CreateKey",
      { name: "k" },
      { cookie: mine.cookie, csrf: theirs.csrf },
    );
    expect(wrong.status).toBe(403);
    const keys = await dashboardRpc(base, "AuthService/ListKeys", {}, { cookie: mine.cookie });
    expect(keys.body.keys ?? []).toEqual([]);
    const ok = await dashboardRpc(base, "AuthService/CreateKey", { name: "k" }, mine);
    expect(ok.status).toBe(200);
    expect(ok.body.secret).toMatch(/^tg_/);
  });

  it("keeps one account's session out of another account's keys and usage", async () => {
    const alice = await session();
    const bob = await session();
    const bobKey = await dashboardRpc(base, "AuthService/CreateKey", { name: "bob" }, bob);
    const aliceKeys = await dashboardRpc(base, "AuthService/ListKeys", {}, alice);
    expect(aliceKeys.body.keys ?? []).toEqual([]);
    const named = await dashboardRpc(base, "AuthService/ListKeys", { accountId: bob.accountId }, alice);
    expect([named.status, named.body.details[0].debug.reason]).toEqual([403, "OTHER_ACCOUNT"]);
    const usage = await dashboardRpc(base, "BillingService/ListUsage", { accountId: bob.accountId }, alice);
    expect([usage.status, usage.body.details[0].debug.reason]).toEqual([403, "OTHER_ACCOUNT"]);
    const balances = await dashboardRpc(
      base,
      "BillingService/GetBalances",
      { accountId: bob.accountId },
      alice,
    );
    expect(balances.status).toBe(403);
    const revoke = await dashboardRpc(base, "AuthService/RevokeKey", { keyId: bobKey.body.key.id }, alice);
    expect([revoke.status, revoke.body.details[0].debug.reason]).toEqual([404, "KEY_NOT_FOUND"]);
    const still = await dashboardRpc(base, "AuthService/ListKeys", {}, bob);
    expect(still.body.keys[0].status).toBe("KEY_STATUS_ACTIVE");
  });

  it("reaches no operator or internal RPC with a session, and none without one", async () => {
    const mine = await session();
    const credit = await dashboardRpc(
      base,
      "BillingService/Credit",
      { accountId: mine.accountId, chain: "base", amount: "1000000" },
      mine,
    );
    expect(credit.status).toBe(501);
    const anonymous = await dashboardRpc(base, "BillingService/GetBalances", {});
    expect([anonymous.status, anonymous.body.details[0].debug.reason]).toEqual([401, "SESSION_INVALID"]);
    const pricing = await dashboardRpc(base, "BillingService/GetPricing", {});
    expect(pricing.status).toBe(200);
  });

  it("ends the session at sign-out and clears the cookie", async () => {
    const mine = await session();
    const out = await dashboardRpc(base, "AuthService/SignOut", {}, mine);
    expect(out.status).toBe(200);
    expect(out.setCookie).toMatch(/^tollgate_session=; Max-Age=0/);
    const after = await dashboardRpc(base, "AuthService/GetSession", {}, { cookie: mine.cookie });
    expect([after.status, after.body.details[0].debug.reason]).toEqual([401, "SESSION_INVALID"]);
  });
});

describe("sign-in expiry, on the core's clock", () => {
  it("refuses a nonce five minutes after it was issued, and a session after twelve hours", async () => {
    const dir = tempDir();
    const db = openDatabase(dir.path);
    let clock = Date.parse("2026-11-23T08:00:00Z");
    // The core checks messages against its own public origin (TOLLGATE_PUBLIC_URL).
    const core = coreOver(db, { now: () => clock, signInOrigins: () => ["https://gw.example"] });
    const wallet = evmWallet();
    const anonymous = createClient(
      AuthService,
      createRouterTransport(core.routes, { router: core.routerOptions }),
    );
    const fields = { domain: "gw.example", origin: "https://gw.example" };
    const attempt = async (nonce: string) => {
      const message = siweMessage(wallet.address, { ...fields, nonce, issuedAt: new Date(clock) });
      return await anonymous.signIn({
        family: WalletFamily.EVM,
        message,
        signature: await wallet.signMessage({ message }),
      });
    };
    try {
      const stale = await anonymous.createSignInNonce({});
      clock += 5 * 60_000;
      await expect(attempt(stale.nonce)).rejects.toThrow(/nonce is unknown, used already or expired/);
      const fresh = await anonymous.createSignInNonce({});
      clock += 5 * 60_000 - 1;
      const { sessionToken } = await attempt(fresh.nonce);
      const asSession = createClient(
        AuthService,
        createRouterTransport(core.routes, { router: core.routerOptions }),
      );
      const headers = { "x-tollgate-session": sessionToken };
      await expect(asSession.getSession({}, { headers })).resolves.toBeDefined();
      clock += 12 * 3_600_000;
      await expect(asSession.getSession({}, { headers })).rejects.toThrow(/session is missing, expired/);
    } finally {
      db.close();
      dir.cleanup();
    }
  });
});
