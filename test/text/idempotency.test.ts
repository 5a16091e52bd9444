import { setTimeout as sleep } from "node:timers/promises";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { ScriptedEvent } from "../../src/dev/provider/dev-upstream.js";
import {
  type CreateMessageResponse,
  InferenceService,
  type MessageHead,
} from "../../src/gen/tollgate/inference/v1/inference_pb.js";
import { accountWithKey } from "../helpers/app.js";
import { grpcClient, serverStream } from "../helpers/grpc.js";
import { smallPng } from "../helpers/image-fixtures.js";
import { startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

// Idempotency-Key on the billed routes, end to end: real sockets, the SQLite store, the official
// SDKs, and the dev upstream behind the gateway.

let t: TextGateway;

beforeAll(async () => {
  t = await startTextGateway((upstream) => ({ TOLLGATE_GEMINI_URL: upstream }));
  await t.credit(10_000_000n);
});
afterAll(async () => {
  await t?.close();
});
beforeEach(() => {
  t.script(undefined);
});

let serial = 0;
/** A request no other test sends (the key and the body both unique to the test). */
function fresh(extra: Record<string, unknown> = {}) {
  serial += 1;
  return {
    key: `test-key-${serial}-${Date.now()}`,
    body: {
      model: "model-haiku-4-5",
      max_tokens: 50,
      messages: [{ role: "user", content: `Request ${serial}` }],
      ...extra,
    },
  };
}

function post(body: unknown, key: string | undefined, secret = t.secret, signal?: AbortSignal) {
  return fetch(`${t.baseUrl}/v1/messages`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      "x-api-key": secret,
      "anthropic-version": "2023-06-01",
      ...(key === undefined ? {} : { "idempotency-key": key }),
    },
    body: typeof body === "string" ? body : JSON.stringify(body),
    signal,
  });
}

/** Upstream message requests whose body contains `marker`. */
function sent(marker: string) {
  return t.upstream.messageRequests().filter((r) => r.rawBody.includes(marker)).length;
}

/** Usage rows (one per hold) of `accountId`. */
async function holds(accountId = t.accountId) {
  return (await t.usage(accountId)).length;
}

/** A stream held open `delayMs` before its end, so that a duplicate arrives while it runs. */
function slowStream(delayMs: number): ScriptedEvent[] {
  return [
    {
      event: "message_start",
      data: {
        type: "message_start",
        message: {
          id: "msg_slow",
          type: "message",
          role: "assistant",
          model: "claude-haiku-4-5-20251001",
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: 12, output_tokens: 1 },
        },
      },
    },
    {
      event: "content_block_start",
      data: { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
    },
    {
      event: "content_block_delta",
      data: { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "slow answer" } },
      delayMs,
    },
    { event: "content_block_stop", data: { type: "content_block_stop", index: 0 } },
    {
      event: "message_delta",
      data: {
        type: "message_delta",
        delta: { stop_reason: "end_turn", stop_sequence: null },
        usage: { output_tokens: 3 },
      },
    },
    { event: "message_stop", data: { type: "message_stop" } },
  ];
}

/** Waits until the upstream has received `count` requests carrying `marker`. */
async function untilSent(marker: string, count = 1) {
  for (let i = 0; i < 500 && sent(marker) < count; i++) await sleep(10);
  expect(sent(marker)).toBe(count);
}

