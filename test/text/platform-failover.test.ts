/**
 * Issue 33 end to end: a providers file naming the Amazon Bedrock stand-in (SigV4 verified,
 * eventstream answers), the Google Vertex AI stand-in (the service-account key traded for an
 * OAuth token at its token endpoint) and two Anthropic endpoints, one answering 529 to every
 * message call; the official SDK through the gateway (test/helpers/platform-gateway.ts). Every
 * call succeeds on the next endpoint, streams are the Messages format byte for byte, each call
 * is charged once at the gateway model's listed price and names the endpoint that served it.
 */
import Anthropic from "@anthropic-ai/sdk";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { DEV_TEXT_LABEL } from "../../src/dev/provider/dev-upstream.js";
import { HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import {
  BEDROCK_IDS,
  type PlatformGateway,
  startPlatformGateway,
  VERTEX_IDS,
} from "../helpers/platform-gateway.js";
import { expectedCharge, type RATES } from "../helpers/text-gateway.js";

const PROMPT = "Count to three for the platforms";
const request = (model: string) => ({
  model,
  max_tokens: 100,
  messages: [{ role: "user" as const, content: PROMPT }],
});

/** Ids and model names differ per model and call; everything else must be the same bytes. */
function normalised(text: string): string {
  return text
    .replace(/"(msg|toolu|srvtoolu|req)_[A-Za-z0-9_]+"/g, '"$1_X"')
    .replace(/"model":"[^"]*"/g, '"model":"M"');
}

/** The token counts a Messages stream reports (message_start's input, the last delta's output). */
function streamUsage(text: string): { input: number; output: number } {
  let input = -1;
  let output = -1;
  for (const line of text.split("\n")) {
    if (!line.startsWith("data: ")) continue;
    const event = JSON.parse(line.slice(6)) as {
      type: string;
      message?: { usage: { input_tokens: number } };
      usage?: { output_tokens: number };
    };
    if (event.type === "message_start") input = event.message!.usage.input_tokens;
    if (event.type === "message_delta") output = event.usage!.output_tokens;
  }
  return { input, output };
}

type Priced = keyof typeof RATES;
/** The three routes with the 529 endpoint first, and the platform each must end on. */
const ROUTED: readonly { model: Priced; sent: string; endpoint: string; platform: string }[] = [
  {
    model: "model-haiku-4-5",
    sent: "claude-haiku-4-5-20251001",
    endpoint: "bedrock",
    platform: "Amazon Bedrock (SigV4)",
  },
  {
    model: "model-sonnet-4-6",
    sent: "claude-sonnet-4-6",
    endpoint: "vertex",
    platform: "Google Vertex AI (OAuth)",
  },
  {
    model: "model-opus-4-8",
    sent: "claude-opus-4-8",
    endpoint: "anthropic",
    platform: "the next Anthropic endpoint",
  },
];

describe("the official SDK through the gateway, routed to Bedrock, Vertex and past a 529", () => {
  let p: PlatformGateway;
  let client: Anthropic;
  /** What the gateway streams for PROMPT routed straight to the dev provider (after the 529). */
  let reference: string;

  async function rawStream(model: string): Promise<string> {
    const response = await fetch(`${p.t.baseUrl}/v1/messages`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-api-key": p.t.secret,
        "anthropic-version": "2023-06-01",
      },
      body: JSON.stringify({ ...request(model), stream: true }),
    });
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/);
    return response.text();
  }

  /** Asserts the newest call was charged once, at `model`'s listed price, and named `endpoint`. */
  async function expectChargedOnce(
    rowsBefore: number,
    model: Priced,
    tokens: { input: number; output: number },
    endpoint: string,
  ) {
    const rows = await p.settledRows(rowsBefore + 1);
    expect(rows).toHaveLength(rowsBefore + 1);
    const row = rows[0]!;
    expect(row.status).toBe(HoldStatus.SETTLED);
    expect(row.model).toBe(model);
    expect(row.amount).toBe(expectedCharge(model, tokens));
    expect(p.endpointOf(row.requestId)).toBe(endpoint);
    expect(await p.receipt(row.requestId)).toMatchObject({ model, endpoint, status: "settled" });
  }

  beforeAll(async () => {
    p = await startPlatformGateway();
    await p.t.credit(200_000_000n);
    client = new Anthropic({ apiKey: p.t.secret, baseURL: p.t.baseUrl, maxRetries: 0 });
    reference = await rawStream("model-opus-4-8");
    expect(reference).toContain("event: message_stop");
  });
  beforeEach(() => {
    p.bedrockFault(undefined);
    p.vertexFault(undefined);
  });
  afterAll(async () => {
    p.t.expectSoundLedger();
    await p.close();
  });

  for (const { model, sent, endpoint, platform } of ROUTED) {
    it(`${model}: 529 first, then served by ${platform}, non-streaming: charged once, named`, async () => {
      const rowsBefore = (await p.t.usage()).length;
      const overloadedBefore = p.overloaded.messageRequests().length;
      const message = await client.messages.create(request(model));
      const text = message.content.map((block) => (block.type === "text" ? block.text : "")).join("");
      expect(text).toContain(DEV_TEXT_LABEL);
      expect(text).toContain(PROMPT);
      // Named as Anthropic names it, whatever id the platform knows it by.
      expect(message.model).toBe(sent);
      expect(p.overloaded.messageRequests().length - overloadedBefore).toBe(1);
      await expectChargedOnce(
        rowsBefore,
        model,
        { input: message.usage.input_tokens, output: message.usage.output_tokens },
        endpoint,
      );
    });

    it(`${model}: 529 first, then served by ${platform}, streaming: the Messages SSE byte for byte`, async () => {
      const rowsBefore = (await p.t.usage()).length;
      const relayed = await rawStream(model);
      expect(normalised(relayed)).toBe(normalised(reference));
      expect(relayed).toContain(`"model":${JSON.stringify(sent)}`);
      await expectChargedOnce(rowsBefore, model, streamUsage(relayed), endpoint);
      // And the SDK's own stream reader takes it.
      const message = await client.messages.stream(request(model)).finalMessage();
      expect(message.stop_reason).toBe("end_turn");
      await expectChargedOnce(
        rowsBefore + 1,
        model,
        { input: message.usage.input_tokens, output: message.usage.output_tokens },
        endpoint,
      );
    });
  }

  it("reached each platform as the platform expects: Bedrock ids in the path, Vertex with its token", () => {
    const invoked = p.bedrock.requests.filter((r) => r.modelId === BEDROCK_IDS["model-haiku-4-5"]);
    expect(invoked.map((r) => r.stream)).toEqual(expect.arrayContaining([true, false]));
    expect(p.bedrock.refusals).toEqual([]);
    const predicted = p.vertex.requests.filter((r) => r.model === VERTEX_IDS["model-sonnet-4-6"]);
    expect(predicted.map((r) => r.method)).toEqual(
      expect.arrayContaining(["rawPredict", "streamRawPredict"]),
    );
    expect(p.vertex.issued.length).toBeGreaterThanOrEqual(1);
    expect(p.vertex.tokenRefusals).toEqual([]);
  });

  it("count_tokens with only a Bedrock or only a Vertex endpoint is counted there, nothing charged", async () => {
    const rowsBefore = (await p.t.usage()).length;
    const counts = { model: "", messages: request("").messages };
    // The `anthropic`-format count of the same prompt (its 529s are for message calls only).
    const direct = await client.messages.countTokens({ ...counts, model: "model-opus-4-8" });
    expect(direct.input_tokens).toBeGreaterThan(0);
    const bedrockBefore = p.bedrock.requests.length;
    const onBedrock = await client.messages.countTokens({ ...counts, model: "model-opus-4-7" });
    expect(onBedrock.input_tokens).toBe(direct.input_tokens);
    expect(p.bedrock.requests.slice(bedrockBefore).map((r) => [r.modelId, r.path])).toEqual([
      // CountTokens takes the foundation-model id: the inference-profile prefix dropped.
      ["anthropic.claude-opus-4-7-v1:0", expect.stringMatching(/\/count-tokens$/)],
    ]);
    const vertexBefore = p.vertex.requests.length;
    const onVertex = await client.messages.countTokens({ ...counts, model: "model-opus-4-6" });
    expect(onVertex.input_tokens).toBe(direct.input_tokens);
    expect(p.vertex.requests.slice(vertexBefore).map((r) => r.path)).toEqual([
      expect.stringMatching(/\/count-tokens:rawPredict$/),
    ]);
    expect((await p.t.usage()).length).toBe(rowsBefore);
  });

  it("a server tool with only Bedrock or only Vertex endpoints: 400 naming why, nothing charged, no platform asked", async () => {
    const before = { bedrock: p.bedrock.requests.length, vertex: p.vertex.requests.length };
    const available = await p.t.available();
    const rowsBefore = await p.t.usage();
    for (const [model, endpoint] of [
      ["model-opus-4-7", "bedrock (bedrock)"],
      ["model-opus-4-6", "vertex (vertex)"],
    ] as const) {
      const refused = await client.messages
        .create({
          ...request(model),
          tools: [{ type: "web_search_20250305", name: "web_search", max_uses: 2 }],
        })
        .then(
          () => undefined,
          (error: unknown) => error,
        );
      expect(refused).toBeInstanceOf(Anthropic.BadRequestError);
      const body = (refused as InstanceType<typeof Anthropic.BadRequestError>).error as {
        error: { type: string; message: string };
      };
      expect(body.error.type).toBe("invalid_request_error");
      expect(body.error.message).toContain("web_search");
      expect(body.error.message).toContain(model);
      expect(body.error.message).toContain(endpoint);
    }
    expect(p.bedrock.requests.length).toBe(before.bedrock);
    expect(p.vertex.requests.length).toBe(before.vertex);
    expect(await p.t.available()).toBe(available);
    const rows = await p.t.usage();
    for (const row of rows.slice(0, rows.length - rowsBefore.length)) {
      expect(row.status).not.toBe(HoldStatus.SETTLED);
      expect(row.amount).toBe(0n);
    }
  });

  it("a Bedrock exception frame before content: failover to the next endpoint, charged once there", async () => {
    p.bedrockFault((r) =>
      r.stream
        ? {
            kind: "stream-exception",
            afterEvents: 1,
            exceptionType: "serviceUnavailableException",
            message: "Bedrock is unable to process your request.",
          }
        : undefined,
    );
    const rowsBefore = (await p.t.usage()).length;
    const anthropicBefore = p.t.upstream.messageRequests().length;
    const message = await client.messages.stream(request("model-haiku-4-5")).finalMessage();
    expect(message.stop_reason).toBe("end_turn");
    expect(p.t.upstream.messageRequests().length - anthropicBefore).toBe(1);
    await expectChargedOnce(
      rowsBefore,
      "model-haiku-4-5",
      { input: message.usage.input_tokens, output: message.usage.output_tokens },
      "anthropic",
    );
  });

  it("a Bedrock exception frame after content ends the stream with it: no second attempt, charged for what was delivered", async () => {
    p.bedrockFault((r) =>
      r.stream
        ? {
            kind: "stream-exception",
            afterEvents: 4,
            exceptionType: "serviceUnavailableException",
            message: "Bedrock is unable to process your request.",
          }
        : undefined,
    );
    const rowsBefore = (await p.t.usage()).length;
    const anthropicBefore = p.t.upstream.messageRequests().length;
    const stream = client.messages.stream(request("model-haiku-4-5"));
    let input = -1;
    const texts: string[] = [];
    stream.on("streamEvent", (event) => {
      if (event.type === "message_start") input = event.message.usage.input_tokens;
    });
    stream.on("text", (text) => texts.push(text));
    await expect(stream.finalMessage()).rejects.toMatchObject({
      error: { error: { type: "overloaded_error" } },
    });
    expect(texts.length).toBeGreaterThan(0);
    expect(p.t.upstream.messageRequests().length).toBe(anthropicBefore);
    const rows = await p.settledRows(rowsBefore + 1);
    expect(rows).toHaveLength(rowsBefore + 1);
    expect(rows[0]!.status).toBe(HoldStatus.SETTLED);
    // One word per text delta, one token per word (dev-upstream.ts).
    expect(rows[0]!.amount).toBe(expectedCharge("model-haiku-4-5", { input, output: texts.length }));
    expect(p.endpointOf(rows[0]!.requestId)).toBe("bedrock");
  });
});
