import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { KeyStatus } from "../../src/gen/tollgate/auth/v1/auth_pb.js";
import { accountWithKey, startTestGateway, type TestGateway } from "../helpers/app.js";

type Format = "anthropic" | "openai";

const ENDPOINTS: readonly { path: string; format: Format; contentType: string; body: string }[] = [
  { path: "/v1/messages", format: "anthropic", contentType: "application/json", body: "{}" },
  { path: "/v1/messages?beta=true", format: "anthropic", contentType: "application/json", body: "{}" },
  { path: "/v1/messages/count_tokens", format: "anthropic", contentType: "application/json", body: "{}" },
  { path: "/v1/images/generations", format: "openai", contentType: "application/json", body: "{}" },
  {
    path: "/v1/images/edits",
    format: "openai",
    contentType: "multipart/form-data; boundary=x",
    body: '--x\r\nContent-Disposition: form-data; name="prompt"\r\n\r\nhi\r\n--x--\r\n',
  },
];

let gw: TestGateway;
let upstream: DevUpstream;
let good: Awaited<ReturnType<typeof accountWithKey>>;
let revoked: Awaited<ReturnType<typeof accountWithKey>>;
let suspended: Awaited<ReturnType<typeof accountWithKey>>;

beforeAll(async () => {
  upstream = await startDevUpstream();
  gw = await startTestGateway({ TOLLGATE_ANTHROPIC_URL: upstream.url });
  good = await accountWithKey(gw.operator, "good");
  revoked = await accountWithKey(gw.operator, "revoked");
  await gw.operator.revokeKey({ keyId: revoked.keyId });
  suspended = await accountWithKey(gw.operator, "suspended");
  await gw.operator.suspendAccount({ accountId: suspended.accountId, reason: "test" });
});

afterAll(async () => {
  await gw.close();
  await upstream.close();
});

/**
 * What an authenticated caller gets for an empty body: a 400 naming the missing field (`model`
 * for the text routes and generations, `image` for an edit without files).
 */
const PAST_AUTH: Record<Format, { status: number; type: string }> = {
  anthropic: { status: 400, type: "invalid_request_error" },
  openai: { status: 400, type: "invalid_request_error" },
};

async function call(path: string, headers: Record<string, string>, contentType: string, body: string) {
  const response = await fetch(gw.facadeUrl + path, {
    method: "POST",
    headers: { "content-type": contentType, ...headers },
    body,
  });
  return {
    status: response.status,
    requestId: response.headers.get("x-request-id"),
    body: await response.json(),
  };
}

/** Asserts the format's error envelope, the status, and that x-request-id is present (and echoed). */
function expectEnvelope(
  format: Format,
  result: Awaited<ReturnType<typeof call>>,
  status: number,
  type: string,
  code?: string | null,
  param: unknown = null,
) {
  expect(result.status).toBe(status);
  expect(result.requestId).toMatch(/^req_[A-Za-z0-9_-]{24}$/);
  if (format === "anthropic") {
    expect(result.body).toEqual({
      type: "error",
      error: { type, message: expect.any(String) },
      request_id: result.requestId,
    });
  } else {
    expect(result.body).toEqual({
      error: {
        message: expect.any(String),
        type,
        param,
        code: code === undefined ? expect.anything() : code,
      },
    });
  }
}

describe.each(ENDPOINTS)("auth matrix on $path", ({ path, format, contentType, body }) => {
  const unauthorized = "authentication_error";

  it("401 without a key", async () => {
    expectEnvelope(format, await call(path, {}, contentType, body), 401, unauthorized, "key_missing");
  });

  it("401 for a malformed key (wrong shape, or a typo caught by the checksum)", async () => {
    expectEnvelope(
      format,
      await call(path, { "x-api-key": "tg_short" }, contentType, body),
      401,
      unauthorized,
    );
    const typo = good.secret.slice(0, 10) + (good.secret[10] === "a" ? "b" : "a") + good.secret.slice(11);
    expectEnvelope(
      format,
      await call(path, { "x-api-key": typo }, contentType, body),
      401,
      unauthorized,
      "key_malformed",
    );
    expectEnvelope(
      format,
      await call(path, { authorization: "Basic abc" }, contentType, body),
      401,
      unauthorized,
    );
  });

  it("401 for a well-formed key the gateway never issued", async () => {
    const { generateKey } = await import("../../src/core/auth/keys.js");
    const result = await call(path, { "x-api-key": generateKey().secret }, contentType, body);
    expectEnvelope(format, result, 401, unauthorized, "key_unknown");
  });

  it("accepts a valid key in x-api-key and in Authorization: Bearer (then judges the body)", async () => {
    const presentations: Record<string, string>[] = [
      { "x-api-key": good.secret },
      { authorization: `Bearer ${good.secret}` },
    ];
    for (const headers of presentations) {
      const result = await call(path, headers, contentType, body);
      if (format === "openai") {
        const param = path.endsWith("/edits") ? "image" : "model";
        expectEnvelope(format, result, 400, "invalid_request_error", "invalid_field", param);
        continue;
      }
      expectEnvelope(format, result, PAST_AUTH[format].status, PAST_AUTH[format].type, null);
      if (format === "anthropic")
        expect((result.body as { error: { message: string } }).error.message).toMatch(/^model: /);
    }
  });

  it("403 for a revoked key and for a suspended account", async () => {
    const r = await call(path, { "x-api-key": revoked.secret }, contentType, body);
    expectEnvelope(format, r, 403, "permission_error", "key_revoked");
    const s = await call(path, { authorization: `Bearer ${suspended.secret}` }, contentType, body);
    expectEnvelope(format, s, 403, "permission_error", "account_suspended");
  });
});

