/**
 * VertexUpstream against the Vertex stand-in (src/dev/provider/vertex-standin.ts) over a real
 * socket: the rawPredict rewrite, OAuth tokens that google-auth-library really fetches from the
 * stand-in's token endpoint (the JWT assertion verified with the service account's public key),
 * cached, shared by concurrent calls and refreshed before expiry, answers compared with what the
 * dev provider sends for the same prompt, and Google's errors in Anthropic's terms.
 */
import { generateKeyPairSync } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { readBody } from "../../src/core/inference/read-body.js";
import { type UpstreamCall, UpstreamFailure } from "../../src/core/ports/providers.js";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import {
  startVertexStandin,
  type VertexFault,
  type VertexStandin,
} from "../../src/dev/provider/vertex-standin.js";
import { REFRESH_EARLY_MS } from "../../src/upstream/vertex/access-token.js";
import { VertexUpstream, type VertexUpstreamOptions } from "../../src/upstream/vertex/client.js";
import { vertexBaseUrl } from "../../src/upstream/vertex/request.js";

const PROJECT = "tollgate-test-project";
const REGION = "us-east5";
const EMAIL = "tollgate@tollgate-test-project.iam.gserviceaccount.com";
const MODEL_ID = "claude-sonnet-4-5@20250929";
const REQUEST = {
  model: "claude-sonnet-4-5",
  max_tokens: 60,
  messages: [{ role: "user", content: "Count to three" }],
};

function rsaKey() {
  return generateKeyPairSync("rsa", {
    modulusLength: 2048,
    publicKeyEncoding: { type: "spki", format: "pem" },
    privateKeyEncoding: { type: "pkcs8", format: "pem" },
  });
}

function call(body: Record<string, unknown> = REQUEST, overrides: Partial<UpstreamCall> = {}): UpstreamCall {
  return {
    path: "/v1/messages",
    body: JSON.stringify(body),
    anthropicVersion: "2023-06-01",
    anthropicBeta: "",
    ...overrides,
  };
}

/** Ids differ per call; everything else must be the same bytes. */
function withoutIds(text: string): string {
  return text.replace(/"(msg|toolu|srvtoolu|req)_[A-Za-z0-9_]+"/g, '"$1_X"');
}

