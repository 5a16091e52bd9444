/**
 * A stand-in for Claude on Google Vertex AI and for Google's OAuth token endpoint
 * (docs/providers.md, "Google Vertex AI"), on one real socket, for tests and end-to-end runs. It checks
 * what Google checks and answers with the dev upstream's (dev-upstream.ts) messages, so the
 * gateway can bill them.
 *
 * - `POST /token`: the JWT-bearer grant google-auth-library sends; the assertion's RS256
 *   signature is verified with the service account's public key, its audience, expiry and
 *   scope checked; it answers a fresh access token living `tokenLifetimeSeconds`.
 * - `POST /v1/projects/{p}/locations/{r}/publishers/anthropic/models/{m}:rawPredict` (and
 *   `:streamRawPredict`, `count-tokens:rawPredict`): the bearer token must be one it issued and
 *   unexpired (401 UNAUTHENTICATED otherwise), the project and region its own (403 / 404), the
 *   body must carry `anthropic_version: "vertex-2023-10-16"` and no `model` (400
 *   INVALID_ARGUMENT). Answers are Anthropic's JSON and SSE as the dev upstream writes them.
 * - `POST …/publishers/google/models/{m}:generateContent`: Gemini's image models, the same token
 *   and project checks, the dev upstream's image answer.
 * - A test's `fault` answers a Google error, an Anthropic error, or an SSE error mid-stream.
 */
import { createPublicKey, randomBytes, verify } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { createParser } from "eventsource-parser";
import { startDevUpstream } from "./dev-upstream.js";

/** What a test makes the stand-in answer instead of the model. */
export type VertexFault =
  /** Google's front end refusing: `{"error": {"code", "message", "status"}}`. */
  | {
      readonly kind: "google";
      readonly httpStatus: number;
      readonly status: string;
      readonly message: string;
    }
  /** The model's own error, in Anthropic's envelope (e.g. 529 overloaded_error). */
  | {
      readonly kind: "anthropic";
      readonly httpStatus: number;
      readonly type: string;
      readonly message: string;
    }
  /** An SSE `error` event after `afterEvents` events of the stream, which then ends. */
  | {
      readonly kind: "stream-error";
      readonly afterEvents: number;
      readonly type: string;
      readonly message: string;
    };

/** How to run the stand-in. */
export interface VertexStandinOptions {
  readonly projectId: string;
  /** Default `us-east5`. */
  readonly region?: string;
  /** Service-account email → its public key (PEM): whose assertions the token endpoint accepts. */
  readonly accounts: Readonly<Record<string, string>>;
  /** How long an issued access token lives (default 3600 s, as Google's). */
  readonly tokenLifetimeSeconds?: number;
  /** Tests: a fault for this request, or undefined to serve it. */
  readonly fault?: (request: VertexStandinRequest) => VertexFault | undefined;
}

/** One authenticated prediction request as the stand-in received it. */
export interface VertexStandinRequest {
  readonly path: string;
  readonly model: string;
  readonly method: "rawPredict" | "streamRawPredict" | "generateContent";
  readonly headers: IncomingMessage["headers"];
  readonly body: Record<string, unknown>;
  readonly token: string;
}

/** A running stand-in. */
export interface VertexStandin {
  /** e.g. `http://127.0.0.1:PORT`: the `baseUrl` of a VertexUpstream. */
  readonly url: string;
  /** The key's `token_uri`: `{url}/token`. */
  readonly tokenUri: string;
  /** Every token the token endpoint issued, in order. */
  readonly issued: readonly { readonly token: string; readonly expiresAt: number }[];
  /** Every assertion the token endpoint refused, with Google's error description. */
  readonly tokenRefusals: readonly string[];
  /** Every prediction request that passed authentication, in order. */
  readonly requests: readonly VertexStandinRequest[];
  close(): Promise<void>;
}

const VERTEX_VERSION = "vertex-2023-10-16";
/** The audience google-auth-library signs into its assertions, and Google checks. */
const TOKEN_AUDIENCE = "https://oauth2.googleapis.com/token";
const CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform";
/** Gemini's image models on Vertex: the Gemini `generateContent` format. */
const GOOGLE_ROUTE =
  /^\/v1\/projects\/([^/]+)\/locations\/([^/]+)\/publishers\/google\/models\/([^/:]+):generateContent$/;
const ROUTE =
  /^\/v1\/projects\/([^/]+)\/locations\/([^/]+)\/publishers\/anthropic\/models\/([^/:]+):(rawPredict|streamRawPredict)$/;

