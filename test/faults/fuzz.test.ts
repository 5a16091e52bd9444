/**
 * The gateway under hostile input: a seeded property-based fuzzer (fast-check) drives every
 * public route with requests built by mutating valid ones — wrong types in every field, huge,
 * negative and fractional numbers, deep nesting, megabyte strings, invalid UTF-8, duplicate keys,
 * truncated JSON, wrong content types, prototype-pollution keys, broken multipart — over a real
 * socket, against a gateway in front of the stand-in provider.
 *
 * Every answer must be below 500, carry `x-request-id`, and be in its route's own envelope; a
 * refused request must reach no provider and place no hold. Afterwards the gateway still serves a
 * valid call and the ledger audit is clean.
 *
 * Reproduce a run with TOLLGATE_FUZZ_SEED=<seed> (printed at the start and on failure);
 * TOLLGATE_FUZZ_RUNS scales the number of requests (default 10,000 over all routes).
 */
import { Agent, request as httpRequest } from "node:http";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { smallPng } from "../helpers/image-fixtures.js";
import { startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

const SEED = Number(process.env.TOLLGATE_FUZZ_SEED ?? 1818);
const TOTAL = Number(process.env.TOLLGATE_FUZZ_RUNS ?? 10_000);
/** The share of the requests each route gets. */
const SHARE = {
  messages: 0.35,
  countTokens: 0.12,
  generations: 0.15,
  edits: 0.2,
  dashboard: 0.1,
  gets: 0.08,
};

/** What every request sent and answered, for the figures and the checks. */
const histogram = new Map<number, number>();
let sent = 0;
/** Request ids of 4xx answers that came from the provider, not from the gateway. */
const providerRefused: string[] = [];

interface Answer {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: Buffer;
}

interface Attempt {
  readonly method: string;
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly body?: Buffer;
}

const agent = new Agent({ keepAlive: true, maxSockets: 1 });

/** One request over a real socket, bytes as given (node:http does not touch the body). */
function send(origin: string, attempt: Attempt): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const { hostname, port } = new URL(origin);
    const req = httpRequest(
      {
        hostname,
        port,
        // The path as given, never resolved: "//x" is a path here, not another host.
        path: attempt.path,
        method: attempt.method,
        headers: {
          ...attempt.headers,
          ...(attempt.body === undefined ? {} : { "content-length": String(attempt.body.byteLength) }),
        },
        agent,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("end", () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
        );
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(attempt.body);
  });
}

// ---------------------------------------------------------------------------------------------
// Mutations of JSON bodies

/** Raw JSON texts put in place of a field's value: every kind of value a field should not get. */
const MEGABYTE = `"${"x".repeat(1 << 20)}"`;
const HOSTILE_VALUES: readonly string[] = [
  "null",
  "true",
  "false",
  '""',
  '"text"',
  "0",
  "-1",
  "-0",
  "1.5",
  "-0.5",
  "0.0001",
  "1e308",
  "1e400",
  "-1e400",
  "1e-400",
  "9007199254740993",
  "123456789012345678901234567890",
  "[]",
  "{}",
  "[null]",
  '[{"type":"text"}]',
  MEGABYTE,
  `${"[".repeat(300)}${"]".repeat(300)}`,
  `${'{"a":'.repeat(300)}1${"}".repeat(300)}`,
  '{"__proto__":{"polluted":true}}',
  '{"constructor":{"prototype":{"polluted":true}}}',
  '"\\ud800"',
  '"\\u0000"',
];

/** Every path to a value in a JSON tree (objects and arrays), the root excluded. */
function pathsOf(value: unknown, prefix: (string | number)[] = []): (string | number)[][] {
  if (value === null || typeof value !== "object") return [];
  const entries: [string | number, unknown][] = Array.isArray(value)
    ? value.map((v, i) => [i, v])
    : Object.entries(value as Record<string, unknown>);
  return entries.flatMap(([key, child]) => [[...prefix, key], ...pathsOf(child, [...prefix, key])]);
}

