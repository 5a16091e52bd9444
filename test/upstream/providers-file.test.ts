/**
 * The providers file (TOLLGATE_PROVIDERS, docs/providers.md): JSON and YAML, validated at start
 * with messages naming the field; credentials by name only; every routed model priced; `serve`
 * refusing an unset credential; the documented Anthropic + Bedrock + Vertex example valid and built.
 */
import { generateKeyPairSync } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config/config.js";
import { ConfigError } from "../../src/config/read.js";
import { imageRouter } from "../../src/runtime/image-endpoints.js";
import { missingForProduction } from "../../src/runtime/refusals.js";
import { textEndpoint, textRouter } from "../../src/runtime/text-endpoints.js";
import { tempDir } from "../helpers/process.js";

const dir = tempDir();
afterAll(() => dir.cleanup());

let files = 0;
/** Writes `content` as a providers file (JSON unless `ext` says otherwise) and loads the config. */
function load(content: unknown, env: Record<string, string> = {}, ext = "json") {
  const path = join(dir.path, `providers-${files++}.${ext}`);
  writeFileSync(path, typeof content === "string" ? content : JSON.stringify(content));
  return loadConfig({ TOLLGATE_DATA_DIR: dir.path, TOLLGATE_PROVIDERS: path, ...env }, dir.path);
}

/** The message loading `content` fails with. */
function refusal(content: unknown): string {
  try {
    load(content);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return (error as Error).message;
  }
  throw new Error("the file was accepted");
}

const ANTHROPIC = { name: "anthropic-a", kind: "anthropic", apiKey: { env: "KEY_A" } };
const BEDROCK = {
  name: "bedrock-east",
  kind: "bedrock",
  region: "us-east-1",
  auth: { kind: "sigv4", accessKeyId: { env: "AWS_ID" }, secretAccessKey: { env: "AWS_SECRET" } },
  models: { "model-sonnet-4-6": "us.anthropic.claude-sonnet-4-6-v1:0" },
};
const VALID = {
  endpoints: [ANTHROPIC, BEDROCK],
  text: { "model-sonnet-4-6": ["anthropic-a", { endpoint: "bedrock-east", priority: 1, weight: 2 }] },
};

