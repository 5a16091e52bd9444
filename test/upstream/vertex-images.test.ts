/**
 * VertexImages against the Vertex stand-in (src/dev/provider/vertex-standin.ts) over a real
 * socket: Gemini's generateContent on Vertex's publisher path with an OAuth token that
 * google-auth-library fetched from the stand-in's token endpoint, the same image the dev
 * provider draws for the same prompt, and errors as the core's image outcomes.
 */
import { generateKeyPairSync } from "node:crypto";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { ImageUpstreamRequest } from "../../src/core/ports/providers.js";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import {
  startVertexStandin,
  type VertexFault,
  type VertexStandin,
} from "../../src/dev/provider/vertex-standin.js";
import { GeminiImageUpstream } from "../../src/upstream/gemini/client.js";
import { VertexImages, type VertexImagesOptions } from "../../src/upstream/vertex/images.js";
import { pngPixels } from "../helpers/image-fixtures.js";

const PROJECT = "tollgate-images-project";
const REGION = "global";
const EMAIL = "images@tollgate-images-project.iam.gserviceaccount.com";
const MODEL = "gemini-3-pro-image-preview";
const TIMEOUTS = {
  connectTimeoutMs: 2_000,
  headersTimeoutMs: 10_000,
  idleTimeoutMs: 10_000,
  responseTimeoutMs: 20_000,
};

const REQUEST: ImageUpstreamRequest = {
  upstreamModel: "nano-banana-pro",
  prompt: "a lighthouse at dusk",
  size: "1K",
  aspectRatio: "16:9",
  width: 1376,
  height: 768,
  references: [],
};

describe("VertexImages", () => {
  const key = generateKeyPairSync("rsa", {
    modulusLength: 2048,
    publicKeyEncoding: { type: "spki", format: "pem" },
    privateKeyEncoding: { type: "pkcs8", format: "pem" },
  });
  let standin: VertexStandin;
  let dev: DevUpstream;
  let fault: VertexFault | undefined;
  const clients: { close(): Promise<void> }[] = [];

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
    await Promise.all(clients.splice(0).map((c) => c.close()));
  });

  function images(overrides: Partial<VertexImagesOptions> = {}): VertexImages {
    const made = new VertexImages({
      name: "vertex-images-test",
      models: new Map([["nano-banana-pro", MODEL]]),
      connections: 4,
      ...TIMEOUTS,
      region: REGION,
      projectId: PROJECT,
      baseUrl: standin.url,
      serviceAccountKey: {
        type: "service_account",
        client_email: EMAIL,
        private_key: key.privateKey,
        private_key_id: "images-key",
        token_uri: standin.tokenUri,
      },
      ...overrides,
    });
    clients.push(made);
    return made;
  }

  it("calls generateContent on Vertex's publisher path and gets the dev provider's image", async () => {
    const outcome = await images().generate(REQUEST);
    const seen = standin.requests.at(-1)!;
    expect(seen.path).toBe(
      `/v1/projects/${PROJECT}/locations/global/publishers/google/models/${MODEL}:generateContent`,
    );
    expect(seen.token).toBe(standin.issued.at(-1)!.token);
    expect(seen.body).toMatchObject({
      contents: [{ role: "user", parts: [{ text: REQUEST.prompt }] }],
      generationConfig: {
        responseModalities: ["TEXT", "IMAGE"],
        imageConfig: { aspectRatio: "16:9", imageSize: "1K" },
      },
    });
    expect(outcome.kind).toBe("images");
    if (outcome.kind !== "images") return;
    const gemini = new GeminiImageUpstream({ baseUrl: dev.url, apiKey: "unused", ...TIMEOUTS });
    clients.push(gemini);
    const direct = await gemini.generate({ ...REQUEST, upstreamModel: MODEL });
    expect(direct.kind).toBe("images");
    if (direct.kind !== "images") return;
    expect(Buffer.from(outcome.images[0]!.data).equals(Buffer.from(direct.images[0]!.data))).toBe(true);
    expect(pngPixels(Buffer.from(outcome.images[0]!.data))).toMatchObject({ width: 1376, height: 768 });
  });

  it("reports Vertex's quota error as an http-error outcome the core classifies", async () => {
    fault = { kind: "google", httpStatus: 429, status: "RESOURCE_EXHAUSTED", message: "Quota exceeded" };
    const outcome = await images().generate(REQUEST);
    expect(outcome).toMatchObject({ kind: "http-error", status: 429 });
    if (outcome.kind === "http-error") expect(outcome.body).toContain("RESOURCE_EXHAUSTED");
  });

  it("reports a refused service-account key as 401 (the gateway's credentials), sending nothing", async () => {
    const before = standin.requests.length;
    const other = generateKeyPairSync("rsa", {
      modulusLength: 2048,
      privateKeyEncoding: { type: "pkcs8", format: "pem" },
      publicKeyEncoding: { type: "spki", format: "pem" },
    });
    const outcome = await images({
      serviceAccountKey: { client_email: EMAIL, private_key: other.privateKey, token_uri: standin.tokenUri },
    }).generate(REQUEST);
    expect(outcome).toMatchObject({ kind: "http-error", status: 401 });
    expect(standin.requests.length).toBe(before);
  });
});