const SENTINEL = "\u0001fuzz-sentinel\u0001";

/** `seed` with the value at `path` replaced by the raw JSON text `raw` (or removed). */
function replaced(seed: unknown, path: (string | number)[], raw: string | undefined): string {
  const copy = structuredClone(seed) as Record<string | number, unknown>;
  let node: Record<string | number, unknown> = copy;
  for (const key of path.slice(0, -1)) node = node[key] as Record<string | number, unknown>;
  const last = path[path.length - 1]!;
  if (raw === undefined) {
    if (Array.isArray(node)) node.splice(Number(last), 1);
    else delete node[last];
    return JSON.stringify(copy);
  }
  node[last] = SENTINEL;
  return JSON.stringify(copy).replace(JSON.stringify(SENTINEL), raw);
}

/** A mutation of a JSON body: a field's value, a whole-text corruption, or the valid body itself. */
type JsonMutation =
  | { kind: "valid" }
  | { kind: "value"; path: number; raw: string }
  | { kind: "fuzzed-value"; path: number; value: unknown }
  | { kind: "remove"; path: number }
  | { kind: "extra-key"; key: string; raw: string }
  | { kind: "duplicate-key"; path: number; raw: string }
  | { kind: "truncate"; at: number }
  | { kind: "invalid-utf8"; at: number; bytes: readonly number[] }
  | { kind: "whole"; text: string };

const jsonMutation: fc.Arbitrary<JsonMutation> = fc.oneof(
  { weight: 1, arbitrary: fc.constant({ kind: "valid" as const }) },
  {
    weight: 8,
    arbitrary: fc.record({
      kind: fc.constant("value" as const),
      path: fc.nat(),
      raw: fc.constantFrom(...HOSTILE_VALUES),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant("fuzzed-value" as const),
      path: fc.nat(),
      value: fc.jsonValue(),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("remove" as const), path: fc.nat() }) },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant("extra-key" as const),
      key: fc.oneof(fc.constantFrom("__proto__", "constructor", "prototype", "toString", ""), fc.string()),
      raw: fc.constantFrom(...HOSTILE_VALUES.filter((v) => v.length < 1000)),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant("duplicate-key" as const),
      path: fc.nat(),
      raw: fc.constantFrom(...HOSTILE_VALUES.filter((v) => v.length < 1000)),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("truncate" as const), at: fc.nat() }) },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant("invalid-utf8" as const),
      at: fc.nat(),
      bytes: fc.constantFrom(
        [0xff],
        [0xc3, 0x28],
        [0xed, 0xa0, 0x80],
        [0xf8, 0x88, 0x80, 0x80, 0x80],
        [0x80],
      ),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant("whole" as const),
      text: fc.oneof(
        fc.constantFrom("", " ", "null", "[]", "0", '"x"', "{", "}", "{}{}", "\ufeff{}", "{}garbage"),
        fc.string(),
      ),
    }),
  },
);

