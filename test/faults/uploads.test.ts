/**
 * Uploads and bodies the gateway must refuse cleanly (issue 18), against a real gateway with the
 * dev upstream behind it: a broken multipart form or a content type a route does not read is a
 * 4xx in the route's own envelope with a request id, never a 5xx, and nothing is held, charged
 * or forwarded; a body over a limit gets its 413 as soon as the limit is known, and the client
 * really reads it — through the official SDKs (no retry) and on a raw socket that keeps sending.
 */
import { once } from "node:events";
import { connect, type Socket } from "node:net";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DRAIN_LIMITS } from "../../src/facade/request-body.js";
import { smallPng } from "../helpers/image-fixtures.js";
import { startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

const MiB = 1024 * 1024;
/** The shipped limits: 10 MiB per image, 50 MiB per edits request, 32 MiB per JSON body, 1 MiB per generations body. */
const LIMITS = { file: 10 * MiB, edits: 50 * MiB, messages: 32 * MiB, generations: 1 * MiB };

let t: TextGateway;
/** Requests the gateway's HTTP server has received (a retry would be a second one). */
let received = 0;

beforeAll(async () => {
  t = await startTextGateway((upstream) => ({ TOLLGATE_GEMINI_URL: upstream }));
  await t.credit(10_000_000n);
  t.gateway.app.facade!.server.on("request", () => {
    received++;
  });
});
afterAll(async () => {
  await t?.close();
});

/** What a refused request must leave as it was: the provider's requests and the ledger's rows. */
async function snapshot() {
  return { forwarded: t.upstream.requests.length, rows: (await t.usage()).length, received };
}
async function expectNothingHappened(before: Awaited<ReturnType<typeof snapshot>>) {
  expect(t.upstream.requests.length).toBe(before.forwarded);
  expect((await t.usage()).length).toBe(before.rows);
  t.expectSoundLedger();
}

/** The gateway still answers its health route, a billed text call and a billed image edit. */
async function expectHealthy() {
  expect((await fetch(`${t.baseUrl}/v1/health`)).status).toBe(200);
  const anthropic = new Anthropic({ apiKey: t.secret, baseURL: t.baseUrl, maxRetries: 0 });
  const message = await anthropic.messages.create({
    model: "model-haiku-4-5",
    max_tokens: 16,
    messages: [{ role: "user", content: "still there?" }],
  });
  expect(message.type).toBe("message");
  const openai = new OpenAI({ apiKey: t.secret, baseURL: `${t.baseUrl}/v1`, maxRetries: 0 });
  const edit = await openai.images.edit({
    model: "image-2",
    prompt: "still there?",
    image: await toFile(smallPng(), "ok.png"),
  });
  expect(edit.data).toHaveLength(1);
  t.expectSoundLedger();
}

// ---- multipart forms, built by hand ----

const BOUNDARY = "tollgate-test-boundary";

/** One form part; `name` undefined leaves `name=` out of its Content-Disposition. */
function part(
  name: string | undefined,
  value: string | Buffer,
  options: { filename?: string; type?: string } = {},
): Buffer {
  const disposition = [
    "form-data",
    ...(name === undefined ? [] : [`name="${name}"`]),
    ...(options.filename === undefined ? [] : [`filename="${options.filename}"`]),
  ].join("; ");
  const type = options.type === undefined ? "" : `Content-Type: ${options.type}\r\n`;
  return Buffer.concat([
    Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: ${disposition}\r\n${type}\r\n`),
    Buffer.from(value),
    Buffer.from("\r\n"),
  ]);
}
const CLOSE = Buffer.from(`--${BOUNDARY}--\r\n`);
const MODEL = part("model", "image-2");
const PROMPT = part("prompt", "make it blue");
const IMAGE = part("image", smallPng(), { filename: "a.png", type: "image/png" });
const VALID_FORM = Buffer.concat([MODEL, PROMPT, IMAGE, CLOSE]);
const MULTIPART = `multipart/form-data; boundary=${BOUNDARY}`;

async function post(path: string, contentType: string | undefined, body: Buffer) {
  const headers: Record<string, string> = { authorization: `Bearer ${t.secret}` };
  if (contentType !== undefined) headers["content-type"] = contentType;
  return fetch(`${t.baseUrl}${path}`, { method: "POST", headers, body });
}

describe("broken multipart forms on /v1/images/edits", () => {
  it("takes the valid form these cases are made from", async () => {
    const response = await post("/v1/images/edits", MULTIPART, VALID_FORM);
    expect(response.status).toBe(200);
  });

  it.each<[string, string, Buffer, string, RegExp]>([
    [
      "a body truncated inside the image",
      MULTIPART,
      VALID_FORM.subarray(0, MODEL.length + PROMPT.length + 120),
      "body",
      /^The form is truncated: the body ended before its closing boundary\.$/,
    ],
    [
      "a body truncated before its closing boundary",
      MULTIPART,
      Buffer.concat([MODEL, PROMPT, IMAGE]),
      "body",
      /^The form is truncated/,
    ],
    [
      "no boundary parameter",
      "multipart/form-data",
      VALID_FORM,
      "body",
      /^Content-Type multipart\/form-data has no boundary parameter/,
    ],
    [
      "a boundary the body does not use",
      "multipart/form-data; boundary=another-boundary",
      VALID_FORM,
      "body",
      /the body does not use the boundary given in Content-Type/,
    ],
    [
      "a boundary longer than busboy takes",
      `multipart/form-data; boundary=${"b".repeat(300)}`,
      VALID_FORM,
      "body",
      /^The boundary in Content-Type is too long\.$/,
    ],
    [
      "a first part whose headers never end",
      MULTIPART,
      Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="model"\r\n`),
      "body",
      /^The form ended before its first part was complete/,
    ],
    [
      "a part without a name",
      MULTIPART,
      Buffer.concat([part(undefined, "x"), VALID_FORM]),
      "body",
      /^A form part has no name: each part's Content-Disposition needs name=/,
    ],
    [
      "a file part without a name",
      MULTIPART,
      Buffer.concat([part(undefined, smallPng(), { filename: "b.png" }), VALID_FORM]),
      "body",
      /^A form part has no name/,
    ],
    [
      "a part with an empty name",
      MULTIPART,
      Buffer.concat([part("", "x"), VALID_FORM]),
      "body",
      /^A form part has an empty name/,
    ],
    [
      "a file where a text field is expected",
      MULTIPART,
      Buffer.concat([MODEL, part("prompt", "make it blue", { filename: "prompt.txt" }), IMAGE, CLOSE]),
      "prompt",
      /^prompt must be a text field, not a file\.$/,
    ],
    [
      "text where an image file is expected",
      MULTIPART,
      Buffer.concat([MODEL, PROMPT, part("image", "not an image"), CLOSE]),
      "image",
      /^Image image 1 is not a PNG, JPEG or WebP image/,
    ],
    [
      "a field named __proto__",
      MULTIPART,
      Buffer.concat([part("__proto__", "x"), VALID_FORM]),
      "body",
      /named after a built-in property/,
    ],
    [
      "a field declared as JSON that is not",
      MULTIPART,
      Buffer.concat([MODEL, part("prompt", "{not json", { type: "application/json" }), IMAGE, CLOSE]),
      "body",
      /declared as application\/json is not valid JSON/,
    ],
    [
      "a field declared as JSON that is",
      MULTIPART,
      Buffer.concat([MODEL, part("prompt", '{"a":1}', { type: "application/json" }), IMAGE, CLOSE]),
      "prompt",
      /^prompt must be plain text, not application\/json\.$/,
    ],
  ])(
    "refuses %s with a 400 naming it: nothing held or forwarded",
    async (_case, type, body, param, message) => {
      const before = await snapshot();
      const response = await post("/v1/images/edits", type, body);
      expect(response.status).toBe(400);
      expect(response.headers.get("x-request-id")).toMatch(/^req_/);
      const { error } = (await response.json()) as {
        error: { type: string; message: string; param: string | null; code: string | null };
      };
      expect(error.type).toBe("invalid_request_error");
      expect(error.param).toBe(param);
      expect(error.code).toBe("invalid_field");
      expect(error.message).toMatch(message);
      await expectNothingHappened(before);
    },
  );
});

