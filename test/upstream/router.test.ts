/**
 * The text router over real Anthropic endpoints (the dev provider on real sockets, scripted to
 * fail): failover before the first content and never after, the caller's faults unretried,
 * retry-after as a cooldown, the breaker and its probe, one deadline per call, capabilities.
 */
import { createServer } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { readBody } from "../../src/core/inference/read-body.js";
import { type UpstreamCall, UpstreamFailure } from "../../src/core/ports/providers.js";
import {
  type DevUpstream,
  type ScriptedReply,
  startDevUpstream,
} from "../../src/dev/provider/dev-upstream.js";
import { AnthropicUpstream } from "../../src/upstream/anthropic/client.js";
import type { EndpointCapabilities, TextEndpoint } from "../../src/upstream/endpoint.js";
import type { RouteEntry } from "../../src/upstream/router/route-order.js";
import type { RouterEvents } from "../../src/upstream/router/router-events.js";
import { ANY_MODEL, TextRouter, type TextRouterOptions } from "../../src/upstream/router/text-router.js";
import type { SseFrame } from "../../src/upstream/sse.js";

const MODEL = { id: "model-haiku-4-5", sent: "claude-haiku-4-5" };
const REQUEST = {
  model: MODEL.sent,
  max_tokens: 50,
  stream: true,
  messages: [{ role: "user", content: "Hi" }],
};

function call(overrides: Partial<UpstreamCall> = {}): UpstreamCall {
  return {
    path: "/v1/messages",
    body: JSON.stringify(REQUEST),
    anthropicVersion: "2023-06-01",
    anthropicBeta: "",
    model: MODEL,
    ...overrides,
  };
}

const OVERLOADED = { type: "error", error: { type: "overloaded_error", message: "Overloaded" } };
const MESSAGE_START = {
  type: "message_start",
  message: {
    id: "msg_1",
    type: "message",
    role: "assistant",
    model: MODEL.sent,
    content: [],
    stop_reason: null,
    stop_sequence: null,
    usage: { input_tokens: 5, output_tokens: 1 },
  },
};

