import { generateKeyPairSync } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import {
  type BedrockFault,
  type BedrockStandin,
  type BedrockStandinRequest,
  startBedrockStandin,
} from "../../src/dev/provider/bedrock-standin.js";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import {
  startVertexStandin,
  type VertexFault,
  type VertexStandin,
  type VertexStandinRequest,
} from "../../src/dev/provider/vertex-standin.js";
import { HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { tempDir } from "./process.js";
import { startTextGateway, type TextGateway } from "./text-gateway.js";

/** The Bedrock stand-in's one access key. */
const AWS_KEY_ID = "AKIDTOLLGATETEST";
const AWS_SECRET = "tollgate-test-secret-access-key";
const VERTEX_PROJECT = "tollgate-test-project";
const VERTEX_REGION = "us-east5";
const VERTEX_EMAIL = "tollgate@tollgate-test-project.iam.gserviceaccount.com";

/** Model ids as each platform names them (Bedrock's with its inference-profile prefix). */
export const BEDROCK_IDS = {
  "model-haiku-4-5": "us.anthropic.claude-haiku-4-5-20251001-v1:0",
  "model-opus-4-7": "us.anthropic.claude-opus-4-7-v1:0",
} as const;
export const VERTEX_IDS = {
  "model-sonnet-4-6": "claude-sonnet-4-6@20260101",
  "model-opus-4-6": "claude-opus-4-6@20260101",
} as const;

/**
 * The routes of {@link startPlatformGateway}'s providers file. Three gateway models have the
 * `overloaded` Anthropic endpoint (every message call answered 529 `overloaded_error`) first and
 * one platform next; two are served by a platform alone (what the platform cannot do is refused).
 */
export const PLATFORM_ROUTES = {
  /** 529 first → Bedrock (SigV4) → the `anthropic` dev provider. */
  "model-haiku-4-5": ["overloaded", "bedrock", "anthropic"],
  /** 529 first → Vertex (service-account key → OAuth). */
  "model-sonnet-4-6": ["overloaded", "vertex"],
  /** 529 first → the `anthropic` dev provider: what the gateway sends routed straight to it. */
  "model-opus-4-8": ["overloaded", "anthropic"],
  /** Bedrock only. */
  "model-opus-4-7": ["bedrock"],
  /** Vertex only. */
  "model-opus-4-6": ["vertex"],
} as const;

/** A gateway whose providers file names the Bedrock and Vertex stand-ins and two Anthropic endpoints. */
export interface PlatformGateway {
  /** The gateway; its dev upstream (`t.upstream`) is the endpoint named `anthropic`. */
  readonly t: TextGateway;
  /** The endpoint named `overloaded`: every message call (not counts) answered 529. */
  readonly overloaded: DevUpstream;
  readonly bedrock: BedrockStandin;
  readonly vertex: VertexStandin;
  /** Makes the Bedrock stand-in answer its next requests with this fault (undefined: serve). */
  bedrockFault(fault: ((request: BedrockStandinRequest) => BedrockFault | undefined) | undefined): void;
  vertexFault(fault: ((request: VertexStandinRequest) => VertexFault | undefined) | undefined): void;
  /** The endpoint recorded on the hold's resolution of `requestId`. */
  endpointOf(requestId: string): string | undefined;
  /** The usage rows, newest first, once there are `count` and none is pending. */
  settledRows(count: number): ReturnType<TextGateway["usage"]>;
  /** The payload of the call's signed receipt (docs/receipts.md), read as any holder would. */
  receipt(requestId: string): Promise<Record<string, unknown>>;
  close(): Promise<void>;
}

const OVERLOADED = { type: "error", error: { type: "overloaded_error", message: "Overloaded" } };

/**
 * Starts the stand-ins and a gateway in this process with a providers file routing
 * {@link PLATFORM_ROUTES}, the breaker out of the way (every call fails over from `overloaded`).
 */
export async function startPlatformGateway(): Promise<PlatformGateway> {
  const dir = tempDir();
  const key = generateKeyPairSync("rsa", {
    modulusLength: 2048,
    publicKeyEncoding: { type: "spki", format: "pem" },
    privateKeyEncoding: { type: "pkcs8", format: "pem" },
  });
  let bedrockFault: Parameters<PlatformGateway["bedrockFault"]>[0];
  let vertexFault: Parameters<PlatformGateway["vertexFault"]>[0];
  const overloaded = await startDevUpstream({
    script: (request) =>
      request.path.startsWith("/v1/messages") && !request.path.includes("count_tokens")
        ? { kind: "json", status: 529, body: OVERLOADED }
        : undefined,
  });
  const bedrock = await startBedrockStandin({
    region: "us-east-1",
    accessKeyId: AWS_KEY_ID,
    secretAccessKey: AWS_SECRET,
    fault: (request) => bedrockFault?.(request),
  });
  const vertex = await startVertexStandin({
    projectId: VERTEX_PROJECT,
    region: VERTEX_REGION,
    accounts: { [VERTEX_EMAIL]: key.publicKey },
    fault: (request) => vertexFault?.(request),
  });
  const keyFile = join(dir.path, "vertex-sa.json");
  writeFileSync(
    keyFile,
    JSON.stringify({
      type: "service_account",
      project_id: VERTEX_PROJECT,
      private_key_id: "test-key",
      private_key: key.privateKey,
      client_email: VERTEX_EMAIL,
      token_uri: vertex.tokenUri,
    }),
  );
  const file = join(dir.path, "providers.json");
  const t = await startTextGateway((anthropicUrl) => {
    writeFileSync(
      file,
      JSON.stringify({
        endpoints: [
          { name: "overloaded", kind: "anthropic", baseUrl: overloaded.url, apiKey: { env: "TEST_KEY" } },
          { name: "anthropic", kind: "anthropic", baseUrl: anthropicUrl, apiKey: { env: "TEST_KEY" } },
          {
            name: "bedrock",
            kind: "bedrock",
            region: "us-east-1",
            baseUrl: bedrock.url,
            auth: {
              kind: "sigv4",
              accessKeyId: { env: "TEST_AWS_ACCESS_KEY_ID" },
              secretAccessKey: { env: "TEST_AWS_SECRET_ACCESS_KEY" },
            },
            models: BEDROCK_IDS,
          },
          {
            name: "vertex",
            kind: "vertex",
            region: VERTEX_REGION,
            projectId: VERTEX_PROJECT,
            baseUrl: vertex.url,
            serviceAccountKey: { file: keyFile },
            models: VERTEX_IDS,
          },
        ],
        text: PLATFORM_ROUTES,
        // Every call fails over from `overloaded`: the breaker stays out of the way.
        breaker: { failures: 1_000_000 },
      }),
    );
    return {
      TOLLGATE_PROVIDERS: file,
      TEST_KEY: "sk-test",
      TEST_AWS_ACCESS_KEY_ID: AWS_KEY_ID,
      TEST_AWS_SECRET_ACCESS_KEY: AWS_SECRET,
    };
  });
  return {
    t,
    overloaded,
    bedrock,
    vertex,
    bedrockFault(fault) {
      bedrockFault = fault;
    },
    vertexFault(fault) {
      vertexFault = fault;
    },
    endpointOf(requestId) {
      const row = t.gateway.db
        .prepare(
          "SELECT r.endpoint FROM holds h JOIN hold_resolutions r ON r.hold_id = h.id WHERE h.request_id = ?",
        )
        .get(requestId) as { endpoint: string } | undefined;
      return row?.endpoint;
    },
    async settledRows(count) {
      for (let i = 0; i < 400; i++) {
        const rows = await t.usage();
        if (rows.length >= count && rows.every((row) => row.status !== HoldStatus.PENDING)) return rows;
        await sleep(25);
      }
      throw new Error("calls were never settled");
    },
    async receipt(requestId) {
      const response = await fetch(`${t.baseUrl}/v1/receipts/${encodeURIComponent(requestId)}`, {
        headers: { "x-api-key": t.secret },
      });
      if (response.status !== 200) throw new Error(`receipt: HTTP ${response.status}`);
      const jws = ((await response.json()) as { signature?: string }).signature ?? "";
      return JSON.parse(Buffer.from(jws.split(".")[1] ?? "", "base64url").toString()) as Record<
        string,
        unknown
      >;
    },
    async close() {
      await t.close();
      await Promise.all([overloaded.close(), bedrock.close(), vertex.close()]);
      dir.cleanup();
    },
  };
}
