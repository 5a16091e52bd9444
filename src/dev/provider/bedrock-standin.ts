/**
 * A stand-in for Amazon Bedrock's runtime API (docs/providers.md, "Amazon Bedrock") on a real socket,
 * for tests and end-to-end runs: it checks what Bedrock checks and answers in Bedrock's wire
 * format, with the dev upstream's (dev-upstream.ts) messages inside so the gateway can bill them.
 *
 * - Authentication: a SigV4 signature (service `bedrock`, the stand-in's region) re-computed
 *   with `@smithy/signature-v4` from the request as received — path, signed headers, and
 *   `x-amz-content-sha256` checked against the body's own SHA-256 — or a Bedrock API key as
 *   `Authorization: Bearer`; a mismatch is 403 with `x-amzn-ErrorType` and `{"message": …}`.
 * - `POST /model/{modelId}/invoke`, `/invoke-with-response-stream` and `/count-tokens` (its
 *   InvokeModel body base64 in `input.invokeModel.body`; foundation-model ids only); the body must carry
 *   `anthropic_version: "bedrock-2023-05-31"` and no `model` or `stream` (ValidationException).
 * - Streams as `application/vnd.amazon.eventstream` frames (`@smithy/core`'s event-stream codec): a
 *   `chunk` event per Messages event, `amazon-bedrock-invocationMetrics` on `message_stop`.
 * - A test's `fault` answers an HTTP error or throws an exception frame into the stream.
 */