describe("Idempotency-Key on /v1/messages", () => {
  it("answers a retry with the first call's answer, billed once", async () => {
    const { key, body } = fresh();
    const before = await t.available();
    const first = await post(body, key);
    expect(first.status).toBe(200);
    const firstText = await first.text();
    const afterFirst = await t.available();
    expect(afterFirst).toBeLessThan(before);

    const retry = await post(body, key);
    expect(retry.status).toBe(200);
    expect(await retry.text()).toBe(firstText);
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
    expect(first.headers.get("idempotent-replayed")).toBeNull();
    for (const name of ["content-type", "x-gateway-billing-chain", "anthropic-ratelimit-requests-limit"])
      expect(retry.headers.get(name)).toBe(first.headers.get(name));
    expect(retry.headers.get("x-request-id")).not.toBe(first.headers.get("x-request-id"));

    expect(sent(body.messages[0]!.content)).toBe(1);
    expect(await t.available()).toBe(afterFirst);
    t.expectSoundLedger();
  });

  it("refuses the same key with another body with a 422, charging and forwarding nothing", async () => {
    const { key, body } = fresh();
    expect((await post(body, key)).status).toBe(200);
    const rows = await holds();
    const other = { ...body, max_tokens: 51 };
    const refused = await post(other, key);
    expect(refused.status).toBe(422);
    expect(refused.headers.get("x-request-id")).toBeTruthy();
    const error = (await refused.json()) as { type: string; error: { type: string; message: string } };
    expect(error.type).toBe("error");
    expect(error.error.type).toBe("invalid_request_error");
    expect(error.error.message).toMatch(/Idempotency-Key was used with a different request/);
    // Bytes, not meaning: the same JSON spaced differently is another body.
    expect((await post(JSON.stringify(body, null, 1), key)).status).toBe(422);
    expect(sent(body.messages[0]!.content)).toBe(1);
    expect(await holds()).toBe(rows);
    t.expectSoundLedger();
  });

  it("refuses a malformed key with a 400 naming it, before anything is held or forwarded", async () => {
    const rows = await holds();
    for (const key of ["x".repeat(256), "é-key", "tab\tkey"]) {
      const { body } = fresh();
      const refused = await post(body, key).catch(() => undefined);
      // fetch itself refuses some header values (é): nothing to check at the gateway then.
      if (refused === undefined) continue;
      expect(refused.status, key).toBe(400);
      const error = (await refused.json()) as { error: { type: string; message: string } };
      expect(error.error.type).toBe("invalid_request_error");
      expect(error.error.message).toMatch(/Idempotency-Key must be 1 to 255 printable ASCII/);
      expect(sent(body.messages[0]!.content)).toBe(0);
    }
    const { key, body } = fresh();
    expect((await post(body, `${key}-${"k".repeat(255 - key.length - 1)}`)).status).toBe(200);
    expect(await holds()).toBe(rows + 1);
  });

  it("answers a duplicate with a 409 while the first call runs, then replays it", async () => {
    const { key, body } = fresh({ stream: true });
    const marker = body.messages[0]!.content;
    t.script((request) =>
      request.rawBody.includes(marker) ? { kind: "stream", events: slowStream(1_500) } : undefined,
    );
    const first = post(body, key);
    await untilSent(marker);
    const duplicate = await post(body, key);
    expect(duplicate.status).toBe(409);
    const error = (await duplicate.json()) as { error: { type: string; message: string } };
    expect(error.error.type).toBe("conflict_error");
    expect(error.error.message).toMatch(/still running/);

    const firstText = await (await first).text();
    expect(firstText).toContain("slow answer");
    const replay = await post(body, key);
    expect(replay.status).toBe(200);
    expect(replay.headers.get("content-type")).toMatch(/^text\/event-stream/);
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    // The same events (the first stream's pings are keep-alives, not kept).
    const withoutPings = (text: string) =>
      text.split("\n\n").filter((frame) => !frame.startsWith("event: ping"));
    expect(withoutPings(await replay.text())).toEqual(withoutPings(firstText));
    expect(sent(marker)).toBe(1);
    t.expectSoundLedger();
  });

  it("replays a stream its client cut short as delivered, ending with an error saying so", async () => {
    const { key, body } = fresh({ stream: true });
    const marker = body.messages[0]!.content;
    t.script((request) =>
      request.rawBody.includes(marker) ? { kind: "stream", events: slowStream(5_000) } : undefined,
    );
    const rows = await holds();
    const abort = new AbortController();
    const first = await post(body, key, t.secret, abort.signal);
    const reader = first.body!.getReader();
    let received = "";
    while (!received.includes("content_block_start")) {
      const { value } = await reader.read();
      received += Buffer.from(value!).toString();
    }
    abort.abort();
    // The cut call settles (input plus what was delivered) and keeps what it delivered.
    let replay = await post(body, key);
    for (let i = 0; i < 200 && replay.status === 409; i++) {
      await sleep(20);
      replay = await post(body, key);
    }
    expect(replay.status).toBe(200);
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    const events = [...(await replay.text()).matchAll(/^event: (\w+)$/gm)].map((m) => m[1]);
    expect(events.slice(0, 2)).toEqual(["message_start", "content_block_start"]);
    expect(events).not.toContain("message_stop");
    expect(events.at(-1)).toBe("error");
    expect(sent(marker)).toBe(1);
    expect(await holds()).toBe(rows + 1);
    t.expectSoundLedger();
  });

  it("lets exactly one of many concurrent duplicates run", async () => {
    const { key, body } = fresh({ stream: true });
    const marker = body.messages[0]!.content;
    t.script((request) =>
      request.rawBody.includes(marker) ? { kind: "stream", events: slowStream(500) } : undefined,
    );
    const rows = await holds();
    const answers = await Promise.all(
      Array.from({ length: 16 }, async () => {
        const response = await post(body, key);
        await response.text();
        // A duplicate that came late (a loaded machine) gets the replay: never a second run.
        return response.headers.get("idempotent-replayed") === "true" ? "replayed" : response.status;
      }),
    );
    expect(answers.filter((status) => status === 200)).toHaveLength(1);
    expect(answers.filter((status) => status === 409 || status === "replayed")).toHaveLength(15);
    expect(sent(marker)).toBe(1);
    expect(await holds()).toBe(rows + 1);
    t.expectSoundLedger();
  });

  it("frees the key of a call that failed without a charge, so a retry runs afresh", async () => {
    const { key, body } = fresh();
    const marker = body.messages[0]!.content;
    t.script((request) =>
      request.rawBody.includes(marker)
        ? {
            kind: "json",
            status: 500,
            body: { type: "error", error: { type: "api_error", message: "boom" } },
          }
        : undefined,
    );
    const available = await t.available();
    expect((await post(body, key)).status).toBe(502);
    expect(await t.available()).toBe(available);
    t.script(undefined);
    const retry = await post(body, key);
    expect(retry.status).toBe(200);
    expect(retry.headers.get("idempotent-replayed")).toBeNull();
    expect(sent(marker)).toBe(2);
    // Refused before any hold (bad input) frees it too.
    const { key: badKey } = fresh();
    expect((await post({ ...body, max_tokens: "many" }, badKey)).status).toBe(400);
    expect((await post(body, badKey)).status).toBe(200);
    t.expectSoundLedger();
  });

  it("scopes keys to the account: two accounts' equal keys never meet", async () => {
    const other = await accountWithKey(t.gateway.operator, "other");
    await t.credit(1_000_000n, "base", other.accountId);
    const { key, body } = fresh();
    const mine = await post(body, key);
    const theirs = await post(body, key, other.secret);
    expect(mine.status).toBe(200);
    expect(theirs.status).toBe(200);
    expect(theirs.headers.get("idempotent-replayed")).toBeNull();
    expect(sent(body.messages[0]!.content)).toBe(2);
    expect(await holds(other.accountId)).toBe(1);
    t.expectSoundLedger();
  });

  it("works with the Anthropic SDK: a retried 409 ends with the first call's message", async () => {
    const { key, body } = fresh();
    const marker = body.messages[0]!.content;
    t.script((request) =>
      request.rawBody.includes(marker)
        ? {
            kind: "raw",
            headers: { "content-type": "application/json" },
            chunks: [
              "",
              JSON.stringify({
                id: "msg_sdk",
                type: "message",
                role: "assistant",
                model: "claude-haiku-4-5-20251001",
                content: [{ type: "text", text: "first answer" }],
                stop_reason: "end_turn",
                stop_sequence: null,
                usage: { input_tokens: 10, output_tokens: 2 },
              }),
            ],
            chunkDelayMs: 800,
          }
        : undefined,
    );
    const client = new Anthropic({ apiKey: t.secret, baseURL: t.baseUrl, maxRetries: 6 });
    const first = post(body, key);
    await untilSent(marker);
    // The SDK sends JSON.stringify of the params: the same bytes as the first call.
    const { data, response } = await client.messages
      .create(body as Anthropic.MessageCreateParamsNonStreaming, { headers: { "idempotency-key": key } })
      .withResponse();
    expect((await first).status).toBe(200);
    expect(data.content).toEqual([{ type: "text", text: "first answer" }]);
    expect(response.headers.get("idempotent-replayed")).toBe("true");
    expect(sent(marker)).toBe(1);
    t.expectSoundLedger();
  });
});

