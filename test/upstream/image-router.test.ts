/**
 * The image router over real Gemini-format endpoints (the dev provider on real sockets): failover
 * on 503/429 before an image was returned, the endpoint named on the images; never on a refusal
 * or the caller's 400.
 */
import { afterEach, describe, expect, it } from "vitest";
import type { ImageUpstreamRequest } from "../../src/core/ports/providers.js";
import {
  type DevUpstream,
  type ScriptedReply,
  startDevUpstream,
} from "../../src/dev/provider/dev-upstream.js";
import { GeminiImageUpstream } from "../../src/upstream/gemini/client.js";
import { type ImageEndpoint, ImageRouter } from "../../src/upstream/router/image-router.js";

const MODEL = "image-test";
const REQUEST: ImageUpstreamRequest = {
  upstreamModel: "gemini-3-pro-image-preview",
  model: MODEL,
  prompt: "a fox",
  size: "1K",
  aspectRatio: "1:1",
  width: 1024,
  height: 1024,
  references: [],
};

const started: DevUpstream[] = [];
const routers: ImageRouter[] = [];
afterEach(async () => {
  await Promise.all(routers.splice(0).map((router) => router.close()));
  await Promise.all(started.splice(0).map((upstream) => upstream.close()));
});

async function provider(reply?: () => ScriptedReply | undefined): Promise<DevUpstream> {
  const upstream = await startDevUpstream(reply ? { script: () => reply() } : {});
  started.push(upstream);
  return upstream;
}

function endpoint(name: string, url: string): ImageEndpoint {
  const client = new GeminiImageUpstream({
    baseUrl: url,
    apiKey: "k",
    connectTimeoutMs: 500,
    headersTimeoutMs: 2_000,
    idleTimeoutMs: 2_000,
  });
  return {
    name,
    models: new Map([[MODEL, "gemini-3-pro-image-preview"]]),
    generate: (request) => client.generate(request),
    close: () => client.close(),
  };
}

function router(endpoints: ImageEndpoint[]): ImageRouter {
  const built = new ImageRouter({
    endpoints,
    routes: new Map([[MODEL, endpoints.map((e, i) => ({ endpoint: e.name, priority: i, weight: 1 }))]]),
    deadlineMs: 5_000,
    breaker: { failures: 5, windowMs: 10_000, cooldownMs: 10_000 },
    maxRetryAfterMs: 60_000,
  });
  routers.push(built);
  return built;
}

const refusal: ScriptedReply = {
  kind: "json",
  status: 200,
  body: {
    candidates: [{ content: { parts: [{ text: "I can't draw that." }] }, finishReason: "IMAGE_SAFETY" }],
  },
};

describe("ImageRouter", () => {
  it.each([503, 429, 500])(
    "fails over on %i and names the endpoint that returned the image",
    async (status) => {
      const a = await provider(() => ({ kind: "json", status, body: { error: { message: "busy" } } }));
      const b = await provider();
      const outcome = await router([endpoint("a", a.url), endpoint("b", b.url)]).generate(REQUEST);
      expect(outcome).toMatchObject({ kind: "images", endpoint: "b" });
      expect(a.requests).toHaveLength(1);
    },
  );

  it("never fails over on a refusal or the caller's 400", async () => {
    for (const reply of [
      refusal,
      { kind: "json", status: 400, body: { error: { message: "bad prompt" } } } as const,
    ]) {
      const a = await provider(() => reply);
      const b = await provider();
      const outcome = await router([endpoint("a", a.url), endpoint("b", b.url)]).generate(REQUEST);
      expect(outcome.kind).toBe(reply === refusal ? "refused" : "http-error");
      expect(b.requests).toHaveLength(0);
    }
  });

  it("honours retry-after: the endpoint is skipped while it cools down", async () => {
    const a = await provider(() => ({
      kind: "json",
      status: 429,
      body: { error: { message: "slow down" } },
      headers: { "retry-after": "30" },
    }));
    const b = await provider();
    const r = router([endpoint("a", a.url), endpoint("b", b.url)]);
    for (let i = 0; i < 3; i++) expect(await r.generate(REQUEST)).toMatchObject({ endpoint: "b" });
    expect(a.requests).toHaveLength(1);
  });
});
