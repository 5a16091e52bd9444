import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import {
  type CountTokensResponse,
  type CreateMessageResponse,
  InferenceService,
  type ListModelsResponse,
} from "../../src/gen/tollgate/inference/v1/inference_pb.js";
import { grpcClient, serverStream, unary } from "../helpers/grpc.js";
import { expectedCharge, startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

// InferenceService called directly over gRPC (grpc-js, the core port) is billed like REST.

const body = (extra: Record<string, unknown> = {}) =>
  Buffer.from(
    JSON.stringify({
      model: "model-haiku-4-5",
      max_tokens: 100,
      messages: [{ role: "user", content: "Hello from an internal team" }],
      ...extra,
    }),
  );

describe("InferenceService over a real grpc-js client", () => {
  let t: TextGateway;
  let client: grpc.Client;

  beforeAll(async () => {
    t = await startTextGateway();
    await t.credit(5_000_000n);
    client = grpcClient(InferenceService, t.gateway.coreUrl);
  });
  afterAll(async () => {
    client?.close();
    t.expectSoundLedger();
    await t.close();
  });

  it("bills a gRPC call exactly as the same REST call", async () => {
    const parts = await serverStream<CreateMessageResponse>(
      client,
      "CreateMessage",
      { body: body() },
      {
        "x-api-key": t.secret,
      },
    );
    expect(parts.map((p) => p.part.case)).toEqual(["head", "message", "settled"]);
    const head = parts[0]!.part.value as { billingChain: string; requestId: string; model: string };
    expect(head).toMatchObject({ billingChain: "base", model: "model-haiku-4-5" });
    const message = JSON.parse(Buffer.from(parts[1]!.part.value as Uint8Array).toString());
    const [grpcRow] = await t.usage();
    expect(grpcRow).toMatchObject({ status: HoldStatus.SETTLED, requestId: head.requestId });
    const charge = expectedCharge("model-haiku-4-5", {
      input: message.usage.input_tokens,
      output: message.usage.output_tokens,
    });
    expect(grpcRow!.amount).toBe(charge);
    // The last part tells the caller what the ledger charged.
    expect((parts[2]!.part.value as { charge: bigint }).charge).toBe(charge);

    const rest = await fetch(`${t.baseUrl}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": t.secret },
      body: body(),
    });
    expect(rest.status).toBe(200);
    const [restRow] = await t.usage();
    expect(restRow!.requestId).toBe(rest.headers.get("x-request-id"));
    expect(restRow!.amount).toBe(grpcRow!.amount);
    expect(restRow!.usage).toEqual(grpcRow!.usage);
  });

  it("streams events over gRPC, each as the upstream framed it", async () => {
    const parts = await serverStream<CreateMessageResponse>(
      client,
      "CreateMessage",
      { body: body({ stream: true }) },
      { "x-api-key": t.secret },
    );
    expect(parts[0]!.part.case).toBe("head");
    const settled = parts.at(-1)!.part;
    expect(settled.case).toBe("settled");
    const events = parts.slice(1, -1).map((p) => (p.part.value as { event: string }).event);
    expect(events[0]).toBe("message_start");
    expect(events.at(-1)).toBe("message_stop");
    const [row] = await t.usage();
    expect(row?.status).toBe(HoldStatus.SETTLED);
    expect(row!.amount).toBeGreaterThan(0n);
    expect((settled.value as { charge: bigint }).charge).toBe(row!.amount);
  });

  it("a cancelled stream aborts the upstream and is settled, never left pending", async () => {
    const words = Array.from({ length: 30 }, (_, i) => `w${i}`);
    t.script(() => ({
      kind: "stream",
      events: [
        {
          event: "message_start",
          data: {
            type: "message_start",
            message: {
              id: "msg_c",
              type: "message",
              role: "assistant",
              content: [],
              usage: { input_tokens: 12, output_tokens: 1 },
            },
          },
        },
        {
          event: "content_block_start",
          data: { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
        },
        ...words.map((w) => ({
          event: "content_block_delta",
          data: { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: ` ${w}` } },
          delayMs: 40,
        })),
      ],
    }));
    const aborted = t.upstream.abortedStreams;
    let deltas = 0;
    try {
      await serverStream<CreateMessageResponse>(
        client,
        "CreateMessage",
        { body: body({ stream: true }) },
        { "x-api-key": t.secret },
        (response, call) => {
          if ((response.part.value as { event?: string }).event === "content_block_delta" && ++deltas === 3)
            call.cancel();
        },
      );
    } finally {
      t.script(undefined);
    }
    let row = (await t.usage())[0]!;
    for (let i = 0; i < 100 && row.status === HoldStatus.PENDING; i++) {
      await new Promise((r) => setTimeout(r, 20));
      row = (await t.usage())[0]!;
    }
    expect(row.status).toBe(HoldStatus.SETTLED);
    expect(row.usage?.inputTokens).toBe(12n);
    // At least what the client read, and nowhere near the 30 words the upstream would have sent.
    expect(row.usage!.outputTokens).toBeGreaterThanOrEqual(3n);
    expect(row.usage!.outputTokens).toBeLessThan(10n);
    expect(t.upstream.abortedStreams).toBe(aborted + 1);
  });

  it("refuses a call without a key, and a request id used twice", async () => {
    await expect(serverStream(client, "CreateMessage", { body: body() })).rejects.toMatchObject({
      code: grpc.status.UNAUTHENTICATED,
    });
    const headers = { "x-api-key": t.secret, "x-request-id": "req_internal_once" };
    await serverStream(client, "CreateMessage", { body: body() }, headers);
    const calls = t.upstream.requests.length;
    await expect(serverStream(client, "CreateMessage", { body: body() }, headers)).rejects.toMatchObject({
      code: grpc.status.ALREADY_EXISTS,
    });
    expect(t.upstream.requests.length).toBe(calls);
  });

  it("counts tokens and lists models", async () => {
    const count = await unary<CountTokensResponse>(
      client,
      "CountTokens",
      { body: body() },
      { "x-api-key": t.secret },
    );
    expect(count.inputTokens).toBeGreaterThan(0n);
    const models = await unary<ListModelsResponse>(client, "ListModels", {});
    expect(models.models.map((m) => m.id)).toContain("model-sonnet-5");
    expect(models.models.find((m) => m.id === "model-haiku-4-5")?.maxTokens).toBe(64_000n);
  });
});
