/**
 * BedrockUpstream against the Bedrock stand-in (src/dev/provider/bedrock-standin.ts) over a real
 * socket: the InvokeModel rewrite, SigV4 and bearer authentication really checked, eventstream
 * frames converted back to the Messages SSE stream the dev provider sends for the same prompt,
 * and Bedrock's errors in Anthropic's terms.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { EventStreamCodec } from "@smithy/core/event-streams";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { readBody } from "../../src/core/inference/read-body.js";
import { type UpstreamCall, UpstreamFailure } from "../../src/core/ports/providers.js";
import {
  type BedrockFault,
  type BedrockStandin,
  startBedrockStandin,
} from "../../src/dev/provider/bedrock-standin.js";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { BedrockUpstream, type BedrockUpstreamOptions } from "../../src/upstream/bedrock/client.js";
import { BedrockSigner } from "../../src/upstream/bedrock/sign.js";

const KEY_ID = "AKIDTOLLGATETEST";
const SECRET = "bedrock-test-secret-access-key";
const REGION = "us-east-1";
const MODEL_ID = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";
const REQUEST = {
  model: "claude-sonnet-4-5",
  max_tokens: 60,
  messages: [{ role: "user", content: "Count to three" }],
};

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

describe("BedrockUpstream", () => {
  let standin: BedrockStandin;
  let dev: DevUpstream;
  let faults: BedrockFault | undefined;
  const clients: BedrockUpstream[] = [];

  beforeAll(async () => {
    standin = await startBedrockStandin({
      region: REGION,
      accessKeyId: KEY_ID,
      secretAccessKey: SECRET,
      bearerToken: "ABSKbedrock-api-key",
      fault: () => faults,
    });
    dev = await startDevUpstream();
  });
  afterAll(async () => {
    await standin.close();
    await dev.close();
  });
  afterEach(async () => {
    faults = undefined;
    await Promise.all(clients.splice(0).map((c) => c.destroy()));
  });

  function client(overrides: Partial<BedrockUpstreamOptions> = {}): BedrockUpstream {
    const made = new BedrockUpstream({
      name: "bedrock-test",
      models: new Map([[REQUEST.model, MODEL_ID]]),
      connections: 4,
      connectTimeoutMs: 2_000,
      headersTimeoutMs: 5_000,
      idleTimeoutMs: 5_000,
      responseTimeoutMs: 10_000,
      region: REGION,
      baseUrl: standin.url,
      auth: { kind: "sigv4", accessKeyId: KEY_ID, secretAccessKey: SECRET },
      ...overrides,
    });
    clients.push(made);
    return made;
  }

  /** What the dev provider itself answers for the same call (the model named by its Bedrock id). */
  async function devAnswer(body: Record<string, unknown>): Promise<string> {
    const response = await fetch(`${dev.url}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", "anthropic-version": "2023-06-01" },
      body: JSON.stringify({ ...body, model: MODEL_ID }),
    });
    return response.text();
  }

  it("rewrites the body for InvokeModel: version, model in the encoded path, betas in the body", async () => {
    const response = await client().send(
      call(REQUEST, { anthropicBeta: "context-1m-2025-08-07, token-efficient-tools-2025-02-19" }),
    );
    expect(response.status).toBe(200);
    await readBody(response.body, 1 << 20);
    const seen = standin.requests.at(-1)!;
    expect(seen.path).toBe(`/model/${encodeURIComponent(MODEL_ID)}/invoke`);
    expect(seen.path).toContain("v1%3A0");
    expect(seen.body).toEqual({
      anthropic_version: "bedrock-2023-05-31",
      anthropic_beta: ["context-1m-2025-08-07", "token-efficient-tools-2025-02-19"],
      max_tokens: 60,
      messages: REQUEST.messages,
    });
    expect(seen.headers.authorization).toMatch(
      new RegExp(`^AWS4-HMAC-SHA256 Credential=${KEY_ID}/\\d{8}/${REGION}/bedrock/aws4_request`),
    );
  });

  it("answers a non-streaming call with the Messages JSON the dev provider writes", async () => {
    const response = await client().send(call());
    expect(response.status).toBe(200);
    expect(response.headers["request-id"]).toMatch(/^[0-9a-f-]{36}$/);
    const text = await readBody(response.body, 1 << 20);
    expect(withoutIds(text)).toBe(withoutIds(await devAnswer(REQUEST)));
    expect(JSON.parse(text)).toMatchObject({ type: "message", role: "assistant", model: MODEL_ID });
  });

  it("turns eventstream frames into the Messages SSE stream, byte for byte, event for event", async () => {
    const body = { ...REQUEST, stream: true };
    const endpoint = client();
    const response = await endpoint.send(call(body));
    expect(response.status).toBe(200);
    expect(response.headers["content-type"]).toBe("text/event-stream; charset=utf-8");
    const seen = standin.requests.at(-1)!;
    expect(seen.path).toBe(`/model/${encodeURIComponent(MODEL_ID)}/invoke-with-response-stream`);
    expect(seen.body).not.toHaveProperty("stream");
    const frames = [];
    for await (const frame of endpoint.frames(response.body)) frames.push(frame);
    const expected = withoutIds(await devAnswer(body));
    const got = frames
      .map((f) => (f.kind === "event" ? `event: ${f.event}\ndata: ${f.data}\n\n` : ""))
      .join("");
    expect(withoutIds(got)).toBe(expected);
    const names = frames.map((f) => f.kind === "event" && f.event);
    expect(names.at(0)).toBe("message_start");
    expect(names.slice(-3)).toEqual(["content_block_stop", "message_delta", "message_stop"]);
    expect(names).toContain("content_block_delta");
    expect(got).not.toContain("amazon-bedrock-invocationMetrics");
  });

  it("takes the model from the call as the core sends it, and names it in the answer as the call sent it", async () => {
    // Through the gateway the body names the catalog's upstream id; `model.id` is the gateway model.
    const endpoint = client({ models: new Map([["model-sonnet-4-5", MODEL_ID]]) });
    const model = { id: "model-sonnet-4-5", sent: "claude-sonnet-4-5-20250929" };
    const body = { ...REQUEST, model: model.sent };
    const plain = await endpoint.send(call(body, { model }));
    expect(plain.status).toBe(200);
    expect(plain.headers["content-length"]).toBeUndefined();
    expect(standin.requests.at(-1)!.path).toBe(`/model/${encodeURIComponent(MODEL_ID)}/invoke`);
    const text = await readBody(plain.body, 1 << 20);
    expect(JSON.parse(text)).toMatchObject({ type: "message", model: model.sent });
    // Nothing else changed: the dev provider's own answer with the Bedrock id renamed.
    const renamed = (await devAnswer(REQUEST)).replace(`"model":"${MODEL_ID}"`, `"model":"${model.sent}"`);
    expect(withoutIds(text)).toBe(withoutIds(renamed));
    const streamed = await endpoint.send(call({ ...body, stream: true }, { model }));
    const sse = await readBody(streamed.body, 1 << 20);
    expect(sse).toContain(`"model":"${model.sent}"`);
    expect(sse).not.toContain(MODEL_ID);
    // A model the endpoint does not serve is named by its gateway id.
    const other = await endpoint.send(
      call(body, { model: { id: "model-opus-4-8", sent: "claude-opus-4-8" } }),
    );
    expect(other.status).toBe(404);
    expect(await readBody(other.body, 1 << 20)).toContain('\\"model-opus-4-8\\" is not served');
  });

  it("signs with a session token too, and takes a Bedrock API key as a bearer token", async () => {
    const bearer = await client({ auth: { kind: "bearer", token: "ABSKbedrock-api-key" } }).send(call());
    expect(bearer.status).toBe(200);
    await readBody(bearer.body, 1 << 20);
    const wrong = await client({ auth: { kind: "bearer", token: "ABSKwrong" } }).send(call());
    expect(wrong.status).toBe(403);
    expect(JSON.parse(await readBody(wrong.body, 1 << 20))).toMatchObject({
      type: "error",
      error: { type: "permission_error" },
    });
  });

  it("is refused (403 permission_error, nothing served) with a wrong secret or a wrong region", async () => {
    const before = standin.requests.length;
    for (const overrides of [
      { auth: { kind: "sigv4", accessKeyId: KEY_ID, secretAccessKey: "not-the-secret" } },
      { region: "eu-west-1" },
    ] as const) {
      const response = await client(overrides).send(call());
      expect(response.status).toBe(403);
      const error = JSON.parse(await readBody(response.body, 1 << 20)) as {
        error: { type: string; message: string };
      };
      expect(error.error.type).toBe("permission_error");
      expect(error.error.message).toMatch(/^InvalidSignatureException: /);
    }
    expect(standin.requests.length).toBe(before);
    expect(standin.refusals.slice(-2)).toEqual([
      expect.stringMatching(/signature we calculated does not match/),
      expect.stringMatching(/scoped to a valid region/),
    ]);
  });

  it("refuses a signed request whose body was changed after signing", async () => {
    const path = `/model/${encodeURIComponent(MODEL_ID)}/invoke`;
    const url = new URL(path, standin.url);
    const signed = JSON.stringify({
      anthropic_version: "bedrock-2023-05-31",
      max_tokens: 5,
      messages: REQUEST.messages,
    });
    const headers = await new BedrockSigner(
      { kind: "sigv4", accessKeyId: KEY_ID, secretAccessKey: SECRET },
      REGION,
    ).headers(url, { "content-type": "application/json" }, signed);
    const send = (body: string) => fetch(url, { method: "POST", headers, body });
    const honest = await send(signed);
    expect(honest.status).toBe(200);
    await honest.text();
    const tampered = await send(signed.replace('"max_tokens":5', '"max_tokens":9000'));
    expect(tampered.status).toBe(403);
    expect(tampered.headers.get("x-amzn-errortype")).toMatch(/^InvalidSignatureException:/);
  });

  it.each([
    ["ThrottlingException", 429, 429, "rate_limit_error"],
    ["ServiceUnavailableException", 503, 529, "overloaded_error"],
    ["ModelNotReadyException", 429, 529, "overloaded_error"],
    ["ValidationException", 400, 400, "invalid_request_error"],
    ["AccessDeniedException", 403, 403, "permission_error"],
    ["InternalServerException", 500, 500, "api_error"],
    ["ModelTimeoutException", 408, 504, "timeout_error"],
  ] as const)("answers Bedrock's %s (%i) as %i %s", async (errorType, status, mapped, type) => {
    faults = { kind: "http", status, errorType, message: `${errorType} from the stand-in` };
    const response = await client().send(call({ ...REQUEST, stream: true }));
    expect(response.status).toBe(mapped);
    expect(JSON.parse(await readBody(response.body, 1 << 20))).toEqual({
      type: "error",
      error: { type, message: `${errorType}: ${errorType} from the stand-in` },
    });
  });

  it.each([
    ["throttlingException", 0, "rate_limit_error"],
    ["serviceUnavailableException", 0, "overloaded_error"],
    ["modelStreamErrorException", 3, "api_error"],
    ["internalServerException", 2, "api_error"],
    ["validationException", 1, "invalid_request_error"],
  ] as const)(
    "turns a %s frame after %i events into an SSE error event (%s)",
    async (exceptionType, afterEvents, type) => {
      faults = { kind: "stream-exception", afterEvents, exceptionType, message: "the stand-in's exception" };
      const endpoint = client();
      const response = await endpoint.send(call({ ...REQUEST, stream: true }));
      expect(response.status).toBe(200);
      const frames = [];
      for await (const frame of endpoint.frames(response.body)) frames.push(frame);
      expect(frames).toHaveLength(afterEvents + 1);
      expect(frames.at(-1)).toEqual({
        kind: "event",
        event: "error",
        data: JSON.stringify({
          type: "error",
          error: { type, message: `${exceptionType}: the stand-in's exception` },
        }),
      });
    },
  );

  it("counts tokens through CountTokens with the foundation model and the InvokeModel body", async () => {
    // A count body has no max_tokens; InvokeModel's body needs one, so the client adds 1.
    const { max_tokens: _max, ...count } = REQUEST;
    const response = await client().send(
      call(count, { path: "/v1/messages/count_tokens", anthropicBeta: "context-1m-2025-08-07" }),
    );
    expect(response.status).toBe(200);
    const counted = JSON.parse(await readBody(response.body, 1 << 20)) as { input_tokens: number };
    const seen = standin.requests.at(-1)!;
    expect(seen.path).toBe(
      `/model/${encodeURIComponent("anthropic.claude-sonnet-4-5-20250929-v1:0")}/count-tokens`,
    );
    expect(seen.body).toEqual({
      anthropic_version: "bedrock-2023-05-31",
      max_tokens: 1,
      anthropic_beta: ["context-1m-2025-08-07"],
      messages: REQUEST.messages,
    });
    const direct = await fetch(`${dev.url}/v1/messages/count_tokens`, {
      method: "POST",
      headers: { "content-type": "application/json", "anthropic-version": "2023-06-01" },
      body: JSON.stringify({ model: MODEL_ID, messages: REQUEST.messages }),
    });
    expect(counted).toEqual(await direct.json());
    expect(counted.input_tokens).toBeGreaterThan(0);
  });

  it.each([
    ["a frame whose CRC does not match", "malformed", (frame: Uint8Array) => flipLastByte(frame)],
    ["a stream cut inside a frame", "broken", (frame: Uint8Array) => frame.subarray(0, frame.byteLength - 5)],
  ] as const)("fails with UpstreamFailure on %s, after the frames before it", async (_what, kind, spoil) => {
    const codec = new EventStreamCodec(
      (bytes) => new TextDecoder().decode(bytes),
      (text) => new TextEncoder().encode(text),
    );
    const chunk = (event: object) =>
      codec.encode({
        headers: {
          ":event-type": { type: "string", value: "chunk" },
          ":message-type": { type: "string", value: "event" },
        },
        body: new TextEncoder().encode(
          JSON.stringify({ bytes: Buffer.from(JSON.stringify(event)).toString("base64") }),
        ),
      });
    const good = chunk({ type: "ping" });
    const server = createServer((_req, res) => {
      res.writeHead(200, { "content-type": "application/vnd.amazon.eventstream" });
      res.end(Buffer.concat([good, spoil(chunk({ type: "ping" }))]));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const { port } = server.address() as AddressInfo;
      const endpoint = client({ baseUrl: `http://127.0.0.1:${port}` });
      const response = await endpoint.send(call({ ...REQUEST, stream: true }));
      const frames: unknown[] = [];
      const error = await (async () => {
        for await (const frame of endpoint.frames(response.body)) frames.push(frame);
      })().catch((e: unknown) => e);
      expect(frames).toEqual([{ kind: "event", event: "ping", data: '{"type":"ping"}' }]);
      expect(error).toBeInstanceOf(UpstreamFailure);
      expect((error as UpstreamFailure).kind).toBe(kind);
    } finally {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    }
  });
});

function flipLastByte(frame: Uint8Array): Uint8Array {
  const copy = Uint8Array.from(frame);
  copy[copy.length - 1]! ^= 0xff;
  return copy;
}
