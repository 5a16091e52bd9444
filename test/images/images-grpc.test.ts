import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import {
  type EditImageResponse,
  type GenerateImageResponse,
  type GetStoredImageResponse,
  ImageResponseFormat,
  InferenceService,
} from "../../src/gen/tollgate/inference/v1/inference_pb.js";
import { grpcClient, unary } from "../helpers/grpc.js";
import { pngSize, smallPng } from "../helpers/image-fixtures.js";
import { startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

// The image RPCs called directly on the core port with grpc-js, billed like the REST routes.

let t: TextGateway;
let client: grpc.Client;

beforeAll(async () => {
  t = await startTextGateway((upstream) => ({ TOLLGATE_GEMINI_URL: upstream }));
  await t.credit(1_000_000n);
  client = grpcClient(InferenceService, t.gateway.coreUrl);
});
afterAll(async () => {
  client?.close();
  await t?.close();
});

describe("image RPCs over grpc-js", () => {
  it("edits with 14 references of 1 MiB each (far above gRPC's usual 4 MiB) and bills it", async () => {
    const reference = Buffer.concat([smallPng(), Buffer.alloc(1024 * 1024)]);
    const response = await unary<EditImageResponse>(
      client,
      "EditImage",
      {
        model: "image-pro",
        prompt: "a mosaic",
        size: "2K",
        aspectRatio: "9:16",
        images: Array.from({ length: 14 }, (_, i) => ({ data: reference, filename: `${i}.png` })),
      },
      { "x-api-key": t.secret },
    );
    const result = response.result!;
    expect(result).toMatchObject({
      model: "image-pro",
      size: "2K",
      aspectRatio: "9:16",
      billingChain: "base",
    });
    const image = result.images[0]!;
    expect(image.result.case).toBe("data");
    expect(pngSize(Buffer.from(image.result.value as Uint8Array))).toEqual({ width: 1536, height: 2752 });
    const sent = t.upstream.requests.at(-1)?.body as { contents: { parts: unknown[] }[] };
    expect(sent.contents[0]?.parts).toHaveLength(15);
    expect((await t.usage())[0]).toMatchObject({
      requestId: result.requestId,
      status: HoldStatus.SETTLED,
      amount: 134_000n,
    });
    // The result says what the ledger charged.
    expect(result.charge).toBe(134_000n);
    t.expectSoundLedger();
  });

  it("a retry with the same idempotency key gets the kept result, charged 0, billed once", async () => {
    const call = () =>
      unary<GenerateImageResponse>(
        client,
        "GenerateImage",
        { model: "image-pro", prompt: "a receipt", size: "1K", idempotencyKey: "grpc-image-once" },
        { "x-api-key": t.secret },
      );
    const first = (await call()).result!;
    const retry = (await call()).result!;
    const [row] = await t.usage();
    expect(row).toMatchObject({ requestId: first.requestId, status: HoldStatus.SETTLED });
    expect(first).toMatchObject({ replayed: false, charge: row!.amount });
    expect(retry).toMatchObject({ replayed: true, charge: 0n, requestId: first.requestId });
    expect((await t.usage()).filter((r) => r.requestId === first.requestId)).toHaveLength(1);
    t.expectSoundLedger();
  });

  it("stores a url image, served by token to anyone holding it, until it is gone", async () => {
    const response = await unary<GenerateImageResponse>(
      client,
      "GenerateImage",
      { model: "image-2", prompt: "kept", responseFormat: ImageResponseFormat.URL },
      { "x-api-key": t.secret },
    );
    const image = response.result!.images[0]!;
    expect(image.result.case).toBe("urlToken");
    expect(image.expiresAt).toBeDefined();
    const stored = await unary<GetStoredImageResponse>(client, "GetStoredImage", {
      token: image.result.value,
    });
    expect(stored.mimeType).toBe("image/png");
    expect(pngSize(Buffer.from(stored.data))).toEqual({ width: 1024, height: 1024 });
    const missing = await unary(client, "GetStoredImage", { token: "x".repeat(43) }).catch((e) => e);
    expect((missing as grpc.ServiceError).code).toBe(grpc.status.NOT_FOUND);
  });

  it("refuses anonymous image calls and bad fields with their codes", async () => {
    const anonymous = await unary(client, "GenerateImage", { model: "image-2", prompt: "x" }).catch((e) => e);
    expect((anonymous as grpc.ServiceError).code).toBe(grpc.status.UNAUTHENTICATED);
    const bad = await unary(
      client,
      "GenerateImage",
      { model: "image-2", prompt: "x", aspectRatio: "2:1" },
      { "x-api-key": t.secret },
    ).catch((e) => e);
    expect((bad as grpc.ServiceError).code).toBe(grpc.status.INVALID_ARGUMENT);
    expect((bad as grpc.ServiceError).details).toContain("aspect_ratio");
  });
});