/** The body a mutation makes of a valid seed. */
function mutateJson(seed: Record<string, unknown>, m: JsonMutation): Buffer {
  const paths = pathsOf(seed);
  const pick = (n: number) => paths[n % paths.length]!;
  const text = JSON.stringify(seed);
  // An empty object has no field to mutate: the hostile value becomes a field of it.
  if (paths.length === 0 && (m.kind === "value" || m.kind === "fuzzed-value" || m.kind === "remove")) {
    return Buffer.from(`{"field":${m.kind === "value" ? m.raw : "null"}}`);
  }
  switch (m.kind) {
    case "valid":
      return Buffer.from(text);
    case "value":
      return Buffer.from(replaced(seed, pick(m.path), m.raw));
    case "fuzzed-value":
      return Buffer.from(replaced(seed, pick(m.path), JSON.stringify(m.value) ?? "null"));
    case "remove":
      return Buffer.from(replaced(seed, pick(m.path), undefined));
    case "extra-key":
      return Buffer.from(`{${JSON.stringify(m.key)}:${m.raw},${text.slice(1)}`);
    case "duplicate-key": {
      // The same top-level key twice: the second occurrence carries the hostile value.
      const keys = Object.keys(seed);
      const key = keys[m.path % keys.length]!;
      return Buffer.from(`${text.slice(0, -1)},${JSON.stringify(key)}:${m.raw}}`);
    }
    case "truncate":
      return Buffer.from(text.slice(0, m.at % text.length));
    case "invalid-utf8": {
      const bytes = Buffer.from(text);
      const at = m.at % bytes.length;
      return Buffer.concat([bytes.subarray(0, at), Buffer.from(m.bytes), bytes.subarray(at)]);
    }
    case "whole":
      return Buffer.from(m.text);
  }
}

/** Content types a JSON route might be sent; mostly the right one. */
const jsonContentType = fc.oneof(
  { weight: 12, arbitrary: fc.constant("application/json") },
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      "text/plain",
      "application/x-www-form-urlencoded",
      "multipart/form-data",
      "multipart/form-data; boundary=zzz",
      "application/json; charset=latin1",
      "application/octet-stream",
      "",
    ),
  },
);

/** How the caller authenticates: mostly with its key, sometimes wrongly. */
type Auth = "key" | "bearer" | "none" | "wrong" | "malformed";
const authArb: fc.Arbitrary<Auth> = fc.oneof(
  { weight: 16, arbitrary: fc.constant<Auth>("key") },
  { weight: 2, arbitrary: fc.constant<Auth>("bearer") },
  { weight: 1, arbitrary: fc.constantFrom<Auth>("none", "wrong", "malformed") },
);

function authHeaders(auth: Auth, secret: string): Record<string, string> {
  switch (auth) {
    case "key":
      return { "x-api-key": secret };
    case "bearer":
      return { authorization: `Bearer ${secret}` };
    case "none":
      return {};
    case "wrong":
      return { "x-api-key": `${secret.slice(0, -4)}zzzz` };
    case "malformed":
      return { "x-api-key": "tg_\u00e9\u00e9" };
  }
}

// ---------------------------------------------------------------------------------------------
// Valid seeds

const messageSeeds: Record<string, unknown>[] = [
  { model: "model-haiku-4-5", max_tokens: 32, messages: [{ role: "user", content: "hello" }] },
  {
    model: "model-sonnet-4-6",
    max_tokens: 64,
    stream: true,
    system: [{ type: "text", text: "be brief", cache_control: { type: "ephemeral" } }],
    messages: [
      { role: "user", content: [{ type: "text", text: "weather?" }] },
      {
        role: "assistant",
        content: [{ type: "tool_use", id: "toolu_1", name: "weather", input: { city: "Oslo" } }],
      },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "cold" }] },
    ],
    tools: [
      {
        name: "weather",
        description: "the weather",
        input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
      },
    ],
    tool_choice: { type: "auto" },
    temperature: 0.5,
    stop_sequences: ["END"],
    metadata: { user_id: "u1" },
  },
  {
    model: "model-opus-4-8",
    max_tokens: 2048,
    thinking: { type: "enabled", budget_tokens: 1024 },
    output_config: { effort: "high" },
    messages: [{ role: "user", content: "think" }],
  },
];

const imageSeeds: Record<string, unknown>[] = [
  { model: "image-pro", prompt: "a cat", n: 1, aspect_ratio: "16:9", response_format: "b64_json" },
  { model: "image-2", prompt: "a dog", size: "1K", response_format: "url" },
];

// ---------------------------------------------------------------------------------------------
// Multipart

interface Part {
  readonly name: string | undefined;
  readonly filename?: string;
  readonly type?: string;
  readonly data: Buffer;
}

const PNG = smallPng(16, 16, "fuzz");

