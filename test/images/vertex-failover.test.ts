/**
 * Image routes with a providers file (docs/providers.md, "Images") reaching Google Vertex AI:
 * a Vertex image endpoint (the Vertex stand-in, its service-account key traded for an OAuth token
 * at the stand-in's token endpoint) behind a Gemini one that fails, through the gateway with the
 * official OpenAI SDK: the image comes from Vertex, charged once at the gateway model's price
 * (the same as when Gemini serves), its usage row naming the endpoint.
 */
import { generateKeyPairSync } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type DevUpstream,
  type ScriptedReply,
  startDevUpstream,
} from "../../src/dev/provider/dev-upstream.js";
import { startVertexStandin, type VertexStandin } from "../../src/dev/provider/vertex-standin.js";
import { HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { tempDir } from "../helpers/process.js";
import { startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

const PROJECT = "tollgate-images-project";
const REGION = "us-central1";
const EMAIL = "images@tollgate-images-project.iam.gserviceaccount.com";
const VERTEX_MODEL = "gemini-3-pro-image-preview";

describe("image routes: a Vertex AI image endpoint behind a failing Gemini one", () => {
  let t: TextGateway;
  let gemini: DevUpstream;
  let vertex: VertexStandin;
  let reply: ScriptedReply | undefined;
  let client: OpenAI;
  const dir = tempDir();

  beforeAll(async () => {
    const key = generateKeyPairSync("rsa", {
      modulusLength: 2048,
      publicKeyEncoding: { type: "spki", format: "pem" },
      privateKeyEncoding: { type: "pkcs8", format: "pem" },
    });
    gemini = await startDevUpstream({
      script: (request) => (request.path.includes(":generateContent") ? reply : undefined),
    });
    vertex = await startVertexStandin({
      projectId: PROJECT,
      region: REGION,
      accounts: { [EMAIL]: key.publicKey },
    });
    const keyFile = join(dir.path, "vertex-sa.json");
    writeFileSync(
      keyFile,
      JSON.stringify({
        type: "service_account",
        project_id: PROJECT,
        private_key: key.privateKey,
        client_email: EMAIL,
        token_uri: vertex.tokenUri,
      }),
    );
    const file = join(dir.path, "providers.json");
    t = await startTextGateway((anthropicUrl) => {
      writeFileSync(
        file,
        JSON.stringify({
          endpoints: [
            { name: "anthropic", kind: "anthropic", baseUrl: anthropicUrl, apiKey: { env: "TEST_KEY" } },
            {
              name: "gemini",
              kind: "gemini",
              baseUrl: gemini.url,
              apiKey: { env: "TEST_KEY" },
              models: { "image-pro": VERTEX_MODEL },
            },
            {
              name: "vertex-images",
              kind: "vertex",
              region: REGION,
              projectId: PROJECT,
              baseUrl: vertex.url,
              serviceAccountKey: { file: keyFile },
              models: { "image-pro": VERTEX_MODEL },
            },
          ],
          text: { "*": ["anthropic"] },
          images: { "image-pro": ["gemini", "vertex-images"] },
          breaker: { failures: 1_000_000 },
        }),
      );
      return { TOLLGATE_PROVIDERS: file, TEST_KEY: "k" };
    });
    await t.credit(10_000_000n);
    client = new OpenAI({ apiKey: t.secret, baseURL: `${t.baseUrl}/v1`, maxRetries: 0 });
  });
  afterAll(async () => {
    t.expectSoundLedger();
    await t.close();
    await Promise.all([gemini.close(), vertex.close()]);
    dir.cleanup();
  });

  function endpointOf(requestId: string): string | undefined {
    const row = t.gateway.db
      .prepare(
        "SELECT r.endpoint FROM holds h JOIN hold_resolutions r ON r.hold_id = h.id WHERE h.request_id = ?",
      )
      .get(requestId) as { endpoint: string } | undefined;
    return row?.endpoint;
  }

  it("Gemini answers 503: the image comes from Vertex, charged once at the model's price, named", async () => {
    reply = {
      kind: "json",
      status: 503,
      body: { error: { code: 503, message: "busy", status: "UNAVAILABLE" } },
    };
    const response = await client.images.generate({
      model: "image-pro",
      prompt: "a fox on a toll bridge",
      response_format: "b64_json",
    });
    const png = Buffer.from(response.data?.[0]?.b64_json ?? "", "base64");
    expect(png.subarray(1, 4).toString()).toBe("PNG");
    expect(gemini.requests).toHaveLength(1);
    expect(vertex.requests.map((r) => [r.method, r.model])).toEqual([["generateContent", VERTEX_MODEL]]);
    expect(vertex.requests[0]!.headers.authorization).toBe(`Bearer ${vertex.issued[0]!.token}`);
    const rows = await t.usage();
    expect(rows).toHaveLength(1);
    expect(rows[0]!.status).toBe(HoldStatus.SETTLED);
    expect(rows[0]!.amount).toBeGreaterThan(0n);
    expect(endpointOf(rows[0]!.requestId)).toBe("vertex-images");

    // Served by Gemini, the same call costs the same: the gateway model's listed price.
    reply = undefined;
    await client.images.generate({ model: "image-pro", prompt: "a fox on a toll bridge" });
    const [served, first] = await t.usage();
    expect(endpointOf(served!.requestId)).toBe("gemini");
    expect(served!.amount).toBe(first!.amount);
    expect(vertex.requests).toHaveLength(1);
  });
});