/** Starts the stand-in (and the dev upstream behind it) on 127.0.0.1; resolves once it listens. */
export async function startVertexStandin(options: VertexStandinOptions): Promise<VertexStandin> {
  const region = options.region ?? "us-east5";
  const lifetime = options.tokenLifetimeSeconds ?? 3600;
  const dev = await startDevUpstream();
  const keys = new Map(Object.entries(options.accounts).map(([email, pem]) => [email, createPublicKey(pem)]));
  const tokens = new Map<string, number>();
  const issued: { token: string; expiresAt: number }[] = [];
  const tokenRefusals: string[] = [];
  const requests: VertexStandinRequest[] = [];

  /** The token endpoint: verifies the JWT assertion and issues an access token. */
  function grant(raw: string, res: ServerResponse): void {
    const problem = assertionProblem(new URLSearchParams(raw));
    if (problem !== undefined) {
      tokenRefusals.push(problem);
      sendJson(res, 400, { error: "invalid_grant", error_description: problem });
      return;
    }
    const token = `ya29.standin-${randomBytes(18).toString("base64url")}`;
    const expiresAt = Date.now() + lifetime * 1000;
    tokens.set(token, expiresAt);
    issued.push({ token, expiresAt });
    sendJson(res, 200, { access_token: token, expires_in: lifetime, token_type: "Bearer" });
  }

  /** Why Google would refuse this JWT-bearer grant; undefined when it would not. */
  function assertionProblem(form: URLSearchParams): string | undefined {
    if (form.get("grant_type") !== "urn:ietf:params:oauth:grant-type:jwt-bearer") {
      return "Invalid grant_type.";
    }
    const parts = (form.get("assertion") ?? "").split(".");
    if (parts.length !== 3) return "Invalid JWT: not three parts.";
    const [head, claimsPart, signature] = parts as [string, string, string];
    let header: { alg?: unknown };
    let claims: { iss?: unknown; aud?: unknown; exp?: unknown; iat?: unknown; scope?: unknown };
    try {
      header = JSON.parse(Buffer.from(head, "base64url").toString("utf8")) as typeof header;
      claims = JSON.parse(Buffer.from(claimsPart, "base64url").toString("utf8")) as typeof claims;
    } catch {
      return "Invalid JWT: undecodable.";
    }
    const key = typeof claims.iss === "string" ? keys.get(claims.iss) : undefined;
    if (header.alg !== "RS256" || key === undefined) return "Invalid JWT: unknown issuer or algorithm.";
    const signed = verify(
      "RSA-SHA256",
      Buffer.from(`${head}.${claimsPart}`),
      key,
      Buffer.from(signature, "base64url"),
    );
    if (!signed) return "Invalid JWT Signature.";
    const now = Math.floor(Date.now() / 1000);
    if (claims.aud !== TOKEN_AUDIENCE) return "Invalid JWT: audience.";
    if (typeof claims.exp !== "number" || claims.exp < now)
      return "Invalid JWT: Token must be a short-lived token and in a reasonable timeframe.";
    if (typeof claims.iat !== "number" || claims.iat > now + 60) return "Invalid JWT: iat in the future.";
    if (typeof claims.scope !== "string" || !claims.scope.split(" ").includes(CLOUD_PLATFORM)) {
      return "Invalid JWT: the cloud-platform scope is missing.";
    }
    return undefined;
  }

  async function predict(req: IncomingMessage, raw: string, res: ServerResponse): Promise<void> {
    const authorization = req.headers.authorization ?? "";
    const token = authorization.startsWith("Bearer ") ? authorization.slice(7) : "";
    const expiresAt = tokens.get(token);
    if (expiresAt === undefined || expiresAt <= Date.now()) {
      return sendGoogle(
        res,
        401,
        "UNAUTHENTICATED",
        "Request had invalid authentication credentials. Expected OAuth 2 access token.",
      );
    }
    const pathname = new URL(req.url ?? "/", "http://vertex").pathname;
    const gemini = GOOGLE_ROUTE.exec(pathname);
    if (req.method === "POST" && gemini !== null) return generateContent(gemini, raw, token, req, res);
    const route = ROUTE.exec(pathname);
    if (req.method !== "POST" || route === null)
      return sendGoogle(res, 404, "NOT_FOUND", `${req.url} not found`);
    const [, project, location, model, method] = route as unknown as [string, string, string, string, string];
    if (decodeURIComponent(project) !== options.projectId) {
      return sendGoogle(res, 403, "PERMISSION_DENIED", `Permission denied on resource project ${project}.`);
    }
    if (decodeURIComponent(location) !== region) {
      return sendGoogle(res, 404, "NOT_FOUND", `Publisher model not found in location ${location}.`);
    }
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(raw) as Record<string, unknown>;
      if (typeof body !== "object" || body === null || Array.isArray(body)) throw new Error("not an object");
    } catch {
      return sendGoogle(res, 400, "INVALID_ARGUMENT", "Invalid JSON payload received.");
    }
    const counting = model === "count-tokens";
    const recorded: VertexStandinRequest = {
      path: req.url ?? "/",
      model,
      method: method as VertexStandinRequest["method"],
      headers: req.headers,
      body,
      token,
    };
    requests.push(recorded);
    if (body.anthropic_version !== VERTEX_VERSION) {
      return sendGoogle(res, 400, "INVALID_ARGUMENT", `anthropic_version must be ${VERTEX_VERSION}.`);
    }
    if (!counting && "model" in body) {
      return sendAnthropic(res, 400, "invalid_request_error", "model: Extra inputs are not permitted");
    }
    const fault = options.fault?.(recorded);
    if (fault?.kind === "google") return sendGoogle(res, fault.httpStatus, fault.status, fault.message);
    if (fault?.kind === "anthropic") return sendAnthropic(res, fault.httpStatus, fault.type, fault.message);

    const { anthropic_version: _version, ...messages } = body;
    const beta = req.headers["anthropic-beta"];
    const upstream = await fetch(`${dev.url}/v1/messages${counting ? "/count_tokens" : ""}`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "anthropic-version": "2023-06-01",
        ...(typeof beta === "string" ? { "anthropic-beta": beta } : {}),
      },
      body: JSON.stringify(counting ? messages : { ...messages, model }),
    });
    const text = await upstream.text();
    const streaming = upstream.headers.get("content-type")?.startsWith("text/event-stream") === true;
    res.writeHead(upstream.status, {
      "content-type": upstream.headers.get("content-type") ?? "application/json",
      "request-id": upstream.headers.get("request-id") ?? "",
    });
    if (!streaming || fault?.kind !== "stream-error") return void res.end(text);
    const events: string[] = [];
    const parser = createParser({
      onEvent: (message) => events.push(`event: ${message.event}\ndata: ${message.data}\n\n`),
    });
    parser.feed(text);
    const error = { type: "error", error: { type: fault.type, message: fault.message } };
    res.end(`${events.slice(0, fault.afterEvents).join("")}event: error\ndata: ${JSON.stringify(error)}\n\n`);
  }

  /** A Gemini image call: the project and region checked, the dev upstream's image answer. */
  async function generateContent(
    route: RegExpExecArray,
    raw: string,
    token: string,
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<void> {
    const [, project, location, model] = route as unknown as [string, string, string, string];
    if (decodeURIComponent(project) !== options.projectId) {
      return sendGoogle(res, 403, "PERMISSION_DENIED", `Permission denied on resource project ${project}.`);
    }
    if (decodeURIComponent(location) !== region) {
      return sendGoogle(res, 404, "NOT_FOUND", `Publisher model not found in location ${location}.`);
    }
    let body: Record<string, unknown> = {};
    try {
      body = JSON.parse(raw) as Record<string, unknown>;
    } catch {
      return sendGoogle(res, 400, "INVALID_ARGUMENT", "Invalid JSON payload received.");
    }
    const recorded: VertexStandinRequest = {
      path: req.url ?? "/",
      model: decodeURIComponent(model),
      method: "generateContent",
      headers: req.headers,
      body,
      token,
    };
    requests.push(recorded);
    const fault = options.fault?.(recorded);
    if (fault?.kind === "google") return sendGoogle(res, fault.httpStatus, fault.status, fault.message);
    const upstream = await fetch(`${dev.url}/v1beta/models/${model}:generateContent`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: raw,
    });
    res.writeHead(upstream.status, { "content-type": "application/json; charset=UTF-8" });
    res.end(await upstream.text());
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const raw = await readAll(req);
    if (req.method === "POST" && req.url === "/token") return grant(raw, res);
    return predict(req, raw, res);
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (res.headersSent) return void res.destroy();
      sendGoogle(res, 500, "INTERNAL", error instanceof Error ? error.message : String(error));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    tokenUri: `${url}/token`,
    issued,
    tokenRefusals,
    requests,
    close: async () => {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await dev.close();
    },
  };
}

async function readAll(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json; charset=UTF-8" });
  res.end(JSON.stringify(body));
}

/** Google's error envelope, as Vertex's front end answers. */
function sendGoogle(res: ServerResponse, httpStatus: number, status: string, message: string): void {
  sendJson(res, httpStatus, { error: { code: httpStatus, message, status } });
}

/** Anthropic's error envelope, as the model behind Vertex answers. */
function sendAnthropic(res: ServerResponse, httpStatus: number, type: string, message: string): void {
  sendJson(res, httpStatus, { type: "error", error: { type, message } });
}