function editParts(): Part[] {
  return [
    { name: "model", data: Buffer.from("image-pro") },
    { name: "prompt", data: Buffer.from("make it blue") },
    { name: "image", filename: "a.png", type: "image/png", data: PNG },
  ];
}

type MultipartMutation =
  | { kind: "valid" }
  | { kind: "no-boundary" }
  | { kind: "wrong-boundary" }
  | { kind: "nameless"; part: number }
  | { kind: "empty-name"; part: number }
  | { kind: "file-as-field"; part: number }
  | { kind: "field-as-file"; part: number }
  | { kind: "truncate"; at: number }
  | { kind: "no-closing" }
  | { kind: "lf-only" }
  | { kind: "value"; part: number; raw: string }
  | { kind: "extra"; name: string; value: string }
  | { kind: "not-an-image"; data: Uint8Array }
  | { kind: "many-images"; count: number }
  | { kind: "header-garbage"; text: string };

const multipartMutation: fc.Arbitrary<MultipartMutation> = fc.oneof(
  fc.constant({ kind: "valid" as const }),
  fc.constant({ kind: "no-boundary" as const }),
  fc.constant({ kind: "wrong-boundary" as const }),
  fc.record({ kind: fc.constant("nameless" as const), part: fc.nat() }),
  fc.record({ kind: fc.constant("empty-name" as const), part: fc.nat() }),
  fc.record({ kind: fc.constant("file-as-field" as const), part: fc.nat() }),
  fc.record({ kind: fc.constant("field-as-file" as const), part: fc.nat() }),
  fc.record({ kind: fc.constant("truncate" as const), at: fc.nat() }),
  fc.constant({ kind: "no-closing" as const }),
  fc.constant({ kind: "lf-only" as const }),
  fc.record({
    kind: fc.constant("value" as const),
    part: fc.nat(),
    raw: fc.oneof(fc.constantFrom("", "x".repeat(300_000), "-1", "1e400", "\u0000", "\ud800"), fc.string()),
  }),
  fc.record({
    kind: fc.constant("extra" as const),
    name: fc.constantFrom("__proto__", "constructor", "n", "size", "mask", "unknown", "image[]"),
    value: fc.string(),
  }),
  fc.record({ kind: fc.constant("not-an-image" as const), data: fc.uint8Array({ maxLength: 64 }) }),
  fc.record({ kind: fc.constant("many-images" as const), count: fc.integer({ min: 2, max: 20 }) }),
  fc.record({ kind: fc.constant("header-garbage" as const), text: fc.string() }),
);

function encodeParts(parts: readonly Part[], boundary: string, eol = "\r\n", closing = true): Buffer {
  const chunks: Buffer[] = [];
  for (const part of parts) {
    const disposition = [
      "form-data",
      ...(part.name === undefined ? [] : [`name="${part.name}"`]),
      ...(part.filename === undefined ? [] : [`filename="${part.filename}"`]),
    ].join("; ");
    const head = [`--${boundary}`, `Content-Disposition: ${disposition}`];
    if (part.type !== undefined) head.push(`Content-Type: ${part.type}`);
    chunks.push(Buffer.from(`${head.join(eol)}${eol}${eol}`), part.data, Buffer.from(eol));
  }
  if (closing) chunks.push(Buffer.from(`--${boundary}--${eol}`));
  return Buffer.concat(chunks);
}