/** A stream that starts, then fails with `error` before (or after) its first content block. */
function failingStream(afterContent: boolean): ScriptedReply {
  const content = afterContent
    ? [
        {
          event: "content_block_start",
          data: { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
        },
        {
          event: "content_block_delta",
          data: { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Hel" } },
        },
      ]
    : [];
  return {
    kind: "stream",
    events: [
      { event: "message_start", data: MESSAGE_START },
      { event: "ping", data: { type: "ping" } },
      ...content,
      { event: "error", data: OVERLOADED },
    ],
  };
}

const started: DevUpstream[] = [];
const routers: TextRouter[] = [];

afterEach(async () => {
  await Promise.all(routers.splice(0).map((router) => router.close()));
  await Promise.all(started.splice(0).map((upstream) => upstream.close()));
});

/** A dev provider answering with `script` (undefined: its normal answer). */
async function provider(script?: (n: number) => ScriptedReply | undefined): Promise<DevUpstream> {
  let n = 0;
  const upstream = await startDevUpstream(script ? { script: () => script(n++) } : {});
  started.push(upstream);
  return upstream;
}

function endpoint(
  name: string,
  url: string,
  capabilities?: EndpointCapabilities,
  models = new Map<string, string>(),
): TextEndpoint {
  const client = new AnthropicUpstream({
    name,
    baseUrl: url,
    apiKey: "k",
    models,
    connectTimeoutMs: 500,
    headersTimeoutMs: 2_000,
    idleTimeoutMs: 2_000,
  });
  if (capabilities === undefined) return client;
  // The same client, as a platform that supports less (a Bedrock or Vertex endpoint would).
  return {
    name: client.name,
    kind: client.kind,
    models: client.models,
    capabilities,
    send: (upstreamCall) => client.send(upstreamCall),
    frames: (body) => client.frames(body),
    close: () => client.close(),
  };
}

interface Recorded {
  readonly events: string[];
}

function router(endpoints: TextEndpoint[], options: Partial<TextRouterOptions> = {}): TextRouter & Recorded {
  const events: string[] = [];
  const record: RouterEvents = {
    attempted: (name) => events.push(`attempt ${name}`),
    failed: (name, _model, reason) => events.push(`fail ${name} ${reason}`),
    failedOver: (name) => events.push(`failover ${name}`),
  };
  const routes = new Map<string, RouteEntry[]>([
    [MODEL.id, endpoints.map((e, i) => ({ endpoint: e.name, priority: i, weight: 1 }))],
  ]);
  const built = new TextRouter({
    endpoints,
    routes,
    deadlineMs: 5_000,
    breaker: { failures: 3, windowMs: 10_000, cooldownMs: 60_000 },
    maxRetryAfterMs: 60_000,
    events: record,
    ...options,
  });
  routers.push(built);
  return Object.assign(built, { events });
}

async function frames(r: TextRouter, body: Parameters<TextRouter["frames"]>[0]): Promise<SseFrame[]> {
  const all: SseFrame[] = [];
  for await (const frame of r.frames(body)) all.push(frame);
  return all;
}

const eventNames = (list: SseFrame[]) => list.map((f) => (f.kind === "event" ? f.event : `:${f.text}`));

async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe("TextRouter: failover before the first content", () => {
  it("answers from the second endpoint when the first says 529, naming it", async () => {
    const a = await provider(() => ({ kind: "json", status: 529, body: OVERLOADED }));
    const b = await provider();
    const r = router([endpoint("a", a.url), endpoint("b", b.url)]);
    const response = await r.send(call());
    expect(response.status).toBe(200);
    expect(response.endpoint).toBe("b");
    const all = await frames(r, response.body);
    expect(eventNames(all).at(0)).toBe("message_start");
    expect(eventNames(all).at(-1)).toBe("message_stop");
    expect(a.messageRequests()).toHaveLength(1);
    expect(b.messageRequests()).toHaveLength(1);
    expect(r.events).toEqual(["attempt a", "fail a 529", "failover a", "attempt b"]);
  });

  it.each([429, 500, 502, 503, 504])("fails over on %i", async (status) => {
    const a = await provider(() => ({ kind: "json", status, body: OVERLOADED }));
    const b = await provider();
    const r = router([endpoint("a", a.url), endpoint("b", b.url)]);
    const response = await r.send(call());
    expect(response.endpoint).toBe("b");
    await frames(r, response.body);
  });

  it("fails over when the first endpoint refuses connections", async () => {
    const b = await provider();
    const r = router([endpoint("a", `http://127.0.0.1:${await closedPort()}`), endpoint("b", b.url)]);
    const response = await r.send(call());
    expect(response.endpoint).toBe("b");
    expect(r.events).toEqual(["attempt a", "fail a unreachable", "failover a", "attempt b"]);
    await frames(r, response.body);
  });

  it("fails over on an overloaded_error event before any content, replaying nothing of the first", async () => {
    const a = await provider(() => failingStream(false));
    const b = await provider();
    const r = router([endpoint("a", a.url), endpoint("b", b.url)]);
    const response = await r.send(call());
    expect(response.endpoint).toBe("b");
    const all = await frames(r, response.body);
    const names = eventNames(all);
    expect(names.filter((n) => n === "message_start")).toHaveLength(1);
    expect(names).not.toContain("error");
    expect(names.at(-1)).toBe("message_stop");
    expect(r.events).toContain("fail a stream_error");
  });

  it("never fails over once content went out: the stream ends with the error, one request made", async () => {
    const a = await provider(() => failingStream(true));
    const b = await provider();
    const r = router([endpoint("a", a.url), endpoint("b", b.url)]);
    const response = await r.send(call());
    expect(response.endpoint).toBe("a");
    const names = eventNames(await frames(r, response.body));
    expect(names).toEqual(["message_start", "ping", "content_block_start", "content_block_delta", "error"]);
    expect(b.requests).toHaveLength(0);
  });

  it("gives the last endpoint's failure when every endpoint fails", async () => {
    const a = await provider(() => ({ kind: "json", status: 529, body: OVERLOADED }));
    const b = await provider(() => failingStream(false));
    const r = router([endpoint("a", a.url), endpoint("b", b.url)]);
    const response = await r.send(call());
    // b's own stream, its error included: the core relays it as the provider's error.
    expect(response.endpoint).toBe("b");
    expect(eventNames(await frames(r, response.body))).toEqual(["message_start", "ping", "error"]);
  });

  it("never retries the caller's fault (400, 413)", async () => {
    for (const status of [400, 413]) {
      const a = await provider(() => ({
        kind: "json",
        status,
        body: { type: "error", error: { type: "invalid_request_error", message: "bad" } },
      }));
      const b = await provider();
      const r = router([endpoint("a", a.url), endpoint("b", b.url)]);
      const response = await r.send(call());
      expect(response.status).toBe(status);
      expect(response.endpoint).toBe("a");
      expect(await readBody(response.body, 10_000)).toContain("invalid_request_error");
      expect(b.requests).toHaveLength(0);
    }
  });

  it("honours retry-after as a cooldown of that endpoint", async () => {
    const a = await provider(() => ({
      kind: "json",
      status: 429,
      body: { type: "error", error: { type: "rate_limit_error", message: "slow down" } },
      headers: { "retry-after": "30" },
    }));
    const b = await provider();
    const r = router([endpoint("a", a.url), endpoint("b", b.url)]);
    for (let i = 0; i < 3; i++) {
      const response = await r.send(call());
      expect(response.endpoint).toBe("b");
      await frames(r, response.body);
    }
    // Tried once; skipped while it cools down.
    expect(a.messageRequests()).toHaveLength(1);
  });

  it("keeps one deadline for the whole call: a silent endpoint uses it up, the next is not tried", async () => {
    const a = await provider(() => ({ kind: "hang" }));
    const b = await provider();
    const r = router([endpoint("a", a.url), endpoint("b", b.url)], { deadlineMs: 300 });
    const started = Date.now();
    const error = await r.send(call()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UpstreamFailure);
    expect((error as UpstreamFailure).kind).toBe("timeout");
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(b.requests).toHaveLength(0);
  });

  it("rewrites the body's model only for an endpoint whose own id differs", async () => {
    const a = await provider(() => ({ kind: "json", status: 503, body: OVERLOADED }));
    const b = await provider();
    const r = router([
      endpoint("a", a.url),
      endpoint("b", b.url, undefined, new Map([[MODEL.id, "claude-haiku-4-5-20251001"]])),
    ]);
    const response = await r.send(call());
    await frames(r, response.body);
    expect(a.messageRequests()[0]!.rawBody).toBe(JSON.stringify(REQUEST));
    expect((b.messageRequests()[0]!.body as { model: string }).model).toBe("claude-haiku-4-5-20251001");
  });
});

describe("TextRouter: circuit breaker", () => {
  it("opens after the configured failures, then lets one probe through and closes on its success", async () => {
    let failing = true;
    const a = await provider(() => (failing ? { kind: "json", status: 529, body: OVERLOADED } : undefined));
    const b = await provider();
    let now = 1_000_000;
    const r = router([endpoint("a", a.url), endpoint("b", b.url)], {
      breaker: { failures: 2, windowMs: 10_000, cooldownMs: 5_000 },
      now: () => now,
    });
    for (let i = 0; i < 4; i++) await frames(r, (await r.send(call())).body);
    // Two failures opened it: the next two calls went straight to b.
    expect(a.messageRequests()).toHaveLength(2);
    expect(r.breakers()).toContainEqual({ endpoint: "a", model: MODEL.id, state: "open" });
    now += 5_000;
    expect(r.breakers()).toContainEqual({ endpoint: "a", model: MODEL.id, state: "half-open" });
    failing = false;
    const probe = await r.send(call());
    expect(probe.endpoint).toBe("a");
    await frames(r, probe.body);
    expect(r.breakers()).toContainEqual({ endpoint: "a", model: MODEL.id, state: "closed" });
  });

  it("lets only ONE call probe a half-open endpoint; a failed probe opens it again", async () => {
    const a = await provider(() => ({ kind: "json", status: 529, body: OVERLOADED }));
    const b = await provider();
    let now = 1_000_000;
    const r = router([endpoint("a", a.url), endpoint("b", b.url)], {
      breaker: { failures: 1, windowMs: 10_000, cooldownMs: 1_000 },
      now: () => now,
    });
    await frames(r, (await r.send(call())).body);
    expect(a.messageRequests()).toHaveLength(1);
    now += 1_000;
    const answers = await Promise.all([r.send(call()), r.send(call()), r.send(call())]);
    for (const answer of answers) await frames(r, answer.body);
    expect(a.messageRequests()).toHaveLength(2);
    expect(r.breakers()).toContainEqual({ endpoint: "a", model: MODEL.id, state: "open" });
  });

  it("answers 529 with retry-after when every endpoint rests", async () => {
    const a = await provider(() => ({ kind: "json", status: 529, body: OVERLOADED }));
    const r = router([endpoint("a", a.url)], {
      breaker: { failures: 1, windowMs: 10_000, cooldownMs: 20_000 },
    });
    expect((await r.send(call())).status).toBe(529);
    const resting = await r.send(call());
    expect(resting.status).toBe(529);
    expect(Number(resting.headers["retry-after"])).toBeGreaterThan(0);
    expect(await readBody(resting.body, 10_000)).toContain("resting after failures");
    expect(a.messageRequests()).toHaveLength(1);
  });
});

describe("TextRouter: capabilities", () => {
  const NO_COUNT: EndpointCapabilities = { countTokens: false, serverTools: [] };

  it("routes count_tokens only to an endpoint that can count", async () => {
    const a = await provider();
    const b = await provider();
    const r = router([endpoint("a", a.url, NO_COUNT), endpoint("b", b.url)]);
    const response = await r.send(call({ path: "/v1/messages/count_tokens" }));
    expect(response.status).toBe(200);
    expect(response.endpoint).toBe("b");
    expect(a.requests).toHaveLength(0);
  });

  it("refuses with a 400 naming why when no endpoint of the model can take the call", async () => {
    const a = await provider();
    const r = router([endpoint("a", a.url, NO_COUNT)]);
    const counted = await r.send(call({ path: "/v1/messages/count_tokens" }));
    expect(counted.status).toBe(400);
    expect(await readBody(counted.body, 10_000)).toMatch(
      /count_tokens is not available for model-haiku-4-5.*a \(anthropic\)/,
    );
    const tooled = await r.send(call({ serverTools: ["web_fetch"] }));
    expect(tooled.status).toBe(400);
    expect(await readBody(tooled.body, 10_000)).toContain("the server tool web_fetch is not available");
    expect(a.requests).toHaveLength(0);
  });

  it("sends a call with server tools past endpoints that do not run them", async () => {
    const a = await provider();
    const b = await provider();
    const r = router([
      endpoint("a", a.url, { countTokens: true, serverTools: ["web_search"] }),
      endpoint("b", b.url),
    ]);
    const response = await r.send(call({ serverTools: ["web_fetch"] }));
    expect(response.endpoint).toBe("b");
    await frames(r, response.body);
    expect(a.requests).toHaveLength(0);
  });

  it("routes a model it does not name by the * route, and 404s without one", async () => {
    const a = await provider();
    const any = router([endpoint("a", a.url)], {
      routes: new Map([[ANY_MODEL, [{ endpoint: "a", priority: 0, weight: 1 }]]]),
    });
    const response = await any.send(call({ model: { id: "model-other", sent: "claude-other" } }));
    expect(response.endpoint).toBe("a");
    await frames(any, response.body);
    const none = router([endpoint("b", a.url)]);
    expect((await none.send(call({ model: { id: "model-other", sent: "x" } }))).status).toBe(404);
  });
});