describe("providers file", () => {
  it("reads a valid JSON file: endpoints, routes in order with weights, breaker defaults", () => {
    const { providers } = load(VALID, { KEY_A: "sk-a", AWS_ID: "id", AWS_SECRET: "secret" });
    expect(providers?.text.get("model-sonnet-4-6")).toEqual([
      { endpoint: "anthropic-a", priority: 0, weight: 1 },
      { endpoint: "bedrock-east", priority: 1, weight: 2 },
    ]);
    expect(providers?.endpoints[0]).toMatchObject({
      baseUrl: "https://api.anthropic.com",
      apiKey: { value: "sk-a" },
    });
    expect(providers?.breaker).toEqual({ failures: 5, windowMs: 30_000, cooldownMs: 30_000 });
  });

  it("reads the same file as YAML", () => {
    const yaml = [
      "endpoints:",
      "  - name: anthropic-a",
      "    kind: anthropic",
      "    baseUrl: http://127.0.0.1:9/v1/",
      "    apiKey: { env: KEY_A }",
      "    connections: 16",
      "text:",
      "  model-haiku-4-5: [anthropic-a]",
      "breaker: { failures: 2, cooldownMs: 1000 }",
    ].join("\n");
    const { providers } = load(yaml, { KEY_A: "sk-a" }, "yaml");
    expect(providers?.endpoints[0]).toMatchObject({ baseUrl: "http://127.0.0.1:9", connections: 16 });
    expect(providers?.breaker).toEqual({ failures: 2, windowMs: 30_000, cooldownMs: 1000 });
  });

  it.each([
    [
      "an endpoint's model id that is not one",
      { ...VALID, endpoints: [ANTHROPIC, { ...BEDROCK, models: { "model-sonnet-4-6": 7 } }] },
      'providers-\\d+.json: endpoints\\[1\\].models\\["model-sonnet-4-6"\\]: must be the endpoint\'s model id, got 7',
    ],
    [
      "a secret written inline",
      { ...VALID, endpoints: [{ ...ANTHROPIC, apiKey: "sk-ant-api03-abc" }, BEDROCK] },
      "endpoints\\[0\\].apiKey: must name where the secret is .* never the secret itself \\(this looks like a key: rotate it\\)",
    ],
    [
      "a secret where a variable's name belongs",
      { ...VALID, endpoints: [{ ...ANTHROPIC, apiKey: { env: "sk-ant-api03-abc" } }, BEDROCK] },
      "endpoints\\[0\\].apiKey.env: must be the name of an environment variable, not a secret",
    ],
    [
      "an unpriced model",
      { ...VALID, text: { "model-unpriced": ["anthropic-a"] } },
      'text\\["model-unpriced"\\]: model-unpriced is not a text model of the price catalog',
    ],
    [
      "a route to an endpoint that does not exist",
      { ...VALID, text: { "model-sonnet-4-6": ["anthropic-a", "nowhere"] } },
      'text\\["model-sonnet-4-6"\\]\\[1\\]: no endpoint is named "nowhere"',
    ],
    [
      "a Bedrock endpoint without an id for a model routed to it",
      { ...VALID, endpoints: [ANTHROPIC, { ...BEDROCK, models: {} }] },
      'endpoints\\[1\\].models: has no model id for model-sonnet-4-6, which text\\["model-sonnet-4-6"\\]\\[1\\] routes to it',
    ],
    [
      "an unknown kind",
      { ...VALID, endpoints: [{ ...ANTHROPIC, kind: "azure" }, BEDROCK] },
      'endpoints\\[0\\].kind: must be one of anthropic, bedrock, vertex, gemini, openai, got "azure"',
    ],
    [
      "an unknown field",
      { ...VALID, endpoints: [{ ...ANTHROPIC, apikey: { env: "X" } }, BEDROCK] },
      "endpoints\\[0\\].apikey: unknown field",
    ],
    [
      "a text model routed to an image endpoint",
      {
        endpoints: [{ name: "g", kind: "gemini", apiKey: { env: "G" }, models: { "model-haiku-4-5": "x" } }],
        text: { "model-haiku-4-5": ["g"] },
      },
      'text\\["model-haiku-4-5"\\]\\[0\\]: g is a gemini endpoint, which does not serve text',
    ],
    [
      "a negative weight",
      { ...VALID, text: { "model-sonnet-4-6": [{ endpoint: "anthropic-a", weight: -1 }] } },
      'text\\["model-sonnet-4-6"\\]\\[0\\].weight: must be a positive number, got -1',
    ],
  ])("refuses %s, naming the field", (_what, content, message) => {
    expect(refusal(content)).toMatch(
      new RegExp(
        `^TOLLGATE_PROVIDERS: ${message.startsWith("providers") ? "" : "providers-\\d+.json: "}${message}`,
      ),
    );
  });

  it("refuses a file that is not JSON, naming it", () => {
    expect(refusal("{ endpoints: ")).toMatch(/^TOLLGATE_PROVIDERS: providers-\d+\.json is not valid JSON/);
  });

  it("serve refuses to start while a credential the file names is unset", () => {
    const config = load(VALID, { KEY_A: "sk-a", AWS_ID: "id" });
    const missing = missingForProduction(config, "serve");
    expect(missing).toContainEqual(
      expect.stringMatching(
        /^AWS_SECRET \(providers-\d+\.json: endpoints\[1\]\.auth\.secretAccessKey names it; it is unset\)/,
      ),
    );
    expect(missing.join("\n")).not.toContain("TOLLGATE_ANTHROPIC_API_KEY");
  });

  it("reads a credential from a file, and refuses one it cannot read", () => {
    const keyFile = join(dir.path, "key.txt");
    writeFileSync(keyFile, "sk-from-file\n");
    const ok = load({
      endpoints: [{ ...ANTHROPIC, apiKey: { file: keyFile } }],
      text: { "model-haiku-4-5": ["anthropic-a"] },
    });
    expect(ok.providers?.endpoints[0]).toMatchObject({ apiKey: { value: "sk-from-file" } });
    expect(
      refusal({
        endpoints: [{ ...ANTHROPIC, apiKey: { file: join(dir.path, "absent") } }],
        text: { "model-haiku-4-5": ["anthropic-a"] },
      }),
    ).toMatch(/endpoints\[0\]\.apiKey\.file: cannot read/);
  });

  it("the documented example (docs/providers.md) passes the validator and its routers build", async () => {
    const doc = readFileSync(new URL("../../docs/providers.md", import.meta.url), "utf8");
    const block = /An Anthropic \+ Bedrock \+ Vertex file[\s\S]*?```json\n([\s\S]*?)```/.exec(doc)?.[1];
    expect(block).toBeDefined();
    // Its secret files, here: the key file a real service-account key's shape.
    const secrets = join(dir.path, "secrets");
    mkdirSync(secrets, { recursive: true });
    writeFileSync(join(secrets, "anthropic-2"), "sk-two\n");
    const { privateKey } = generateKeyPairSync("rsa", {
      modulusLength: 2048,
      privateKeyEncoding: { type: "pkcs8", format: "pem" },
      publicKeyEncoding: { type: "spki", format: "pem" },
    });
    writeFileSync(
      join(secrets, "vertex-sa.json"),
      JSON.stringify({ client_email: "gw@my-project.iam.gserviceaccount.com", private_key: privateKey }),
    );
    const content = block!.replaceAll("/run/secrets", secrets);
    const config = load(content, {
      ANTHROPIC_KEY_1: "sk-one",
      AWS_ACCESS_KEY_ID: "AKIDEXAMPLE",
      AWS_SECRET_ACCESS_KEY: "secret",
      GEMINI_KEY: "g",
    });
    const providers = config.providers!;
    // Every credential it names is set (what else `serve` needs is not the file's).
    expect(missingForProduction(config, "serve").filter((m) => m.includes("names it"))).toEqual([]);
    expect(providers.endpoints.map((e) => `${e.name}:${e.kind}`)).toEqual([
      "anthropic-1:anthropic",
      "anthropic-2:anthropic",
      "bedrock-east:bedrock",
      "vertex-eu:vertex",
      "gemini:gemini",
      "vertex-images:vertex",
    ]);
    const built = await Promise.all(
      providers.endpoints.slice(0, 4).map((e) => textEndpoint(providers, e, config.anthropic)),
    );
    expect(built.map((e) => e.constructor.name)).toEqual([
      "AnthropicUpstream",
      "AnthropicUpstream",
      "BedrockUpstream",
      "VertexUpstream",
    ]);
    await Promise.all(built.map((e) => e.close()));
    const text = await textRouter(providers, config.anthropic, undefined);
    await text.close();
    const images = await imageRouter(providers, config.images.timeouts, undefined);
    await images.close();
  });
});