/** The content type and body a multipart mutation makes of a valid edit. */
function mutateMultipart(m: MultipartMutation): { contentType: string; body: Buffer } {
  const boundary = "----tollgatefuzz7MA4YWxkTrZu0gW";
  const parts = editParts();
  const at = (n: number) => n % parts.length;
  let contentType = `multipart/form-data; boundary=${boundary}`;
  let body: Buffer | undefined;
  switch (m.kind) {
    case "valid":
      break;
    case "no-boundary":
      contentType = "multipart/form-data";
      break;
    case "wrong-boundary":
      contentType = "multipart/form-data; boundary=not-the-one-used";
      break;
    case "nameless":
      parts[at(m.part)] = { ...parts[at(m.part)]!, name: undefined };
      break;
    case "empty-name":
      parts[at(m.part)] = { ...parts[at(m.part)]!, name: "" };
      break;
    case "file-as-field": {
      const { filename: _f, type: _t, ...field } = parts[at(m.part)]!;
      parts[at(m.part)] = field;
      break;
    }
    case "field-as-file":
      parts[at(m.part)] = { ...parts[at(m.part)]!, filename: "x.txt", type: "text/plain" };
      break;
    case "truncate": {
      const whole = encodeParts(parts, boundary);
      body = whole.subarray(0, m.at % whole.byteLength);
      break;
    }
    case "no-closing":
      body = encodeParts(parts, boundary, "\r\n", false);
      break;
    case "lf-only":
      body = encodeParts(parts, boundary, "\n");
      break;
    case "value":
      parts[at(m.part)] = { ...parts[at(m.part)]!, data: Buffer.from(m.raw) };
      break;
    case "extra":
      parts.push({ name: m.name, data: Buffer.from(m.value) });
      break;
    case "not-an-image":
      parts[2] = { ...parts[2]!, data: Buffer.from(m.data) };
      break;
    case "many-images":
      for (let i = 1; i < m.count; i++) parts.push({ ...parts[2]!, name: "image[]", filename: `${i}.png` });
      break;
    case "header-garbage":
      body = Buffer.concat([Buffer.from(`--${boundary}\r\n${m.text}\r\n\r\n`), encodeParts(parts, boundary)]);
      break;
  }
  return { contentType, body: body ?? encodeParts(parts, boundary) };
}

// ---------------------------------------------------------------------------------------------
// The checks

/** Which envelope a route answers errors in. */
type Envelope = "anthropic" | "openai" | "connect";

function expectEnvelope(envelope: Envelope, answer: Answer, label: string): void {
  const text = answer.body.toString("utf8");
  let json: Record<string, unknown>;
  try {
    json = JSON.parse(text) as Record<string, unknown>;
  } catch {
    throw new Error(`${label}: ${answer.status} not JSON: ${text.slice(0, 200)}`);
  }
  const error = json.error as Record<string, unknown> | undefined;
  switch (envelope) {
    case "anthropic":
      expect(json.type, label).toBe("error");
      expect(typeof error?.type, label).toBe("string");
      expect(typeof error?.message, label).toBe("string");
      return;
    case "openai":
      expect(typeof error?.message, label).toBe("string");
      expect(typeof error?.type, label).toBe("string");
      return;
    case "connect":
      expect(typeof json.code, label).toBe("string");
  }
}

