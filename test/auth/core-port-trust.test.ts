/**
 * The core's port trusts only what it can check (issue 29, item 8): a request's `client_address`
 * and a sign-in's `expected_domain`/`expected_origin` are taken only from a facade that proves
 * itself (in process, or over the network with TOLLGATE_FACADE_TOKEN); any other caller's are
 * ignored. Every client is a real socket bound to an address of its own in 127.0.0.0/8.
 */
import { connect } from "node:net";
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Agent, fetch } from "undici";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config/config.js";
import { FACADE_TOKEN_HEADER } from "../../src/core/auth/facade-proof.js";
import { generateKey } from "../../src/core/auth/keys.js";
import { errorInfo } from "../../src/core/errors.js";
import { AuthService, WalletFamily } from "../../src/gen/tollgate/auth/v1/auth_pb.js";
import { openRuntime, type Runtime } from "../../src/runtime/runtime.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { cookieOf, type RpcResult } from "../dashboard/dashboard-rpc.js";
import { evmWallet, siweMessage } from "../dashboard/wallets.js";
import { startTestGateway, type TestGateway } from "../helpers/app.js";
import { tempDir } from "../helpers/process.js";

const FACADE_TOKEN = "facade-token-0123456789abcdef-0123456789";
/** Failed authentications an address may have per minute (the default) before it is blocked. */
const BUDGET = 30;

let gateway: TestGateway;
let tier: Runtime;
let tierUrl: string;
let tierDir: ReturnType<typeof tempDir>;

beforeAll(async () => {
  gateway = await startTestGateway({ TOLLGATE_FACADE_TOKEN: FACADE_TOKEN });
  // A facade-only tier in front of that core, proving itself with the shared token.
  tierDir = tempDir();
  tier = await openRuntime(
    loadConfig({
      TOLLGATE_CORE_URL: gateway.coreUrl,
      TOLLGATE_FACADE_TOKEN: FACADE_TOKEN,
      TOLLGATE_PUBLIC_URL: "http://tier.example",
      TOLLGATE_DATA_DIR: tierDir.path,
    }),
    { mode: "embedded" },
  );
  tierUrl = await tier.facade!.listen({ host: "127.0.0.1", port: 0 });
});
// Issue 29's "done when": the ledger audit is clean after each attack.
afterEach(() => {
  expect(auditLedger(gateway.db)).toEqual([]);
});
afterAll(async () => {
  if (tier !== undefined) await tier.close(2_000);
  tierDir?.cleanup();
  await gateway?.close();
});

/** An AuthService client on the core's port, its connection bound to `address`, presenting `headers`. */
function coreAt(address: string, headers: Record<string, string> = {}) {
  const present: Interceptor = (next) => (req) => {
    for (const [name, value] of Object.entries(headers)) req.header.set(name, value);
    return next(req);
  };
  const transport = createConnectTransport({
    baseUrl: gateway.coreUrl,
    httpVersion: "2",
    interceptors: [present],
    nodeOptions: {
      createConnection: (authority: URL) =>
        connect({ host: authority.hostname, port: Number(authority.port), localAddress: address }),
    },
  });
  return createClient(AuthService, transport);
}

/** A key of the right shape, with a valid checksum, that no account has. */
const guessedKey = () => generateKey().secret;

/** How the core answered: "ok", or the error's code and reason. */
async function outcome(call: Promise<unknown>): Promise<string> {
  try {
    await call;
    return "ok";
  } catch (error) {
    const e = ConnectError.from(error);
    return `${Code[e.code]} ${errorInfo(e)?.reason ?? ""}`;
  }
}

/** A call on /v1/messages through a facade from `address`, presenting `key`: the status. */
async function facadeStatus(base: string, address: string, key: string): Promise<number> {
  const dispatcher = new Agent({ localAddress: address });
  try {
    const response = await fetch(`${base}/v1/messages`, {
      method: "POST",
      dispatcher,
      headers: { "content-type": "application/json", "x-api-key": key },
      body: JSON.stringify({ model: "model-haiku-4-5", max_tokens: 8, messages: [] }),
    });
    await response.arrayBuffer();
    return response.status;
  } finally {
    await dispatcher.close();
  }
}

