import { createServer } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { readBody } from "../../src/core/inference/read-body.js";
import { type UpstreamCall, UpstreamFailure } from "../../src/core/ports/providers.js";
import { devTokenCount } from "../../src/dev/provider/dev-tokens.js";
import {
  DEV_TEXT_LABEL,
  type DevUpstream,
  type ScriptedReply,
  startDevUpstream,
} from "../../src/dev/provider/dev-upstream.js";
import { AnthropicUpstream, type AnthropicUpstreamOptions } from "../../src/upstream/anthropic/client.js";
import { encodeSseFrame, type SseFrame, sseFrames } from "../../src/upstream/sse.js";

const KEY = "sk-upstream-test";
const REQUEST = {
  model: "model-haiku-4-5",
  max_tokens: 50,
  messages: [{ role: "user", content: "Count to three" }],
};

function call(overrides: Partial<UpstreamCall> = {}): UpstreamCall {
  return {
    path: "/v1/messages",
    body: JSON.stringify(REQUEST),
    anthropicVersion: "2023-06-01",
    anthropicBeta: "",
    ...overrides,
  };
}

/** The UpstreamFailure `promise` rejects with (fails the test otherwise). */
async function failureOf(promise: Promise<unknown>): Promise<UpstreamFailure> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(UpstreamFailure);
  return error as UpstreamFailure;
}