describe(`the fuzzer (seed ${SEED}, ${TOTAL} requests)`, () => {
  let t: TextGateway;
  /** Holds ever placed (every call that reached billing places one). */
  const holdCount = () => (t.gateway.db.prepare("SELECT count(*) AS n FROM holds").get() as { n: number }).n;

  beforeAll(async () => {
    t = await startTextGateway((upstream) => ({
      TOLLGATE_GEMINI_URL: upstream,
      TOLLGATE_RATE_LIMIT_RPM: "1000000",
      TOLLGATE_COUNT_TOKENS_RPM: "1000000",
      // The fuzzer sends wrong keys on purpose; key guessing has its own test (key-guessing.test.ts).
      TOLLGATE_AUTH_FAILURES_PER_MINUTE: "1000000",
    }));
    await t.credit(100_000_000_000n);
    console.log(`fuzz: seed ${SEED}, ${TOTAL} requests (TOLLGATE_FUZZ_SEED / TOLLGATE_FUZZ_RUNS)`);
  });

  afterAll(async () => {
    const rows = [...histogram.entries()].sort(([a], [b]) => a - b).map(([s, n]) => `${s}: ${n}`);
    console.log(
      `fuzz: ${sent} requests; statuses ${rows.join(", ")}; ${providerRefused.length} of the 4xx refused by the provider`,
    );
    agent.destroy();
    await t?.close();
  });

  /**
   * Sends one attempt and checks it: below 500, x-request-id, its envelope on a 4xx, and for a
   * refused request no provider call and no hold.
   */
  async function check(attempt: Attempt, envelope: Envelope): Promise<Answer> {
    const upstreamBefore = t.upstream.requests.length;
    const holdsBefore = holdCount();
    const answer = await send(t.baseUrl, attempt);
    sent++;
    histogram.set(answer.status, (histogram.get(answer.status) ?? 0) + 1);
    const label = `${attempt.method} ${attempt.path} → ${answer.status} ${answer.body.toString("utf8").slice(0, 300)}`;
    expect(answer.status, label).toBeLessThan(500);
    expect(answer.headers["x-request-id"], label).toMatch(/\S/);
    if (answer.status >= 400) {
      expectEnvelope(envelope, answer, label);
      if (t.upstream.requests.length === upstreamBefore) {
        expect(holdCount(), `${label}: a refused request placed a hold`).toBe(holdsBefore);
      } else {
        // Forwarded and refused by the provider itself (a field the gateway passes on verbatim):
        // relayed in the envelope, and checked at the end to have been charged nothing.
        providerRefused.push(String(answer.headers["x-request-id"]));
      }
    }
    return answer;
  }

  const runs = (share: number) => Math.max(1, Math.round(TOTAL * share));
  const options = (offset: number, numRuns: number) => ({ seed: SEED + offset, numRuns, endOnFailure: true });

  /**
   * Fuzzes one JSON route: a seed body mutated, sent with a content type and credentials drawn
   * from the arbitraries, and checked.
   */
  async function fuzzJsonRoute(
    path: string,
    seeds: readonly Record<string, unknown>[],
    envelope: Envelope,
    extraHeaders: Record<string, string>,
    offset: number,
    share: number,
  ): Promise<void> {
    await fc.assert(
      fc.asyncProperty(
        fc.nat(seeds.length - 1),
        jsonMutation,
        jsonContentType,
        authArb,
        async (seedIndex, mutation, contentType, auth) => {
          await check(
            {
              method: "POST",
              path,
              headers: {
                ...(contentType === "" ? {} : { "content-type": contentType }),
                ...extraHeaders,
                ...authHeaders(auth, t.secret),
              },
              body: mutateJson(seeds[seedIndex]!, mutation),
            },
            envelope,
          );
        },
      ),
      options(offset, runs(share)),
    );
  }

  it("POST /v1/messages", async () => {
    await fuzzJsonRoute(
      "/v1/messages",
      messageSeeds,
      "anthropic",
      { "anthropic-version": "2023-06-01" },
      0,
      SHARE.messages,
    );
  }, 600_000);

  it("POST /v1/messages/count_tokens", async () => {
    const seeds = messageSeeds.map(({ max_tokens: _m, stream: _s, ...seed }) => seed);
    await fuzzJsonRoute("/v1/messages/count_tokens", seeds, "anthropic", {}, 1, SHARE.countTokens);
  }, 600_000);

  it("POST /v1/images/generations", async () => {
    await fuzzJsonRoute("/v1/images/generations", imageSeeds, "openai", {}, 2, SHARE.generations);
  }, 600_000);

  it("POST /v1/images/edits", async () => {
    await fc.assert(
      fc.asyncProperty(multipartMutation, authArb, async (mutation, auth) => {
        const { contentType, body } = mutateMultipart(mutation);
        await check(
          {
            method: "POST",
            path: "/v1/images/edits",
            headers: { "content-type": contentType, ...authHeaders(auth, t.secret) },
            body,
          },
          "openai",
        );
      }),
      options(3, runs(SHARE.edits)),
    );
  }, 600_000);

  it("the dashboard's public RPCs", async () => {
    const routes = [
      "/dashboard/rpc/tollgate.auth.v1.AuthService/CreateSignInNonce",
      "/dashboard/rpc/tollgate.auth.v1.AuthService/SignIn",
      "/dashboard/rpc/tollgate.billing.v1.BillingService/GetPricing",
      "/dashboard/rpc/tollgate.billing.v1.BillingService/GetBalances",
      "/dashboard/rpc/tollgate.auth.v1.AuthService/CreateKey",
    ];
    const seeds: Record<string, unknown>[] = [
      { chain: "base", address: "0x0000000000000000000000000000000000000001" },
      { message: "tollgate wants you to sign in", signature: "0x00" },
      {},
    ];
    await fc.assert(
      fc.asyncProperty(
        fc.nat(routes.length - 1),
        fc.nat(seeds.length - 1),
        jsonMutation,
        jsonContentType,
        fc.constantFrom<Record<string, string>>(
          {},
          { cookie: "tollgate_session=forged" },
          { cookie: "tollgate_session=forged", "x-csrf-token": "x" },
        ),
        async (route, seed, mutation, contentType, extra) => {
          await check(
            {
              method: "POST",
              path: routes[route]!,
              headers: { ...(contentType === "" ? {} : { "content-type": contentType }), ...extra },
              body: mutateJson(seeds[seed]!, mutation),
            },
            "connect",
          );
        },
      ),
      options(4, runs(SHARE.dashboard)),
    );
  }, 600_000);

  it("GET routes with hostile paths, queries and headers", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(
          "/v1/models",
          "/v1/health",
          "/v1/images/files/",
          "/v1/messages",
          "/dashboard/assets/",
          "/v1/receipts/",
          "/",
        ),
        fc.oneof(
          fc.constantFrom("", "?", "?limit=-1", "?a[b]=1", "?__proto__[x]=1", "%", "%zz", "..%2f..%2fetc"),
          fc.webPath(),
        ),
        authArb,
        async (path, tail, auth) => {
          const full = `${path}${tail}`.replace(/^\/\//, "/");
          const anthropicScope = !full.startsWith("/v1/images") && !full.startsWith("/dashboard/rpc");
          await check(
            {
              method: "GET",
              path: full.startsWith("/") ? full : `/${full}`,
              headers: authHeaders(auth, t.secret),
            },
            anthropicScope ? "anthropic" : "openai",
          );
        },
      ),
      options(5, runs(SHARE.gets)),
    );
  }, 600_000);

  it("is healthy afterwards: health answers, a valid call is served and billed, the ledger is sound", async () => {
    expect(sent).toBeGreaterThanOrEqual(TOTAL * 0.99);
    const health = await fetch(`${t.baseUrl}/v1/health`);
    expect(health.status).toBe(200);
    const before = holdCount();
    const response = await fetch(`${t.baseUrl}/v1/messages`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-api-key": t.secret,
        "anthropic-version": "2023-06-01",
      },
      body: JSON.stringify(messageSeeds[0]),
    });
    expect(response.status).toBe(200);
    expect(holdCount()).toBe(before + 1);
    expect((await t.usage())[0]?.status).toBe(HoldStatus.SETTLED);
    // Nothing polluted the process's prototypes.
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    // What the provider refused was charged nothing (its hold released, never settled above 0).
    const charged = t.gateway.db.prepare(
      "SELECT count(*) AS n FROM holds JOIN hold_resolutions r ON r.hold_id = holds.id WHERE request_id = ? AND r.amount > 0",
    );
    for (const id of providerRefused) expect((charged.get(id) as { n: number }).n, id).toBe(0);
    t.expectSoundLedger();
    const open = t.gateway.db.prepare("SELECT count(*) AS n FROM open_holds").get() as { n: number };
    expect(open.n).toBe(0);
  });
});
