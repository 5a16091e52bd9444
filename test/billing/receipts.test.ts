import { createPublicKey, verify } from "node:crypto";
import Anthropic from "@anthropic-ai/sdk";
import { compactVerify, createLocalJWKSet } from "jose";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { accountWithKey } from "../helpers/app.js";
import { startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

// Signed receipts through the gateway's own routes (docs/receipts.md), checked the way anyone
// holding one would: with the key set the gateway publishes, by Node's own Ed25519 verification
// (not the library that signed them), and by the JOSE library's JWS verification.

let t: TextGateway;
beforeAll(async () => {
  t = await startTextGateway((upstream) => ({ TOLLGATE_GEMINI_URL: upstream }));
  await t.credit(5_000_000n);
});
afterAll(async () => {
  t?.expectSoundLedger();
  await t?.close();
});

interface Jwk {
  kty: string;
  crv: string;
  x: string;
  kid: string;
  alg: string;
  use: string;
}

/** The published key set. */
async function keySet(): Promise<{ keys: Jwk[] }> {
  const response = await fetch(`${t.baseUrl}/.well-known/jwks.json`);
  expect(response.status).toBe(200);
  return (await response.json()) as { keys: Jwk[] };
}

/**
 * A receipt checked without the signing library: the header's `kid` names a published key (its
 * thumbprint after the DID's `#`), and Node verifies the Ed25519 signature over
 * `header.payload` with it. Returns the payload, or undefined when the signature fails.
 */
async function verifiedByNode(jws: string): Promise<Record<string, unknown> | undefined> {
  const [header, payload, signature] = jws.split(".");
  const { alg, kid } = JSON.parse(Buffer.from(header!, "base64url").toString()) as {
    alg: string;
    kid: string;
  };
  expect(alg).toBe("EdDSA");
  const jwk = (await keySet()).keys.find((k) => k.kid === kid.split("#").at(-1));
  expect(jwk).toBeDefined();
  const key = createPublicKey({ key: { kty: jwk!.kty, crv: jwk!.crv, x: jwk!.x }, format: "jwk" });
  const ok = verify(null, Buffer.from(`${header}.${payload}`), key, Buffer.from(signature!, "base64url"));
  return ok
    ? (JSON.parse(Buffer.from(payload!, "base64url").toString()) as Record<string, unknown>)
    : undefined;
}

/** The same check by the JOSE library, against the published key set. */
async function verifiedByJose(jws: string): Promise<Record<string, unknown>> {
  const keys = createLocalJWKSet((await keySet()) as Parameters<typeof createLocalJWKSet>[0]);
  const { payload } = await compactVerify(jws, async (header, token) => {
    // The kid is a DID URL: the key set is indexed by its fragment (the thumbprint).
    const kid = header.kid?.split("#").at(-1);
    return keys({ ...header, kid }, token);
  });
  return JSON.parse(new TextDecoder().decode(payload)) as Record<string, unknown>;
}

/** The request header that asks for the receipt in the answer (docs/receipts.md, "Where to get one"). */
const ASKING = { "x-gateway-receipt": "true" };

function fetchReceipt(requestId: string, secret = t.secret) {
  return fetch(`${t.baseUrl}/v1/receipts/${encodeURIComponent(requestId)}`, {
    headers: { "x-api-key": secret },
  });
}

describe("signed receipts", () => {
  it("a non-streaming call carries its receipt in a header, and it says what the ledger charged", async () => {
    const client = new Anthropic({
      apiKey: t.secret,
      baseURL: t.baseUrl,
      maxRetries: 0,
      defaultHeaders: ASKING,
    });
    const { response } = await client.messages
      .create({ model: "claude-haiku-4-5", max_tokens: 64, messages: [{ role: "user", content: "hi" }] })
      .withResponse();
    const jws = response.headers.get("x-gateway-receipt");
    expect(jws).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
    const requestId = response.headers.get("request-id")!;
    const payload = await verifiedByNode(jws!);
    expect(await verifiedByJose(jws!)).toEqual(payload);
    const row = (await t.usage()).find((r) => r.requestId === requestId)!;
    expect(row.status).toBe(HoldStatus.SETTLED);
    expect(payload).toMatchObject({
      network: "eip155:8453",
      resourceUrl: `${t.baseUrl}/v1/messages`,
      payer: t.accountId,
      requestId,
      accountId: t.accountId,
      keyId: t.keyId,
      model: "model-haiku-4-5",
      chain: "base",
      status: "settled",
      charge: { amount: `${row.amount}`, asset: { symbol: "USDC", decimals: 6 } },
      held: `${row.heldAmount}`,
      usage: { inputTokens: `${row.usage!.inputTokens}`, outputTokens: `${row.usage!.outputTokens}` },
    });
    expect(row.amount).toBeGreaterThan(0n);
    expect((payload!.charges as { lines: unknown[] }).lines.length).toBeGreaterThan(0);
    expect(payload!.issuedAt).toBe(Number(row.resolvedAt!.seconds));
    // The receipt fetched later is signed over the same call.
    const fetched = await fetchReceipt(requestId);
    expect(fetched.status).toBe(200);
    const body = (await fetched.json()) as { format: string; signature: string };
    expect(body.format).toBe("jws");
    expect(await verifiedByNode(body.signature)).toMatchObject({ requestId, charge: payload!.charge });
  });

  it("a stream's receipt is fetched by its request id once it has ended", async () => {
    const client = new Anthropic({ apiKey: t.secret, baseURL: t.baseUrl, maxRetries: 0 });
    const stream = client.messages.stream({
      model: "claude-haiku-4-5",
      max_tokens: 64,
      messages: [{ role: "user", content: "stream it" }],
    });
    await stream.finalMessage();
    const requestId = (await stream.withResponse()).response.headers.get("request-id")!;
    const response = await fetchReceipt(requestId);
    expect(response.status).toBe(200);
    const { signature } = (await response.json()) as { signature: string };
    const row = (await t.usage()).find((r) => r.requestId === requestId)!;
    expect(await verifiedByNode(signature)).toMatchObject({
      requestId,
      status: "settled",
      charge: { amount: `${row.amount}` },
    });
  });

  it("an image call carries its receipt too", async () => {
    const client = new OpenAI({
      apiKey: t.secret,
      baseURL: `${t.baseUrl}/v1`,
      maxRetries: 0,
      defaultHeaders: ASKING,
    });
    const { response } = await client.images
      .generate({ model: "image-pro", prompt: "a receipt", size: "1K" as "1024x1024" })
      .withResponse();
    const payload = await verifiedByNode(response.headers.get("x-gateway-receipt")!);
    const requestId = response.headers.get("x-request-id")!;
    const row = (await t.usage()).find((r) => r.requestId === requestId)!;
    expect(payload).toMatchObject({
      requestId,
      resourceUrl: `${t.baseUrl}/v1/images`,
      model: row.model,
      charge: { amount: `${row.amount}` },
      usage: { images: "1" },
    });
  });

  it("a call that does not ask gets no receipt in its answer, and the same receipt by its id; a bad value is a 400 naming the header, charging nothing", async () => {
    const asked = new Anthropic({
      apiKey: t.secret,
      baseURL: t.baseUrl,
      maxRetries: 0,
      defaultHeaders: ASKING,
    });
    const { response: first } = await asked.messages
      .create({ model: "claude-haiku-4-5", max_tokens: 64, messages: [{ role: "user", content: "asked" }] })
      .withResponse();
    const inAnswer = await verifiedByNode(first.headers.get("x-gateway-receipt")!);
    const fetched = (await (await fetchReceipt(first.headers.get("request-id")!)).json()) as {
      signature: string;
    };
    // The same call's receipt, signed again from the ledger (its settlement may have moved on).
    expect(await verifiedByNode(fetched.signature)).toMatchObject({
      requestId: inAnswer!.requestId,
      charge: inAnswer!.charge,
      usage: inAnswer!.usage,
    });

    const plain = new Anthropic({ apiKey: t.secret, baseURL: t.baseUrl, maxRetries: 0 });
    const { response } = await plain.messages
      .create({
        model: "claude-haiku-4-5",
        max_tokens: 64,
        messages: [{ role: "user", content: "not asked" }],
      })
      .withResponse();
    expect(response.headers.get("x-gateway-receipt")).toBeNull();
    const requestId = response.headers.get("request-id")!;
    const later = await fetchReceipt(requestId);
    expect(later.status).toBe(200);
    const payload = await verifiedByNode(((await later.json()) as { signature: string }).signature);
    const row = (await t.usage()).find((r) => r.requestId === requestId)!;
    expect(payload).toMatchObject({ requestId, status: "settled", charge: { amount: `${row.amount}` } });
    const images = new OpenAI({ apiKey: t.secret, baseURL: `${t.baseUrl}/v1`, maxRetries: 0 });
    const { response: image } = await images.images
      .generate({ model: "image-pro", prompt: "no receipt", size: "1K" as "1024x1024" })
      .withResponse();
    expect(image.headers.get("x-gateway-receipt")).toBeNull();
    expect((await fetchReceipt(image.headers.get("x-request-id")!)).status).toBe(200);

    const before = (await t.usage()).length;
    for (const path of ["/v1/messages", "/v1/images/generations"]) {
      const refused = await fetch(`${t.baseUrl}${path}`, {
        method: "POST",
        headers: { "x-api-key": t.secret, "content-type": "application/json", "x-gateway-receipt": "please" },
        body: JSON.stringify(
          path === "/v1/messages"
            ? { model: "claude-haiku-4-5", max_tokens: 8, messages: [{ role: "user", content: "bad" }] }
            : { model: "image-pro", prompt: "bad", size: "1K" },
        ),
      });
      expect(refused.status).toBe(400);
      expect(JSON.stringify(await refused.json())).toMatch(
        /x-gateway-receipt: expected true or false.*please/,
      );
    }
    expect((await t.usage()).length).toBe(before);
  });

  it("a tampered receipt fails verification, whatever part was changed", async () => {
    const client = new Anthropic({
      apiKey: t.secret,
      baseURL: t.baseUrl,
      maxRetries: 0,
      defaultHeaders: ASKING,
    });
    const { response } = await client.messages
      .create({ model: "claude-haiku-4-5", max_tokens: 64, messages: [{ role: "user", content: "tamper" }] })
      .withResponse();
    const jws = response.headers.get("x-gateway-receipt")!;
    const [header, payload, signature] = jws.split(".") as [string, string, string];
    const claims = JSON.parse(Buffer.from(payload, "base64url").toString()) as { charge: { amount: string } };
    claims.charge.amount = "1";
    const lowered = `${header}.${Buffer.from(JSON.stringify(claims)).toString("base64url")}.${signature}`;
    expect(await verifiedByNode(lowered)).toBeUndefined();
    await expect(verifiedByJose(lowered)).rejects.toThrow(/signature verification failed/);
    const flipped = signature.startsWith("A") ? `B${signature.slice(1)}` : `A${signature.slice(1)}`;
    expect(await verifiedByNode(`${header}.${payload}.${flipped}`)).toBeUndefined();
  });

  it("answers only the payer: another account's key, an unknown id or no key get a 4xx", async () => {
    const client = new Anthropic({ apiKey: t.secret, baseURL: t.baseUrl, maxRetries: 0 });
    const { response } = await client.messages
      .create({ model: "claude-haiku-4-5", max_tokens: 64, messages: [{ role: "user", content: "mine" }] })
      .withResponse();
    const requestId = response.headers.get("request-id")!;
    const other = await accountWithKey(t.gateway.operator, "other");
    const foreign = await fetchReceipt(requestId, other.secret);
    expect(foreign.status).toBe(404);
    expect(await foreign.json()).toMatchObject({ type: "error", error: { type: "not_found_error" } });
    expect((await fetchReceipt("req_unknown")).status).toBe(404);
    const anonymous = await fetch(`${t.baseUrl}/v1/receipts/${requestId}`);
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get("x-request-id")).toMatch(/^req_/);
    // A call without a key was paid with x402: the answer says where its payer reads its receipt.
    expect(((await anonymous.json()) as { error: { message: string } }).error.message).toMatch(
      /No API key.*GET \/x402\/v1\/receipts\/\{request_id\}/,
    );
  });

  it("publishes its key as a JWK set and as the did:web document a receipt's kid resolves through", async () => {
    const { keys } = await keySet();
    expect(keys).toEqual([
      {
        kty: "OKP",
        crv: "Ed25519",
        x: expect.any(String),
        kid: expect.any(String),
        alg: "EdDSA",
        use: "sig",
      },
    ]);
    const did = (await (await fetch(`${t.baseUrl}/.well-known/did.json`)).json()) as {
      id: string;
      verificationMethod: { id: string; publicKeyJwk: { x: string } }[];
      assertionMethod: string[];
    };
    const host = encodeURIComponent(new URL(t.baseUrl).host);
    expect(did.id).toBe(`did:web:${host}`);
    expect(did.verificationMethod[0]).toMatchObject({
      id: `did:web:${host}#${keys[0]!.kid}`,
      publicKeyJwk: { x: keys[0]!.x },
    });
    expect(did.assertionMethod).toEqual([`did:web:${host}#${keys[0]!.kid}`]);
    // A receipt's kid is that verification method.
    const client = new Anthropic({
      apiKey: t.secret,
      baseURL: t.baseUrl,
      maxRetries: 0,
      defaultHeaders: ASKING,
    });
    const { response } = await client.messages
      .create({ model: "claude-haiku-4-5", max_tokens: 8, messages: [{ role: "user", content: "kid" }] })
      .withResponse();
    const header = JSON.parse(
      Buffer.from(response.headers.get("x-gateway-receipt")!.split(".")[0]!, "base64url").toString(),
    ) as { kid: string };
    expect(header.kid).toBe(did.assertionMethod[0]);
  });
});
