import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { accountWithKey } from "../helpers/app.js";
import { startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

// The metrics endpoint of a real gateway (SQLite ledger, the dev upstream behind it on real
// sockets), scraped after a known set of calls made with the official SDKs: it must show exactly
// those counts, and exactly the amounts the ledger charged.

/** One sample of the exposition text. */
interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

/** Parses Prometheus's text format (comments skipped; label values unescaped). */
function parseExposition(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (match === null) throw new Error(`not an exposition line: ${line}`);
    const labels: Record<string, string> = {};
    for (const label of (match[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g))
      labels[label[1]!] = label[2]!.replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c));
    samples.push({ name: match[1]!, labels, value: Number(match[3]) });
  }
  return samples;
}

/** The sum of every sample of `name` whose labels include `labels`. */
function total(samples: readonly Sample[], name: string, labels: Record<string, string> = {}): number {
  return samples
    .filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
    .reduce((sum, s) => sum + s.value, 0);
}

let t: TextGateway;
let metricsUrl: string;

beforeAll(async () => {
  t = await startTextGateway((upstream) => ({ TOLLGATE_GEMINI_URL: upstream, TOLLGATE_METRICS_PORT: "0" }));
  metricsUrl = await t.gateway.app.metrics!.listen("127.0.0.1", 0);
  await t.credit(5_000_000n);
});
afterAll(async () => {
  await t?.close();
});

async function scrape(): Promise<{ text: string; contentType: string }> {
  const response = await fetch(metricsUrl);
  expect(response.status).toBe(200);
  return { text: await response.text(), contentType: response.headers.get("content-type") ?? "" };
}

describe("the metrics endpoint", () => {
  it("shows exactly the calls made and the amounts the ledger charged", async () => {
    const anthropic = new Anthropic({ apiKey: t.secret, baseURL: t.baseUrl, maxRetries: 0 });
    const ask = { max_tokens: 64, messages: [{ role: "user" as const, content: "hello" }] };
    await anthropic.messages.create({ model: "model-haiku-4-5", ...ask });
    await anthropic.messages.create({ model: "model-sonnet-4-6", ...ask });
    const stream = anthropic.messages.stream({ model: "model-haiku-4-5", ...ask });
    await stream.finalMessage();
    const openai = new OpenAI({ apiKey: t.secret, baseURL: `${t.baseUrl}/v1`, maxRetries: 0 });
    await openai.images.generate({ model: "image-2", prompt: "a lighthouse", response_format: "b64_json" });
    // A bad request (no max_tokens) and a call an empty wallet cannot cover.
    await expect(
      anthropic.messages.create({ model: "model-haiku-4-5", messages: ask.messages } as never),
    ).rejects.toMatchObject({ status: 400 });
    // Usage the gateway cannot price in full: the known part is charged, the call counted.
    t.script(() => ({
      kind: "json",
      status: 200,
      body: {
        id: "msg_unpriced",
        type: "message",
        role: "assistant",
        model: "claude-sonnet-4-6",
        content: [{ type: "text", text: "an answer" }],
        stop_reason: "end_turn",
        stop_sequence: null,
        usage: { input_tokens: 10, output_tokens: 5, container_seconds: 42 },
      },
    }));
    await anthropic.messages.create({ model: "model-sonnet-4-6", ...ask });
    // A provider failure: held, then released, nothing charged.
    t.script((request) =>
      request.path === "/v1/messages"
        ? {
            kind: "json",
            status: 500,
            body: { type: "error", error: { type: "api_error", message: "down" } },
          }
        : undefined,
    );
    await expect(anthropic.messages.create({ model: "model-haiku-4-5", ...ask })).rejects.toMatchObject({
      status: 502,
    });
    t.script(undefined);
    const poor = await accountWithKey(t.gateway.operator, "poor");
    const broke = new Anthropic({ apiKey: poor.secret, baseURL: t.baseUrl, maxRetries: 0 });
    await expect(broke.messages.create({ model: "model-haiku-4-5", ...ask })).rejects.toMatchObject({
      status: 402,
    });

    const { text, contentType } = await scrape();
    expect(contentType).toContain("text/plain");
    const samples = parseExposition(text);
    const requests = (labels: Record<string, string>) =>
      total(samples, "tollgate_http_requests_total", labels);
    const messages = { route: "/v1/messages", method: "POST" };
    expect(requests({ ...messages, status: "200", reason: "none" })).toBe(4);
    expect(requests({ ...messages, status: "400", reason: "invalid_field" })).toBe(1);
    expect(requests({ ...messages, status: "402", reason: "insufficient_funds" })).toBe(1);
    expect(requests({ ...messages, status: "502", reason: "upstream_error" })).toBe(1);
    expect(requests({ route: "/v1/images/generations", status: "200" })).toBe(1);
    expect(total(samples, "tollgate_payment_required_total")).toBe(1);
    expect(total(samples, "tollgate_payment_required_total", { reason: "insufficient_funds" })).toBe(1);

    // Only the six admitted calls were held: five settled, the failed one released.
    expect(total(samples, "tollgate_holds_placed_total", { kind: "text" })).toBe(5);
    expect(total(samples, "tollgate_holds_placed_total", { kind: "image" })).toBe(1);
    expect(total(samples, "tollgate_holds_resolved_total", { outcome: "settled" })).toBe(5);
    expect(total(samples, "tollgate_holds_resolved_total", { outcome: "released" })).toBe(1);
    expect(total(samples, "tollgate_holds_resolved_total", { outcome: "swept" })).toBe(0);
    expect(total(samples, "tollgate_unpriced_usage_calls_total")).toBe(1);

    // Amounts: exactly the ledger's settled rows, per chain and model.
    const rows = (await t.usage()).filter((row) => row.status === HoldStatus.SETTLED);
    expect(rows).toHaveLength(5);
    const byModel = new Map<string, bigint>();
    for (const row of rows) {
      const key = `${row.chain}/${row.model}`;
      byModel.set(key, (byModel.get(key) ?? 0n) + row.amount);
    }
    expect(byModel.size).toBe(3);
    const charged = samples.filter((s) => s.name === "tollgate_charged_microdollars_total");
    expect(new Map(charged.map((s) => [`${s.labels.chain}/${s.labels.model}`, BigInt(s.value)]))).toEqual(
      byModel,
    );

    // Latency: one provider time per call, one gateway overhead per model call, one streamed first byte.
    const count = (name: string, labels: Record<string, string> = {}) =>
      total(samples, `${name}_count`, labels);
    expect(count("tollgate_provider_latency_seconds", { kind: "text" })).toBe(4);
    expect(count("tollgate_provider_latency_seconds", { kind: "image" })).toBe(1);
    expect(count("tollgate_gateway_added_latency_seconds", { route: "/v1/messages" })).toBe(4);
    expect(count("tollgate_gateway_added_latency_seconds", { route: "/v1/images/generations" })).toBe(1);
    expect(count("tollgate_stream_first_byte_seconds", { route: "/v1/messages" })).toBe(1);
    expect(count("tollgate_http_request_duration_seconds", { route: "/v1/messages" })).toBe(7);
    // prom-client's default metrics, event-loop delay among them.
    expect(samples.some((s) => s.name === "nodejs_eventloop_lag_p99_seconds")).toBe(true);
    t.expectSoundLedger();
  });

  it("answers only GET /metrics", async () => {
    const other = await fetch(new URL("/", metricsUrl));
    expect(other.status).toBe(404);
    await other.text();
  });
});