describe("VertexUpstream", () => {
  const key = rsaKey();
  let standin: VertexStandin;
  let dev: DevUpstream;
  let fault: VertexFault | undefined;
  const clients: VertexUpstream[] = [];

  beforeAll(async () => {
    standin = await startVertexStandin({
      projectId: PROJECT,
      region: REGION,
      accounts: { [EMAIL]: key.publicKey },
      fault: () => fault,
    });
    dev = await startDevUpstream();
  });
  afterAll(async () => {
    await standin.close();
    await dev.close();
  });
  afterEach(async () => {
    fault = undefined;
    await Promise.all(clients.splice(0).map((c) => c.destroy()));
  });

  function serviceAccountKey(privateKey = key.privateKey, tokenUri = standin.tokenUri) {
    return {
      type: "service_account",
      project_id: PROJECT,
      private_key_id: "test-key-1",
      private_key: privateKey,
      client_email: EMAIL,
      token_uri: tokenUri,
    };
  }

  function client(overrides: Partial<VertexUpstreamOptions> = {}): VertexUpstream {
    const made = new VertexUpstream({
      name: "vertex-test",
      models: new Map([[REQUEST.model, MODEL_ID]]),
      connections: 8,
      connectTimeoutMs: 2_000,
      headersTimeoutMs: 5_000,
      idleTimeoutMs: 5_000,
      responseTimeoutMs: 10_000,
      region: REGION,
      projectId: PROJECT,
      baseUrl: standin.url,
      serviceAccountKey: serviceAccountKey(),
      ...overrides,
    });
    clients.push(made);
    return made;
  }

  /** What the dev provider itself answers for the same call (the model named by its Vertex id). */
  async function devAnswer(body: Record<string, unknown>, path = "/v1/messages"): Promise<string> {
    const response = await fetch(`${dev.url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", "anthropic-version": "2023-06-01" },
      body: JSON.stringify({ ...body, model: MODEL_ID }),
    });
    return response.text();
  }

  it("takes the model from the call as the core sends it, and names it in the answer as the call sent it", async () => {
    // Through the gateway the body names the catalog's upstream id; `model.id` is the gateway model.
    const endpoint = client({ models: new Map([["model-sonnet-4-5", MODEL_ID]]) });
    const model = { id: "model-sonnet-4-5", sent: "claude-sonnet-4-5-20250929" };
    const body = { ...REQUEST, model: model.sent };
    const plain = await endpoint.send(call(body, { model }));
    expect(plain.status).toBe(200);
    expect(standin.requests.at(-1)!.model).toBe(MODEL_ID);
    const text = await readBody(plain.body, 1 << 20);
    const renamed = (await devAnswer(REQUEST)).replace(`"model":"${MODEL_ID}"`, `"model":"${model.sent}"`);
    expect(withoutIds(text)).toBe(withoutIds(renamed));
    const streamed = await endpoint.send(call({ ...body, stream: true }, { model }));
    const sse = await readBody(streamed.body, 1 << 20);
    expect(withoutIds(sse)).toBe(
      withoutIds(
        (await devAnswer({ ...REQUEST, stream: true })).replace(
          `"model":"${MODEL_ID}"`,
          `"model":"${model.sent}"`,
        ),
      ),
    );
    expect(sse).not.toContain(MODEL_ID);
  });

  it("rewrites for rawPredict: version in the body, model in the path, betas as the header", async () => {
    const endpoint = client();
    const response = await endpoint.send(call(REQUEST, { anthropicBeta: "context-1m-2025-08-07" }));
    expect(response.status).toBe(200);
    const text = await readBody(response.body, 1 << 20);
    const seen = standin.requests.at(-1)!;
    expect(seen.path).toBe(
      `/v1/projects/${PROJECT}/locations/${REGION}/publishers/anthropic/models/${MODEL_ID}:rawPredict`,
    );
    expect(seen.body).toEqual({
      anthropic_version: "vertex-2023-10-16",
      max_tokens: 60,
      messages: REQUEST.messages,
    });
    expect(seen.headers["anthropic-beta"]).toBe("context-1m-2025-08-07");
    expect(seen.headers.authorization).toBe(`Bearer ${standin.issued.at(-1)!.token}`);
    expect(withoutIds(text)).toBe(withoutIds(await devAnswer(REQUEST)));
  });

  it("streams through :streamRawPredict, the Messages SSE stream byte for byte", async () => {
    const body = { ...REQUEST, stream: true };
    const endpoint = client();
    const response = await endpoint.send(call(body));
    expect(response.status).toBe(200);
    const seen = standin.requests.at(-1)!;
    expect(seen.method).toBe("streamRawPredict");
    expect(seen.body.stream).toBe(true);
    let got = "";
    for await (const frame of endpoint.frames(response.body)) {
      if (frame.kind === "event") got += `event: ${frame.event}\ndata: ${frame.data}\n\n`;
    }
    expect(withoutIds(got)).toBe(withoutIds(await devAnswer(body)));
    expect(got).toContain("event: message_stop");
  });

  it("counts tokens through count-tokens:rawPredict with the model in the body", async () => {
    const response = await client().send(call(REQUEST, { path: "/v1/messages/count_tokens" }));
    expect(response.status).toBe(200);
    const text = await readBody(response.body, 1 << 20);
    const seen = standin.requests.at(-1)!;
    expect(seen.path).toBe(
      `/v1/projects/${PROJECT}/locations/${REGION}/publishers/anthropic/models/count-tokens:rawPredict`,
    );
    expect(seen.body).toMatchObject({ anthropic_version: "vertex-2023-10-16", model: MODEL_ID });
    expect(JSON.parse(text)).toEqual(JSON.parse(await devAnswer(REQUEST, "/v1/messages/count_tokens")));
  });

  it("fetches one token for many concurrent calls, and keeps using it", async () => {
    const before = standin.issued.length;
    const endpoint = client();
    const responses = await Promise.all(Array.from({ length: 8 }, () => endpoint.send(call())));
    await Promise.all(responses.map((r) => readBody(r.body, 1 << 20)));
    const again = await endpoint.send(call());
    await readBody(again.body, 1 << 20);
    expect(responses.map((r) => r.status)).toEqual(Array(8).fill(200));
    expect(standin.issued.length).toBe(before + 1);
    const token = standin.issued.at(-1)!.token;
    expect(standin.requests.slice(-9).map((r) => r.token)).toEqual(Array(9).fill(token));
  });

  it("refreshes the token before it expires, one fetch shared by the calls that found it stale", async () => {
    // Tokens that live one second past the refresh margin: stale after a second, valid for minutes.
    const shortLived = await startVertexStandin({
      projectId: PROJECT,
      region: REGION,
      accounts: { [EMAIL]: key.publicKey },
      tokenLifetimeSeconds: REFRESH_EARLY_MS / 1000 + 1,
    });
    try {
      const endpoint = client({
        baseUrl: shortLived.url,
        serviceAccountKey: serviceAccountKey(key.privateKey, shortLived.tokenUri),
      });
      await readBody((await endpoint.send(call())).body, 1 << 20);
      expect(shortLived.issued).toHaveLength(1);
      const first = shortLived.issued[0]!;
      await new Promise((resolve) => setTimeout(resolve, 1_300));
      const responses = await Promise.all(Array.from({ length: 5 }, () => endpoint.send(call())));
      await Promise.all(responses.map((r) => readBody(r.body, 1 << 20)));
      expect(shortLived.issued).toHaveLength(2);
      const second = shortLived.issued[1]!;
      expect(first.expiresAt).toBeGreaterThan(Date.now() + 60_000);
      expect(second.token).not.toBe(first.token);
      expect(shortLived.requests.slice(1).map((r) => r.token)).toEqual(Array(5).fill(second.token));
    } finally {
      await shortLived.close();
    }
  });

  it("is refused (403 permission_error, nothing sent) when the key does not match the account", async () => {
    const before = standin.requests.length;
    const response = await client({ serviceAccountKey: serviceAccountKey(rsaKey().privateKey) }).send(call());
    expect(response.status).toBe(403);
    expect(JSON.parse(await readBody(response.body, 1 << 20))).toMatchObject({
      type: "error",
      error: { type: "permission_error" },
    });
    expect(standin.tokenRefusals.at(-1)).toBe("Invalid JWT Signature.");
    expect(standin.requests.length).toBe(before);
  });

  it.each([
    [
      { kind: "google", httpStatus: 429, status: "RESOURCE_EXHAUSTED", message: "Quota exceeded" },
      429,
      "rate_limit_error",
    ],
    [
      { kind: "google", httpStatus: 503, status: "UNAVAILABLE", message: "The service is unavailable" },
      529,
      "overloaded_error",
    ],
    [
      { kind: "google", httpStatus: 400, status: "INVALID_ARGUMENT", message: "Bad field" },
      400,
      "invalid_request_error",
    ],
    [
      { kind: "google", httpStatus: 403, status: "PERMISSION_DENIED", message: "No access" },
      403,
      "permission_error",
    ],
    [
      { kind: "anthropic", httpStatus: 529, type: "overloaded_error", message: "Overloaded" },
      529,
      "overloaded_error",
    ],
  ] as const)("answers %o as %i %s", async (given, status, type) => {
    fault = given;
    const response = await client().send(call());
    expect(response.status).toBe(status);
    const error = JSON.parse(await readBody(response.body, 1 << 20)) as {
      error: { type: string; message: string };
    };
    expect(error.error.type).toBe(type);
    expect(error.error.message).toContain(given.message);
  });

  it("passes an error event inside the stream through as the model sent it", async () => {
    fault = { kind: "stream-error", afterEvents: 1, type: "overloaded_error", message: "Overloaded" };
    const endpoint = client();
    const response = await endpoint.send(call({ ...REQUEST, stream: true }));
    expect(response.status).toBe(200);
    const frames = [];
    for await (const frame of endpoint.frames(response.body)) frames.push(frame);
    expect(frames.map((f) => f.kind === "event" && f.event)).toEqual(["message_start", "error"]);
  });

  it("fails the call (UpstreamFailure, nothing sent) when the token endpoint hangs or is not there", async () => {
    const silent = createServer(() => {});
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    const { port } = silent.address() as AddressInfo;
    const before = standin.requests.length;
    try {
      const hanging = client({
        connectTimeoutMs: 200,
        headersTimeoutMs: 300,
        serviceAccountKey: serviceAccountKey(key.privateKey, `http://127.0.0.1:${port}/token`),
      });
      const timedOut = await hanging.send(call()).catch((e: unknown) => e);
      expect(timedOut).toBeInstanceOf(UpstreamFailure);
      expect((timedOut as UpstreamFailure).kind).toBe("timeout");
    } finally {
      await new Promise<void>((resolve) => {
        silent.close(() => resolve());
        silent.closeAllConnections();
      });
    }
    const gone = client({
      serviceAccountKey: serviceAccountKey(key.privateKey, `http://127.0.0.1:${port}/token`),
    });
    const unreachable = await gone.send(call()).catch((e: unknown) => e);
    expect(unreachable).toBeInstanceOf(UpstreamFailure);
    expect((unreachable as UpstreamFailure).kind).toBe("unreachable");
    expect(standin.requests.length).toBe(before);
  });

  it("picks Google's host for a region", () => {
    expect(vertexBaseUrl("us-east5")).toBe("https://us-east5-aiplatform.googleapis.com");
    expect(vertexBaseUrl("global")).toBe("https://aiplatform.googleapis.com");
    expect(vertexBaseUrl("eu")).toBe("https://aiplatform.eu.rep.googleapis.com");
  });
});