describe("idempotency_key over gRPC", () => {
  it("replays CreateMessage with its head marked replayed, billed once", async () => {
    const client = grpcClient(InferenceService, t.gateway.coreUrl);
    try {
      const { key, body } = fresh();
      const call = () =>
        serverStream<CreateMessageResponse>(
          client,
          "CreateMessage",
          { body: Buffer.from(JSON.stringify(body)), idempotencyKey: key },
          { "x-api-key": t.secret },
        );
      const first = await call();
      const retry = await call();
      expect(first.map((p) => p.part.case)).toEqual(["head", "message", "settled"]);
      expect(retry.map((p) => p.part.case)).toEqual(["head", "message", "settled"]);
      // The first call says what it was charged; the retry, billed nothing, says 0.
      const charge = (parts: CreateMessageResponse[]) => (parts[2]!.part.value as { charge: bigint }).charge;
      expect(charge(first)).toBeGreaterThan(0n);
      expect(charge(retry)).toBe(0n);
      const head = (parts: CreateMessageResponse[]) => parts[0]!.part.value as MessageHead;
      expect(head(first).replayed).toBe(false);
      expect(head(retry).replayed).toBe(true);
      expect(head(retry).requestId).toBe(head(first).requestId);
      expect(retry[1]!.part.value).toEqual(first[1]!.part.value);
      expect(sent(body.messages[0]!.content)).toBe(1);
      t.expectSoundLedger();
    } finally {
      client.close();
    }
  });
});

