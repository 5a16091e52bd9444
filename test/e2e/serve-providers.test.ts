/**
 * `serve` with a providers file, as the compiled CLI (dist/): it fails closed on a credential the
 * file names that is unset, and stops on a bad file with a message naming the field. And the
 * compiled gateway's way to the cloud platforms (`tollgate dev`: the same routing, no production
 * secrets to set): a file naming the Bedrock and Vertex stand-ins
 * is served by both (their clients load from dist/ as they do in production).
 */
import { generateKeyPairSync } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { startBedrockStandin } from "../../src/dev/provider/bedrock-standin.js";
import { startVertexStandin } from "../../src/dev/provider/vertex-standin.js";
import { cliJson, runCli, startGateway, tempDir } from "../helpers/process.js";

const dir = tempDir();
afterAll(() => dir.cleanup());

function providersFile(name: string, content: unknown): string {
  const path = join(dir.path, name);
  writeFileSync(path, JSON.stringify(content));
  return path;
}

describe("tollgate serve with TOLLGATE_PROVIDERS", () => {
  it("refuses to start while a credential the file names is unset, naming it and the field", async () => {
    const file = providersFile("providers.json", {
      endpoints: [
        { name: "anthropic-1", kind: "anthropic", apiKey: { env: "TEST_PROVIDER_KEY_1" } },
        { name: "anthropic-2", kind: "anthropic", apiKey: { env: "TEST_PROVIDER_KEY_2" } },
      ],
      text: { "model-haiku-4-5": ["anthropic-1", "anthropic-2"] },
    });
    const result = await runCli(["serve"], {
      TOLLGATE_DATA_DIR: dir.path,
      TOLLGATE_PROVIDERS: file,
      TEST_PROVIDER_KEY_1: "sk-set",
    });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("serve refuses to start without");
    expect(result.stderr).toContain(
      "TEST_PROVIDER_KEY_2 (providers.json: endpoints[1].apiKey names it; it is unset)",
    );
    expect(result.stderr).not.toContain("TEST_PROVIDER_KEY_1 (");
    // The file routes text: no Anthropic variable is asked for.
    expect(result.stderr).not.toContain("TOLLGATE_ANTHROPIC_API_KEY");
    expect(result.stdout).not.toContain("ready");
  });

  it("stops on a file that writes a secret inline, naming the field and never echoing the secret", async () => {
    const file = providersFile("inline.json", {
      endpoints: [{ name: "anthropic-1", kind: "anthropic", apiKey: "sk-ant-api03-not-a-real-key" }],
      text: { "model-haiku-4-5": ["anthropic-1"] },
    });
    const result = await runCli(["serve"], { TOLLGATE_DATA_DIR: dir.path, TOLLGATE_PROVIDERS: file });
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain(
      "TOLLGATE_PROVIDERS: inline.json: endpoints[0].apiKey: must name where the secret is",
    );
    expect(result.stderr).not.toContain("sk-ant-api03-not-a-real-key");
  });

  it("the compiled gateway (`tollgate dev`) reaches Bedrock (SigV4) and Vertex AI (OAuth) named in the file", async () => {
    const key = generateKeyPairSync("rsa", {
      modulusLength: 2048,
      publicKeyEncoding: { type: "spki", format: "pem" },
      privateKeyEncoding: { type: "pkcs8", format: "pem" },
    });
    const email = "e2e@tollgate-e2e.iam.gserviceaccount.com";
    const bedrock = await startBedrockStandin({ accessKeyId: "AKIDE2E", secretAccessKey: "e2e-secret" });
    const vertex = await startVertexStandin({
      projectId: "tollgate-e2e",
      accounts: { [email]: key.publicKey },
    });
    const keyFile = join(dir.path, "vertex-sa.json");
    writeFileSync(
      keyFile,
      JSON.stringify({ private_key: key.privateKey, client_email: email, token_uri: vertex.tokenUri }),
    );
    const file = providersFile("platforms.json", {
      endpoints: [
        {
          name: "bedrock-east",
          kind: "bedrock",
          region: "us-east-1",
          baseUrl: bedrock.url,
          auth: {
            kind: "sigv4",
            accessKeyId: { env: "TEST_AWS_ID" },
            secretAccessKey: { env: "TEST_AWS_SECRET" },
          },
          models: { "model-haiku-4-5": "us.anthropic.claude-haiku-4-5-20251001-v1:0" },
        },
        {
          name: "vertex-east",
          kind: "vertex",
          region: "us-east5",
          projectId: "tollgate-e2e",
          baseUrl: vertex.url,
          serviceAccountKey: { file: keyFile },
          models: { "model-sonnet-4-6": "claude-sonnet-4-6" },
        },
      ],
      text: { "model-haiku-4-5": ["bedrock-east"], "model-sonnet-4-6": ["vertex-east"] },
    });
    const env = {
      TOLLGATE_DATA_DIR: join(dir.path, "platforms"),
      TOLLGATE_PROVIDERS: file,
      TEST_AWS_ID: "AKIDE2E",
      TEST_AWS_SECRET: "e2e-secret",
    };
    const gateway = await startGateway(env);
    try {
      const account = await cliJson<{ id: string }>(["account", "create"], env);
      const created = await cliJson<{ secret: string }>(["key", "create", "--account", account.id], env);
      const credit = [
        "credit",
        "--account",
        account.id,
        "--chain",
        "base",
        "--amount",
        "5",
        "--reason",
        "e2e",
      ];
      expect((await runCli(credit, env)).code).toBe(0);
      for (const [model, stream] of [
        ["claude-haiku-4-5", false],
        ["claude-haiku-4-5", true],
        ["claude-sonnet-4-6", true],
      ] as const) {
        const response = await fetch(`${gateway.facadeUrl}/v1/messages`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${created.secret}` },
          body: JSON.stringify({
            model,
            max_tokens: 32,
            stream,
            messages: [{ role: "user", content: "hi" }],
          }),
        });
        expect(response.status).toBe(200);
        const text = await response.text();
        expect(text).toContain("dev-upstream");
        if (stream) expect(text).toContain("event: message_stop");
      }
      expect(bedrock.requests.map((r) => r.stream)).toEqual([false, true]);
      expect(bedrock.refusals).toEqual([]);
      expect(vertex.requests.map((r) => r.method)).toEqual(["streamRawPredict"]);
      const usage = await runCli(["usage", "--account", account.id], env);
      expect(usage.stdout).toContain("model-haiku-4-5 · tokens");
      expect(usage.stdout).toContain("model-sonnet-4-6 · tokens");
      expect(await gateway.stop("SIGTERM")).toBe(0);
    } finally {
      await gateway.stop("SIGKILL");
      await Promise.all([bedrock.close(), vertex.close()]);
    }
  });
});