/** A port nothing listens on: bound, then released. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe("AnthropicUpstream", () => {
  let upstream: DevUpstream | undefined;
  let client: AnthropicUpstream | undefined;

  afterEach(async () => {
    await client?.destroy();
    await upstream?.close();
    client = undefined;
    upstream = undefined;
  });

  async function start(
    script?: (request: unknown) => ScriptedReply | undefined,
    options: Partial<AnthropicUpstreamOptions> = {},
  ): Promise<{ upstream: DevUpstream; client: AnthropicUpstream }> {
    upstream = await startDevUpstream({ apiKey: KEY, ...(script ? { script } : {}) });
    client = new AnthropicUpstream({
      baseUrl: upstream.url,
      apiKey: KEY,
      connectTimeoutMs: 500,
      headersTimeoutMs: 500,
      idleTimeoutMs: 500,
      ...options,
    });
    return { upstream, client };
  }

  it("sends its own key and the version and beta headers verbatim", async () => {
    const { upstream, client } = await start();
    const beta = "interleaved-thinking-2025-05-14,  context-1m-2025-08-07";
    const response = await client.send(call({ anthropicBeta: beta }));
    expect(response.status).toBe(200);
    expect(response.headers["request-id"]).toMatch(/^req_dev_/);
    const message = JSON.parse(await readBody(response.body, 1 << 20)) as {
      content: { text: string }[];
      usage: { output_tokens: number };
    };
    expect(message.content[0]!.text).toBe(`${DEV_TEXT_LABEL} You said: Count to three`);
    expect(message.usage.output_tokens).toBe(devTokenCount(message.content[0]!.text));

    const [sent] = upstream.requests;
    expect(sent!.path).toBe("/v1/messages");
    expect(sent!.rawBody).toBe(JSON.stringify(REQUEST));
    expect(sent!.headers["x-api-key"]).toBe(KEY);
    expect(sent!.headers["anthropic-version"]).toBe("2023-06-01");
    expect(sent!.headers["anthropic-beta"]).toBe(beta);
    expect(sent!.headers["content-type"]).toBe("application/json");
    expect(sent!.headers.authorization).toBeUndefined();
    expect(sent!.headers.cookie).toBeUndefined();
  });

  it("omits anthropic-beta when empty, takes bytes, and reuses its connection", async () => {
    const { upstream, client } = await start();
    for (let i = 0; i < 3; i++) {
      const response = await client.send(
        call({ path: "/v1/messages/count_tokens", body: new TextEncoder().encode(JSON.stringify(REQUEST)) }),
      );
      expect(JSON.parse(await readBody(response.body, 1024))).toEqual({ input_tokens: 3 + 3 });
    }
    expect(upstream.requests.every((r) => r.headers["anthropic-beta"] === undefined)).toBe(true);
    expect(upstream.requests.map((r) => r.path)).toEqual(Array(3).fill("/v1/messages/count_tokens"));
  });

  it("passes HTTP errors through as responses", async () => {
    const { client } = await start(undefined, { apiKey: "wrong" });
    const response = await client.send(call());
    expect(response.status).toBe(401);
    expect(JSON.parse(await readBody(response.body, 1024))).toMatchObject({
      type: "error",
      error: { type: "authentication_error" },
    });
  });

  it("fails 'unreachable' on a closed port", async () => {
    client = new AnthropicUpstream({
      baseUrl: `http://127.0.0.1:${await closedPort()}`,
      apiKey: KEY,
      connectTimeoutMs: 300,
      headersTimeoutMs: 300,
      idleTimeoutMs: 300,
    });
    const failure = await failureOf(client.send(call()));
    expect(failure.kind).toBe("unreachable");
    expect(failure.message).not.toContain(KEY);
  });

  it("fails 'unreachable' when the upstream drops the connection before answering", async () => {
    const { client } = await start(() => ({ kind: "destroy" }));
    expect((await failureOf(client.send(call()))).kind).toBe("unreachable");
  });

  it("fails 'timeout' when the headers do not come in time", async () => {
    const { client } = await start(() => ({ kind: "hang" }), { headersTimeoutMs: 150 });
    const started = Date.now();
    const failure = await failureOf(client.send(call()));
    expect(failure.kind).toBe("timeout");
    expect(Date.now() - started).toBeLessThan(1_000);
  });

  it("fails 'aborted' when the signal fires before the headers", async () => {
    const { client } = await start(() => ({ kind: "hang" }));
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 50);
    expect((await failureOf(client.send(call({ signal: controller.signal })))).kind).toBe("aborted");
  });

  it("fails 'aborted' while reading when the signal fires mid-body", async () => {
    const { upstream, client } = await start(() => ({
      kind: "stream",
      events: [
        { event: "ping", data: { type: "ping" } },
        { event: "ping", data: { type: "ping" }, delayMs: 300 },
      ],
    }));
    const controller = new AbortController();
    const response = await client.send(call({ signal: controller.signal }));
    const reading = (async () => {
      for await (const _chunk of response.body) controller.abort();
    })();
    expect((await failureOf(reading)).kind).toBe("aborted");
    // The upstream sees the client go away.
    for (let i = 0; i < 40 && upstream.abortedStreams === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(upstream.abortedStreams).toBe(1);
  });

  it("fails 'broken' when the stream is cut mid-way", async () => {
    const { client } = await start(() => ({
      kind: "stream",
      events: [{ event: "message_start", data: { type: "message_start" } }, { destroy: true }],
    }));
    const response = await client.send(call());
    expect(response.status).toBe(200);
    const chunks: Uint8Array[] = [];
    const reading = (async () => {
      for await (const chunk of response.body) chunks.push(chunk);
    })();
    const failure = await failureOf(reading);
    expect(failure.kind).toBe("broken");
    expect(Buffer.concat(chunks).toString()).toContain("event: message_start");
  });

  it("fails 'timeout' when the body goes silent past the idle timeout", async () => {
    const { client } = await start(
      () => ({
        kind: "stream",
        events: [
          { event: "ping", data: { type: "ping" } },
          { event: "ping", data: { type: "ping" }, delayMs: 400 },
        ],
      }),
      { idleTimeoutMs: 120 },
    );
    const response = await client.send(call());
    expect((await failureOf(readBody(response.body, 1 << 20))).kind).toBe("timeout");
  });

  it("readBody fails 'broken' past its limit and reads up to it", async () => {
    const big = { text: "x".repeat(5_000) };
    const { client } = await start(() => ({ kind: "json", status: 200, body: big }));
    const size = JSON.stringify(big).length;
    const over = await client.send(call());
    expect((await failureOf(readBody(over.body, size - 1))).kind).toBe("broken");
    const exact = await client.send(call());
    expect(await readBody(exact.body, size)).toBe(JSON.stringify(big));
  });

  it("frames a real streamed response with sseFrames", async () => {
    const { client } = await start();
    const response = await client.send(call({ body: JSON.stringify({ ...REQUEST, stream: true }) }));
    expect(response.headers["content-type"]).toMatch(/^text\/event-stream/);
    const frames: SseFrame[] = [];
    for await (const frame of sseFrames(response.body)) frames.push(frame);
    const events = frames.flatMap((f) => (f.kind === "event" ? [f] : []));
    expect(events[0]!.event).toBe("message_start");
    expect(events.at(-1)!.event).toBe("message_stop");
    for (const event of events) expect((JSON.parse(event.data) as { type: string }).type).toBe(event.event);
    const text = events
      .map((e) => JSON.parse(e.data) as { delta?: { type: string; text?: string } })
      .filter((d) => d.delta?.type === "text_delta")
      .map((d) => d.delta!.text)
      .join("");
    expect(text).toBe(`${DEV_TEXT_LABEL} You said: Count to three`);
  });

  it("re-encodes a streamed response byte for byte", async () => {
    const { client } = await start(() => ({
      kind: "stream",
      events: [
        { event: "message_start", data: { type: "message_start", message: { id: "msg_1", content: [] } } },
        { comment: "keep-alive" },
        { event: "content_block_delta", data: '{"type":"content_block_delta","delta":{"text":"héllo ✓"}}' },
        { event: "message_stop", data: { type: "message_stop" } },
      ],
    }));
    const raw = await readBody((await client.send(call())).body, 1 << 20);
    const frames: SseFrame[] = [];
    for await (const frame of sseFrames((await client.send(call())).body)) frames.push(frame);
    expect(frames.map(encodeSseFrame).join("")).toBe(raw);
    expect(frames[1]).toEqual({ kind: "comment", text: "keep-alive" });
  });

  it("stops the stream when the consumer stops early", async () => {
    const { upstream, client } = await start(() => ({
      kind: "stream",
      events: [
        { event: "ping", data: { type: "ping" } },
        { event: "ping", data: { type: "ping" }, delayMs: 200 },
      ],
    }));
    const response = await client.send(call());
    for await (const frame of sseFrames(response.body)) {
      expect(frame).toEqual({ kind: "event", event: "ping", data: '{"type":"ping"}' });
      break;
    }
    for (let i = 0; i < 40 && upstream.abortedStreams === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(upstream.abortedStreams).toBe(1);
  });
});