describe("Idempotency-Key on /v1/images", () => {
  it("replays a generation with the openai SDK, billed once; another prompt is a 422", async () => {
    const client = new OpenAI({ apiKey: t.secret, baseURL: `${t.baseUrl}/v1`, maxRetries: 0 });
    const key = `image-key-${Date.now()}`;
    const request = { model: "image-2", prompt: `a red circle ${key}` };
    const images = () => t.upstream.requests.filter((r) => r.rawBody.includes(key)).length;
    const before = await t.available();
    const first = await client.images
      .generate(request, { headers: { "idempotency-key": key } })
      .withResponse();
    const charged = before - (await t.available());
    expect(charged).toBeGreaterThan(0n);
    const retry = await client.images
      .generate(request, { headers: { "idempotency-key": key } })
      .withResponse();
    expect(retry.data).toEqual(first.data);
    expect(retry.response.headers.get("idempotent-replayed")).toBe("true");
    expect(images()).toBe(1);
    expect(before - (await t.available())).toBe(charged);

    const refused = await client.images
      .generate({ ...request, prompt: "another" }, { headers: { "idempotency-key": key } })
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(OpenAI.APIError);
    expect((refused as InstanceType<typeof OpenAI.APIError>).status).toBe(422);
    expect(images()).toBe(1);
    t.expectSoundLedger();
  });

  it("answers a duplicate edit with a 409 while it runs; a cancelled call frees its key", async () => {
    const key = `edit-key-${Date.now()}`;
    t.script((request) => (request.rawBody.includes(key) ? { kind: "hang" } : undefined));
    const form = () => {
      const data = new FormData();
      data.set("model", "image-2");
      data.set("prompt", `make it blue ${key}`);
      data.set("image", new Blob([smallPng()], { type: "image/png" }), "in.png");
      return data;
    };
    const edit = (signal?: AbortSignal) =>
      fetch(`${t.baseUrl}/v1/images/edits`, {
        method: "POST",
        headers: { authorization: `Bearer ${t.secret}`, "idempotency-key": key },
        body: form(),
        signal,
      });
    const abort = new AbortController();
    const first = edit(abort.signal).catch(() => undefined);
    for (let i = 0; i < 500 && !t.upstream.requests.some((r) => r.rawBody.includes(key)); i++)
      await sleep(10);
    const duplicate = await edit();
    expect(duplicate.status).toBe(409);
    const error = (await duplicate.json()) as { error: { message: string } };
    expect(error.error.message).toMatch(/still running/);
    abort.abort();
    await first;
    t.script(undefined);
    // The cancelled call charged nothing and freed the key (its release follows the abort).
    let retry = await edit();
    for (let i = 0; i < 100 && retry.status === 409; i++) {
      await sleep(20);
      retry = await edit();
    }
    expect(retry.status).toBe(200);
    expect(retry.headers.get("idempotent-replayed")).toBeNull();
    t.expectSoundLedger();
  });
});