import { createHash, randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { EventStreamCodec, type MessageHeaders } from "@smithy/core/event-streams";
import { Hash } from "@smithy/core/serde";
import { SignatureV4 } from "@smithy/signature-v4";
import { createParser } from "eventsource-parser";
import { startDevUpstream } from "./dev-upstream.js";

/** What a test makes the stand-in answer instead of the model. */
export type BedrockFault =
  /** An HTTP error: `errorType` in `x-amzn-ErrorType`, `{"message": …}` as the body. */
  | { readonly kind: "http"; readonly status: number; readonly errorType: string; readonly message: string }
  /** An exception frame (e.g. `throttlingException`) after `afterEvents` Messages events; the stream ends. */
  | {
      readonly kind: "stream-exception";
      readonly afterEvents: number;
      readonly exceptionType: string;
      readonly message: string;
    };

/** How to run the stand-in. */
export interface BedrockStandinOptions {
  /** The region signatures must be scoped to (default `us-east-1`). */
  readonly region?: string;
  /** The one access key it knows. */
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  /** A Bedrock API key accepted as `Authorization: Bearer` (none by default). */
  readonly bearerToken?: string;
  /** Tests: a fault for this request (its model id and parsed body), or undefined to serve it. */
  readonly fault?: (request: BedrockStandinRequest) => BedrockFault | undefined;
}

/** One authenticated InvokeModel request as the stand-in received it. */
export interface BedrockStandinRequest {
  readonly path: string;
  readonly modelId: string;
  readonly stream: boolean;
  readonly headers: IncomingMessage["headers"];
  readonly body: Record<string, unknown>;
}

/** A running stand-in. */
export interface BedrockStandin {
  /** e.g. `http://127.0.0.1:PORT`: the `baseUrl` of a BedrockUpstream. */
  readonly url: string;
  /** Every request that passed authentication, in order. */
  readonly requests: readonly BedrockStandinRequest[];
  /** Requests refused for their authentication (403), in order, with Bedrock's message. */
  readonly refusals: readonly string[];
  close(): Promise<void>;
}

const BEDROCK_VERSION = "bedrock-2023-05-31";
const ROUTE = /^\/model\/([^/]+)\/(invoke|invoke-with-response-stream|count-tokens)$/;
const AUTHORIZATION =
  /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, ?SignedHeaders=([^,]+), ?Signature=([0-9a-f]{64})$/;
/** How far a request's `x-amz-date` may be from the stand-in's clock, as AWS allows. */
const CLOCK_SKEW_MS = 15 * 60_000;

const encoder = new TextEncoder();
const codec = new EventStreamCodec(
  (bytes: Uint8Array) => new TextDecoder().decode(bytes),
  (text: string) => encoder.encode(text),
);

/** Starts the stand-in (and the dev upstream behind it) on 127.0.0.1; resolves once it listens. */
export async function startBedrockStandin(options: BedrockStandinOptions): Promise<BedrockStandin> {
  const region = options.region ?? "us-east-1";
  const dev = await startDevUpstream();
  const requests: BedrockStandinRequest[] = [];
  const refusals: string[] = [];
  const signer = new SignatureV4({
    service: "bedrock",
    region,
    sha256: Hash.bind(null, "sha256"),
    credentials: { accessKeyId: options.accessKeyId, secretAccessKey: options.secretAccessKey },
  });

  /** Bedrock's own refusal of the request's authentication; undefined when it passes. */
  async function authFailure(req: IncomingMessage, raw: Buffer): Promise<[string, string] | undefined> {
    const authorization = req.headers.authorization ?? "";
    if (authorization.startsWith("Bearer ")) {
      return options.bearerToken !== undefined && authorization === `Bearer ${options.bearerToken}`
        ? undefined
        : ["UnrecognizedClientException", "Invalid API Key format: Must start with pre-defined prefix"];
    }
    const parts = AUTHORIZATION.exec(authorization);
    if (parts === null) return ["MissingAuthenticationTokenException", "Missing Authentication Token"];
    const [, keyId, day, scopeRegion, service, signedHeaders] = parts as unknown as string[];
    if (keyId !== options.accessKeyId) {
      return ["UnrecognizedClientException", "The security token included in the request is invalid."];
    }
    if (scopeRegion !== region) {
      return [
        "InvalidSignatureException",
        `Credential should be scoped to a valid region, not '${scopeRegion}'.`,
      ];
    }
    if (service !== "bedrock") {
      return ["InvalidSignatureException", `Credential should be scoped to correct service: 'bedrock'.`];
    }
    const amzDate = String(req.headers["x-amz-date"] ?? "");
    const date = parseAmzDate(amzDate);
    if (date === undefined || !amzDate.startsWith(day ?? "")) {
      return ["IncompleteSignatureException", "Date must be in ISO-8601 'basic format'."];
    }
    if (Math.abs(Date.now() - date.getTime()) > CLOCK_SKEW_MS) {
      return [
        "InvalidSignatureException",
        "Signature expired: the request's x-amz-date is too far from now.",
      ];
    }
    const hashHeader = req.headers["x-amz-content-sha256"];
    if (hashHeader !== undefined && hashHeader !== createHash("sha256").update(raw).digest("hex")) {
      return [
        "InvalidSignatureException",
        "The provided 'x-amz-content-sha256' header does not match what was computed.",
      ];
    }
    const headers: Record<string, string> = {};
    for (const name of (signedHeaders ?? "").split(";")) {
      const value = req.headers[name];
      if (value === undefined) return ["InvalidSignatureException", `Signed header ${name} is missing.`];
      headers[name] = Array.isArray(value) ? value.join(",") : value;
    }
    const url = new URL(req.url ?? "/", "http://bedrock");
    const expected = await signer.sign(
      {
        method: req.method ?? "POST",
        protocol: "http:",
        hostname: headers.host ?? "",
        path: url.pathname,
        query: Object.fromEntries(url.searchParams),
        headers,
        body: raw.toString("utf8"),
      },
      { signingDate: date },
    );
    if (expected.headers.authorization !== authorization) {
      return [
        "InvalidSignatureException",
        "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method.",
      ];
    }
    return undefined;
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const raw = await readAll(req);
    const refused = await authFailure(req, raw);
    if (refused !== undefined) {
      refusals.push(`${refused[0]}: ${refused[1]}`);
      return sendError(res, 403, refused[0], refused[1]);
    }
    const route = ROUTE.exec(new URL(req.url ?? "/", "http://bedrock").pathname);
    if (req.method !== "POST" || route === null) {
      return sendError(res, 404, "UnknownOperationException", `${req.method} ${req.url} is not an operation`);
    }
    const modelId = decodeURIComponent(route[1] ?? "");
    const stream = route[2] === "invoke-with-response-stream";
    const counting = route[2] === "count-tokens";
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(raw.toString("utf8")) as Record<string, unknown>;
      if (counting) {
        // CountTokens wraps the InvokeModel body it counts: {"input":{"invokeModel":{"body":base64}}}.
        const wrapped = (body.input as { invokeModel?: { body?: unknown } } | undefined)?.invokeModel?.body;
        if (typeof wrapped !== "string") throw new Error("no input.invokeModel.body");
        body = JSON.parse(Buffer.from(wrapped, "base64").toString("utf8")) as Record<string, unknown>;
      }
      if (typeof body !== "object" || body === null || Array.isArray(body)) throw new Error("not an object");
    } catch {
      return sendError(
        res,
        400,
        "ValidationException",
        "Malformed input request, please reformat your input and try again.",
      );
    }
    const recorded = { path: req.url ?? "/", modelId, stream, headers: req.headers, body };
    requests.push(recorded);
    for (const key of ["model", "stream"]) {
      if (key in body) {
        return sendError(
          res,
          400,
          "ValidationException",
          `Malformed input request: #: extraneous key [${key}] is not permitted, please reformat your input and try again.`,
        );
      }
    }
    if (body.anthropic_version !== BEDROCK_VERSION) {
      return sendError(
        res,
        400,
        "ValidationException",
        `Malformed input request: anthropic_version must be ${BEDROCK_VERSION}.`,
      );
    }
    const fault = options.fault?.(recorded);
    if (fault?.kind === "http") return sendError(res, fault.status, fault.errorType, fault.message);

    const { anthropic_version: _version, anthropic_beta: betas, ...messages } = body;
    if (counting) return countTokens(res, modelId, messages, betas);
    const upstream = await fetch(`${dev.url}/v1/messages`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "anthropic-version": "2023-06-01",
        ...(Array.isArray(betas) ? { "anthropic-beta": betas.join(",") } : {}),
      },
      body: JSON.stringify({ ...messages, model: modelId, ...(stream ? { stream: true } : {}) }),
    });
    const requestId = randomUUID();
    if (upstream.status !== 200) {
      const error = (await upstream.json()) as { error?: { message?: string } };
      return sendError(res, 400, "ValidationException", error.error?.message ?? `HTTP ${upstream.status}`);
    }
    if (!stream) {
      res.writeHead(200, { "content-type": "application/json", "x-amzn-requestid": requestId });
      res.end(await upstream.text());
      return;
    }
    res.writeHead(200, {
      "content-type": "application/vnd.amazon.eventstream",
      "x-amzn-requestid": requestId,
      "x-amzn-bedrock-content-type": "application/json",
    });
    const events: string[] = [];
    const parser = createParser({ onEvent: (message) => events.push(message.data) });
    const text = await upstream.text();
    parser.feed(text);
    const started = Date.now();
    for (const [index, data] of events.entries()) {
      if (fault?.kind === "stream-exception" && index === fault.afterEvents) {
        res.end(exceptionFrame(fault.exceptionType, fault.message));
        return;
      }
      const event = JSON.parse(data) as Record<string, unknown>;
      const json =
        event.type === "message_stop"
          ? JSON.stringify({ ...event, "amazon-bedrock-invocationMetrics": metrics(events, started) })
          : data;
      res.write(chunkFrame(json));
    }
    res.end();
  }

  /** CountTokens: foundation-model ids only, as Bedrock; the dev upstream's count as `inputTokens`. */
  async function countTokens(
    res: ServerResponse,
    modelId: string,
    messages: Record<string, unknown>,
    betas: unknown,
  ): Promise<void> {
    if (!modelId.startsWith("anthropic.")) {
      return sendError(
        res,
        400,
        "ValidationException",
        "The provided model doesn't support counting tokens.",
      );
    }
    const { max_tokens: _max, ...counted } = messages;
    const upstream = await fetch(`${dev.url}/v1/messages/count_tokens`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "anthropic-version": "2023-06-01",
        ...(Array.isArray(betas) ? { "anthropic-beta": betas.join(",") } : {}),
      },
      body: JSON.stringify({ ...counted, model: modelId }),
    });
    const answer = (await upstream.json()) as { input_tokens?: number; error?: { message?: string } };
    if (upstream.status !== 200) {
      return sendError(res, 400, "ValidationException", answer.error?.message ?? `HTTP ${upstream.status}`);
    }
    res.writeHead(200, { "content-type": "application/json", "x-amzn-requestid": randomUUID() });
    res.end(JSON.stringify({ inputTokens: answer.input_tokens }));
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (res.headersSent) return void res.destroy();
      sendError(res, 500, "InternalServerException", error instanceof Error ? error.message : String(error));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    refusals,
    close: async () => {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await dev.close();
    },
  };
}