describe("content types a route does not read", () => {
  it.each<[string, string | undefined, Buffer, RegExp]>([
    [
      "/v1/images/edits",
      "application/json",
      Buffer.from('{"model":"image-2"}'),
      /takes multipart\/form-data; got Content-Type "application\/json"/,
    ],
    [
      "/v1/images/edits",
      "application/x-www-form-urlencoded",
      Buffer.from("model=image-2"),
      /takes multipart\/form-data/,
    ],
    [
      "/v1/images/edits",
      undefined,
      Buffer.from("model=image-2"),
      /takes multipart\/form-data; got no Content-Type/,
    ],
    [
      "/v1/images/generations",
      MULTIPART,
      VALID_FORM,
      /takes application\/json; got Content-Type "multipart\/form-data/,
    ],
    [
      "/v1/images/generations",
      "application/x-www-form-urlencoded",
      Buffer.from("model=image-2"),
      /takes application\/json/,
    ],
    ["/v1/images/generations", "text/plain", Buffer.from('{"model":"image-2"}'), /takes application\/json/],
  ])(
    "POST %s with %s is a 415 in the OpenAI envelope naming both types",
    async (path, type, body, message) => {
      const before = await snapshot();
      const response = await post(path, type, body);
      expect(response.status).toBe(415);
      expect(response.headers.get("x-request-id")).toMatch(/^req_/);
      const { error } = (await response.json()) as { error: { type: string; message: string } };
      expect(error.type).toBe("invalid_request_error");
      expect(error.message).toMatch(message);
      await expectNothingHappened(before);
    },
  );

  it("POST /v1/messages with a multipart form is a 415 in the Anthropic envelope naming both types", async () => {
    const before = await snapshot();
    const response = await fetch(`${t.baseUrl}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": t.secret, "content-type": MULTIPART },
      body: VALID_FORM,
    });
    expect(response.status).toBe(415);
    const id = response.headers.get("x-request-id");
    expect(id).toMatch(/^req_/);
    expect(await response.json()).toEqual({
      type: "error",
      error: {
        type: "invalid_request_error",
        message: `POST /v1/messages takes application/json; got Content-Type "${MULTIPART}".`,
      },
      request_id: id,
    });
    await expectNothingHappened(before);
  });
});

// ---- raw sockets: an upload that keeps sending while the answer comes back ----

/** An HTTP/1.1 answer read off a raw socket. */
interface RawAnswer {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: string;
}

/**
 * One request on its own socket, written by the test at its own pace while the answer is read
 * as it arrives. The socket is half-open on our side: the server's close does not stop our
 * writes, so a reset (EPIPE, ECONNRESET) is the server's doing and shows up in `error`.
 */
class RawExchange {
  readonly socket: Socket;
  written = 0;
  error: NodeJS.ErrnoException | undefined;
  private received = Buffer.alloc(0);
  private readonly closed: Promise<void>;
  private readonly serverClosed: Promise<void>;

  constructor(head: string) {
    this.socket = connect({ port: Number(new URL(t.baseUrl).port), host: "127.0.0.1", allowHalfOpen: true });
    this.socket.on("data", (data: Buffer) => {
      this.received = Buffer.concat([this.received, data]);
    });
    this.socket.on("error", (error) => {
      this.error = error;
    });
    // Not `events.once`: it rejects when "error" comes first, and a reset is an outcome here.
    this.closed = new Promise((resolve) => this.socket.once("close", () => resolve()));
    const ended = new Promise<void>((resolve) => this.socket.once("end", () => resolve()));
    this.serverClosed = Promise.race([ended, this.closed]);
    this.socket.write(head);
  }

  /** Writes from `chunks` until `bytes` more body bytes are written or the source is done. */
  async send(chunks: Iterator<Buffer>, bytes: number, chunked: boolean): Promise<boolean> {
    const until = this.written + bytes;
    while (this.written < until) {
      const next = chunks.next();
      if (next.done) {
        if (chunked) await this.write(Buffer.from("0\r\n\r\n"));
        return true;
      }
      this.written += next.value.byteLength;
      const framed = chunked
        ? Buffer.concat([
            Buffer.from(`${next.value.byteLength.toString(16)}\r\n`),
            next.value,
            Buffer.from("\r\n"),
          ])
        : next.value;
      await this.write(framed);
    }
    return false;
  }

  /** The whole answer once it has arrived (its content-length says when), before `ms`. */
  async answer(ms = 15_000): Promise<RawAnswer> {
    const deadline = Date.now() + ms;
    for (;;) {
      const parsed = this.parse();
      if (parsed !== undefined) return parsed;
      if (Date.now() > deadline || this.socket.destroyed) {
        throw new Error(`no complete answer; got ${JSON.stringify(this.received.toString("latin1"))}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  /** Ends our side and waits for the socket to close; whether the server reset it is in `error`. */
  async finish(): Promise<void> {
    if (!this.socket.destroyed) this.socket.end();
    await this.closed;
  }

  /** Waits until the server has closed its side (a FIN or a reset). */
  async whenServerClosed(): Promise<void> {
    await this.serverClosed;
  }

  private async write(data: Buffer): Promise<void> {
    if (this.socket.destroyed || this.error !== undefined) throw this.error ?? new Error("socket closed");
    if (!this.socket.write(data)) await Promise.race([once(this.socket, "drain"), this.closed]);
  }

  private parse(): RawAnswer | undefined {
    const text = this.received.toString("latin1");
    const end = text.indexOf("\r\n\r\n");
    if (end < 0) return undefined;
    const [statusLine = "", ...lines] = text.slice(0, end).split("\r\n");
    const headers: Record<string, string> = {};
    for (const line of lines) {
      const colon = line.indexOf(":");
      headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
    }
    const body = this.received.subarray(end + 4);
    if (body.byteLength < Number(headers["content-length"] ?? 0)) return undefined;
    return { status: Number(statusLine.split(" ")[1]), headers, body: body.toString("utf8") };
  }
}

/** The head of a POST; `length` undefined sends it chunked. */
function head(path: string, contentType: string, length: number | undefined, auth = true): string {
  return (
    `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
    (auth ? `Authorization: Bearer ${t.secret}\r\nx-api-key: ${t.secret}\r\n` : "") +
    `Content-Type: ${contentType}\r\n` +
    (length === undefined ? "Transfer-Encoding: chunked\r\n" : `Content-Length: ${length}\r\n`) +
    "\r\n"
  );
}

/** A form of images of these sizes (each a real PNG start, then filler), in 256 KiB chunks. */
function* imageForm(sizes: readonly number[]): Generator<Buffer> {
  for (const [index, size] of sizes.entries()) {
    yield Buffer.concat([
      Buffer.from(
        `--${BOUNDARY}\r\nContent-Disposition: form-data; name="image[]"; filename="${index}.png"\r\n` +
          "Content-Type: image/png\r\n\r\n",
      ),
      smallPng(),
    ]);
    yield* filler(size - smallPng().byteLength);
    yield Buffer.from("\r\n");
  }
  yield CLOSE;
}
function imageFormLength(sizes: readonly number[]): number {
  return lengthOf(imageForm(sizes));
}
function lengthOf(chunks: Iterable<Buffer>): number {
  let total = 0;
  for (const chunk of chunks) total += chunk.byteLength;
  return total;
}

/** A messages body whose one prompt is `size` bytes, in 256 KiB chunks. */
function* messageBody(size: number): Generator<Buffer> {
  yield Buffer.from('{"model":"model-haiku-4-5","max_tokens":16,"messages":[{"role":"user","content":"');
  yield* filler(size);
  yield Buffer.from('"}]}');
}

function* filler(bytes: number, byte = 0x61): Generator<Buffer> {
  const chunk = Buffer.alloc(256 * 1024, byte);
  for (let left = bytes; left > 0; left -= chunk.byteLength)
    yield chunk.subarray(0, Math.min(left, chunk.byteLength));
}

/** A 413 as the gateway sends it: closing, not to be retried, in the route's envelope. */
function expect413(answer: RawAnswer, message: string) {
  expect(answer.status).toBe(413);
  expect(answer.headers.connection).toBe("close");
  expect(answer.headers["x-should-retry"]).toBe("false");
  expect(answer.headers["x-request-id"]).toMatch(/^req_/);
  const body = JSON.parse(answer.body) as Record<string, { type: string; message: string }>;
  expect(body.error).toMatchObject({ type: "request_too_large", message });
}

describe("a body over a limit gets its 413, and the client reads it", () => {
  it("openai SDK: images.edit with a 64 MiB image is one request answered 413, not retried", async () => {
    const before = await snapshot();
    const client = new OpenAI({ apiKey: t.secret, baseURL: `${t.baseUrl}/v1` }); // maxRetries: default (2)
    const big = Buffer.concat([smallPng(), Buffer.alloc(64 * MiB)]);
    const error = await client.images
      .edit({ model: "image-pro", prompt: "x", image: await toFile(big, "big.png") })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    const refused = error as InstanceType<typeof OpenAI.APIError>;
    expect(refused.status).toBe(413);
    expect(refused.type).toBe("request_too_large");
    expect(refused.message).toContain("The request body exceeds the limit of 50 MiB per request.");
    expect(refused.headers?.get("x-should-retry")).toBe("false");
    expect(refused.headers?.get("x-request-id")).toMatch(/^req_/);
    expect(received - before.received).toBe(1);
    await expectNothingHappened(before);
    await expectHealthy();
  });

  it("anthropic SDK: a 40 MB messages body is one request answered 413, not retried", async () => {
    const before = await snapshot();
    const client = new Anthropic({ apiKey: t.secret, baseURL: t.baseUrl }); // maxRetries: default (2)
    const error = await client.messages
      .create({
        model: "model-haiku-4-5",
        max_tokens: 16,
        messages: [{ role: "user", content: "x".repeat(40_000_000) }],
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Anthropic.APIError);
    const refused = error as InstanceType<typeof Anthropic.APIError>;
    expect(refused.status).toBe(413);
    expect(refused.error).toMatchObject({
      type: "error",
      error: { type: "request_too_large", message: "The request body exceeds the limit of 32 MiB." },
    });
    expect(refused.headers?.get("x-should-retry")).toBe("false");
    expect(received - before.received).toBe(1);
    await expectNothingHappened(before);
    await expectHealthy();
  });

  it.each<[string, string, string, () => Generator<Buffer>, number | undefined, number, string]>([
    [
      "an edit declared as 64 MiB",
      "/v1/images/edits",
      MULTIPART,
      () => imageForm([64 * MiB]),
      imageFormLength([64 * MiB]),
      1 * MiB,
      "The request body exceeds the limit of 50 MiB per request.",
    ],
    [
      "a chunked edit with a 64 MiB image",
      "/v1/images/edits",
      MULTIPART,
      () => imageForm([64 * MiB]),
      undefined,
      LIMITS.file + 4 * MiB,
      'Image "0.png" exceeds the limit of 10 MiB per file.',
    ],
    [
      "a chunked edit of 7 images of 9 MiB",
      "/v1/images/edits",
      MULTIPART,
      () => imageForm(Array(7).fill(9 * MiB)),
      undefined,
      LIMITS.edits + 4 * MiB,
      "The request body exceeds the limit of 50 MiB per request.",
    ],
    [
      "a messages body declared as 64 MiB",
      "/v1/messages",
      "application/json",
      () => messageBody(64 * MiB),
      lengthOf(messageBody(64 * MiB)),
      1 * MiB,
      "The request body exceeds the limit of 32 MiB.",
    ],
    [
      "a chunked 64 MiB messages body",
      "/v1/messages",
      "application/json",
      () => messageBody(64 * MiB),
      undefined,
      LIMITS.messages + 4 * MiB,
      "The request body exceeds the limit of 32 MiB.",
    ],
    [
      "a generations body declared as 64 MiB",
      "/v1/images/generations",
      "application/json",
      () => filler(64 * MiB, 0x20),
      64 * MiB,
      1 * MiB,
      "The request body exceeds the limit of 1 MiB.",
    ],
    [
      "a chunked 64 MiB generations body",
      "/v1/images/generations",
      "application/json",
      () => filler(64 * MiB, 0x20),
      undefined,
      LIMITS.generations + 4 * MiB,
      "The request body exceeds the limit of 1 MiB.",
    ],
  ])(
    "raw socket: %s is answered 413 mid-upload, and the upload still completes",
    async (_case, path, type, body, length, pauseAt, message) => {
      const before = await snapshot();
      const exchange = new RawExchange(head(path, type, length));
      const chunks = body();
      // The answer comes while the client is still sending: it waits here without sending more.
      await exchange.send(chunks, pauseAt, length === undefined);
      expect413(await exchange.answer(), message);
      // The rest is read and discarded: every byte goes out, no reset, then the server closes.
      expect(await exchange.send(chunks, Number.POSITIVE_INFINITY, length === undefined)).toBe(true);
      await exchange.finish();
      expect(exchange.error).toBeUndefined();
      expect(exchange.written).toBe(lengthOf(body()));
      expect(received - before.received).toBe(1);
      await expectNothingHappened(before);
    },
  );

  it("an upload refused for its content mid-way is answered at once and drained the same way", async () => {
    const before = await snapshot();
    const sizes = [8 * MiB];
    const exchange = new RawExchange(head("/v1/images/edits", MULTIPART, imageFormLength(sizes)));
    const chunks = imageForm(sizes);
    const first = chunks.next().value as Buffer;
    // Not an image: the first bytes are enough to refuse it.
    first.fill(0x61, first.length - smallPng().byteLength);
    exchange.written += first.byteLength;
    exchange.socket.write(first);
    const answer = await exchange.answer();
    expect(answer.status).toBe(400);
    expect(answer.headers.connection).toBe("close");
    expect(JSON.parse(answer.body)).toMatchObject({ error: { param: "image", code: "invalid_field" } });
    expect(await exchange.send(chunks, Number.POSITIVE_INFINITY, false)).toBe(true);
    await exchange.finish();
    expect(exchange.error).toBeUndefined();
    await expectNothingHappened(before);
  });

  it("a key refused before the body is read is drained the same way", async () => {
    const exchange = new RawExchange(head("/v1/images/edits", MULTIPART, imageFormLength([8 * MiB]), false));
    const answer = await exchange.answer();
    expect(answer.status).toBe(401);
    expect(answer.headers.connection).toBe("close");
    expect(await exchange.send(imageForm([8 * MiB]), Number.POSITIVE_INFINITY, false)).toBe(true);
    await exchange.finish();
    expect(exchange.error).toBeUndefined();
  });

  it(`stops draining a client that stalls after ${DRAIN_LIMITS.maxMs} ms`, async () => {
    const exchange = new RawExchange(head("/v1/messages", "application/json", 64 * MiB));
    await exchange.send(messageBody(64 * MiB), 1 * MiB, false);
    expect413(await exchange.answer(), "The request body exceeds the limit of 32 MiB.");
    const stalled = Date.now();
    await exchange.whenServerClosed();
    // Bounded: the server closed the socket, within the drain time and some slack.
    expect(Date.now() - stalled).toBeLessThan(DRAIN_LIMITS.maxMs + 5_000);
  });

  it(`stops draining after ${DRAIN_LIMITS.maxBytes / MiB} MiB more`, async () => {
    const declared = 1024 * MiB;
    const exchange = new RawExchange(head("/v1/images/generations", "application/json", declared));
    await exchange.send(filler(declared, 0x20), Number.POSITIVE_INFINITY, false).catch(() => false);
    await exchange.whenServerClosed();
    // Cut off (by a reset) once the drain limit was read; a socket buffer's worth of slack.
    expect(exchange.written).toBeLessThan(DRAIN_LIMITS.maxBytes + 16 * MiB);
    expect(exchange.written).toBeGreaterThan(DRAIN_LIMITS.maxBytes);
    await expectHealthy();
  });

  it("a client that vanishes mid-upload leaves nothing held, and the gateway healthy", async () => {
    const before = await snapshot();
    const exchange = new RawExchange(head("/v1/images/edits", MULTIPART, imageFormLength([8 * MiB])));
    await exchange.send(imageForm([8 * MiB]), 2 * MiB, false);
    exchange.socket.destroy();
    await exchange.finish();
    await expectNothingHappened(before);
    await expectHealthy();
  });
});