describe("key lifecycle", () => {
  it("a key works until revoked, and fails on its very next request after", async () => {
    const k = await accountWithKey(gw.operator, "lifecycle");
    const first = await call("/v1/messages", { "x-api-key": k.secret }, "application/json", "{}");
    expect(first.status).toBe(400);
    await gw.operator.revokeKey({ keyId: k.keyId });
    const next = await call("/v1/messages", { "x-api-key": k.secret }, "application/json", "{}");
    expectEnvelope("anthropic", next, 403, "permission_error");
    const { keys } = await gw.operator.listKeys({ accountId: k.accountId });
    expect(keys).toHaveLength(1);
    expect(keys[0]!.status).toBe(KeyStatus.REVOKED);
    expect(keys[0]!.lastUsedAt).toBeDefined();
    expect(keys[0]!.revokedAt).toBeDefined();
    expect(keys[0]!.prefix).toBe(k.secret.slice(0, 11));
    expect(Object.values(keys[0]!)).not.toContain(k.secret);
  });

  it("suspension takes effect at once and reactivation restores the same key", async () => {
    const k = await accountWithKey(gw.operator, "suspend-me");
    await gw.operator.suspendAccount({ accountId: k.accountId, reason: "chargeback" });
    expect((await call("/v1/messages", { "x-api-key": k.secret }, "application/json", "{}")).status).toBe(
      403,
    );
    await gw.operator.reactivateAccount({ accountId: k.accountId });
    expect((await call("/v1/messages", { "x-api-key": k.secret }, "application/json", "{}")).status).toBe(
      400,
    );
  });

  it("lists keys newest first with name, prefix, created, last used and status — never the secret", async () => {
    const { account } = await gw.operator.createAccount({ name: "many" });
    const a = await gw.operator.createKey({ accountId: account!.id, name: "first" });
    const b = await gw.operator.createKey({ accountId: account!.id, name: "second" });
    expect(a.secret).not.toBe(b.secret);
    const { keys } = await gw.operator.listKeys({ accountId: account!.id });
    expect(keys.map((k) => k.name)).toEqual(["second", "first"]);
    expect(keys[0]!.prefix).toBe(b.secret.slice(0, 11));
    expect(keys[0]!.lastUsedAt).toBeUndefined();
  });
});

describe("responses outside the auth scopes", () => {
  it("health needs no key and names the database", async () => {
    const response = await fetch(`${gw.facadeUrl}/v1/health`);
    expect(response.status).toBe(200);
    expect(response.headers.get("x-request-id")).toMatch(/^req_/);
    const body = (await response.json()) as { status: string; dependencies: { name: string; ok: boolean }[] };
    expect(body.status).toBe("ok");
    expect(body.dependencies.map((d) => [d.name, d.ok])).toEqual([
      ["core", true],
      ["database", true],
      ["storage", true],
    ]);
  });

  it("an unknown route is a 404 in the Anthropic envelope with x-request-id", async () => {
    const response = await fetch(`${gw.facadeUrl}/v2/nothing`);
    expect(response.status).toBe(404);
    const body = (await response.json()) as { request_id: string; error: { type: string } };
    expect(body.error.type).toBe("not_found_error");
    expect(body.request_id).toBe(response.headers.get("x-request-id"));
  });

  it("answers Claude Code's warm-up HEAD / at once", async () => {
    const response = await fetch(`${gw.facadeUrl}/`, { method: "HEAD" });
    expect(response.status).toBe(200);
  });
});