/** A `chunk` event frame carrying one Messages event, padded as Bedrock pads its payloads. */
function chunkFrame(json: string): Uint8Array {
  const payload = {
    bytes: Buffer.from(json, "utf8").toString("base64"),
    p: "abcdefghijklmnopqrstuvwxyz".slice(0, json.length % 26),
  };
  return frame(
    { ":event-type": str("chunk"), ":content-type": str("application/json"), ":message-type": str("event") },
    JSON.stringify(payload),
  );
}

/** An exception frame, as Bedrock ends a stream that failed. */
function exceptionFrame(exceptionType: string, message: string): Uint8Array {
  return frame(
    {
      ":exception-type": str(exceptionType),
      ":content-type": str("application/json"),
      ":message-type": str("exception"),
    },
    JSON.stringify({ message }),
  );
}

function frame(headers: MessageHeaders, body: string): Uint8Array {
  return codec.encode({ headers, body: encoder.encode(body) });
}

function str(value: string): { type: "string"; value: string } {
  return { type: "string", value };
}

/** Bedrock's invocation metrics from the stream's message_start and last message_delta usage. */
function metrics(events: readonly string[], started: number): Record<string, number> {
  let inputTokenCount = 0;
  let outputTokenCount = 0;
  for (const data of events) {
    const event = JSON.parse(data) as {
      type?: string;
      message?: { usage?: { input_tokens?: number } };
      usage?: { output_tokens?: number };
    };
    if (event.type === "message_start") inputTokenCount = event.message?.usage?.input_tokens ?? 0;
    if (event.type === "message_delta") outputTokenCount = event.usage?.output_tokens ?? outputTokenCount;
  }
  const latency = Date.now() - started;
  return { inputTokenCount, outputTokenCount, invocationLatency: latency, firstByteLatency: latency };
}

/** `20250101T000000Z` → the Date; undefined when not in that form. */
function parseAmzDate(text: string): Date | undefined {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(text);
  if (m === null) return undefined;
  return new Date(Date.UTC(+m[1]!, +m[2]! - 1, +m[3]!, +m[4]!, +m[5]!, +m[6]!));
}

async function readAll(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** Bedrock's error answer: the exception in `x-amzn-ErrorType`, its message as JSON. */
function sendError(res: ServerResponse, status: number, errorType: string, message: string): void {
  res.writeHead(status, {
    "content-type": "application/json",
    "x-amzn-errortype": `${errorType}:http://internal.amazon.com/coral/com.amazon.bedrock/`,
    "x-amzn-requestid": randomUUID(),
  });
  res.end(JSON.stringify({ message }));
}