describe("the core's port", () => {
  it("ignores the client_address a caller without the facade token names: it cannot lock another address out", async () => {
    const attacker = coreAt("127.0.0.31");
    const victim = "127.0.0.32";
    const answers: string[] = [];
    for (let i = 0; i < BUDGET + 10; i++) {
      answers.push(await outcome(attacker.authenticate({ key: guessedKey(), clientAddress: victim })));
    }
    // Counted under the attacker's own connection, which is blocked in the end...
    expect(answers.slice(0, BUDGET)).toEqual(Array(BUDGET).fill("Unauthenticated KEY_UNKNOWN"));
    expect(answers.slice(BUDGET)).toEqual(Array(10).fill("ResourceExhausted AUTH_THROTTLED"));
    // ...while the address it named is not: a wrong key from there is still just a wrong key.
    expect(await facadeStatus(gateway.facadeUrl, victim, guessedKey())).toBe(401);
    expect(await outcome(coreAt(victim).authenticate({ key: guessedKey() }))).toBe(
      "Unauthenticated KEY_UNKNOWN",
    );
  });

  it("ignores the expected_domain and expected_origin a caller without the facade token names", async () => {
    const caller = coreAt("127.0.0.33");
    const wallet = evmWallet();
    const evil = { domain: "evil.example", origin: "http://evil.example" };
    const { nonce } = await caller.createSignInNonce({});
    const message = siweMessage(wallet.address, { ...evil, nonce });
    const refused = caller.signIn({
      family: WalletFamily.EVM,
      message,
      signature: await wallet.signMessage({ message }),
      expectedDomain: evil.domain,
      expectedOrigin: evil.origin,
    });
    const error = await refused.then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );
    expect(error?.code).toBe(Code.Unauthenticated);
    expect(errorInfo(error!)).toMatchObject({ reason: "SIGN_IN_REFUSED", metadata: { problem: "domain" } });

    // A message for the gateway's own origin (here, where its facade listens) signs in there.
    const own = new URL(gateway.facadeUrl);
    const again = await caller.createSignInNonce({});
    const good = siweMessage(wallet.address, { domain: own.host, origin: own.origin, nonce: again.nonce });
    const session = await caller.signIn({
      family: WalletFamily.EVM,
      message: good,
      signature: await wallet.signMessage({ message: good }),
      expectedDomain: evil.domain,
      expectedOrigin: evil.origin,
    });
    expect(session.sessionToken).toMatch(/^tgs_/);
  });

  it("takes a facade's client_address once it proves itself with the token, and refuses a wrong token", async () => {
    const facade = coreAt("127.0.0.34", { [FACADE_TOKEN_HEADER]: FACADE_TOKEN });
    const client = "127.0.0.35";
    for (let i = 0; i < BUDGET; i++) {
      expect(await outcome(facade.authenticate({ key: guessedKey(), clientAddress: client }))).toBe(
        "Unauthenticated KEY_UNKNOWN",
      );
    }
    // The client it named is blocked, on the core's port and through the facade alike...
    expect(await outcome(facade.authenticate({ key: guessedKey(), clientAddress: client }))).toBe(
      "ResourceExhausted AUTH_THROTTLED",
    );
    expect(await outcome(coreAt(client).authenticate({ key: guessedKey() }))).toBe(
      "ResourceExhausted AUTH_THROTTLED",
    );
    // ...and the facade's own connection is not.
    expect(await outcome(coreAt("127.0.0.34").authenticate({ key: guessedKey() }))).toBe(
      "Unauthenticated KEY_UNKNOWN",
    );
    // A token that is not the core's is refused outright, never taken for an anonymous caller.
    const wrong = coreAt("127.0.0.36", { [FACADE_TOKEN_HEADER]: `${FACADE_TOKEN}-not` });
    expect(await outcome(wrong.authenticate({ key: guessedKey(), clientAddress: client }))).toBe(
      "Unauthenticated FACADE_TOKEN_INVALID",
    );
  });

  it("serves a facade-only tier that proves itself: its clients' addresses and its own public origin count", async () => {
    const guesser = "127.0.0.37";
    const statuses: number[] = [];
    for (let i = 0; i < BUDGET + 2; i++) statuses.push(await facadeStatus(tierUrl, guesser, guessedKey()));
    expect(statuses.slice(0, BUDGET)).toEqual(Array(BUDGET).fill(401));
    expect(statuses.slice(BUDGET)).toEqual([429, 429]);
    // Another client of the same tier is untouched: the core counted the guesser, not the tier.
    expect(await facadeStatus(tierUrl, "127.0.0.38", guessedKey())).toBe(401);

    // The tier's dashboard signs in against its configured public URL, which the core takes from it.
    const nonce = await tierRpc("AuthService/CreateSignInNonce", {});
    const wallet = evmWallet();
    const message = siweMessage(wallet.address, {
      domain: "tier.example",
      origin: "http://tier.example",
      nonce: nonce.body.nonce,
    });
    const signedIn = await tierRpc("AuthService/SignIn", {
      family: "WALLET_FAMILY_EVM",
      message,
      signature: await wallet.signMessage({ message }),
    });
    expect(signedIn.status).toBe(200);
    expect(cookieOf(signedIn.setCookie)).toMatch(/^tollgate_session=tgs_/);
  });
});

/** A dashboard RPC on the tier (its Connect bridge, JSON). */
async function tierRpc(method: string, body: unknown): Promise<RpcResult> {
  const response = await fetch(`${tierUrl}/dashboard/rpc/tollgate.auth.v1.${method}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return {
    status: response.status,
    body: await response.json(),
    setCookie: response.headers.get("set-cookie"),
  };
}
