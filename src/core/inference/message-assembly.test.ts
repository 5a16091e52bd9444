import { createParser } from "eventsource-parser";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type DevUpstream, startDevUpstream } from "../../dev/provider/dev-upstream.js";
import { MessageAssembly } from "./message-assembly.js";
import { passBoundary, pausedTurnEnding } from "./passes.js";

// The dev upstream answers the same request alike streamed or not (its ids aside): the message
// put together from its stream must be the one it answers whole.

let upstream: DevUpstream;
beforeAll(async () => {
  upstream = await startDevUpstream();
});
afterAll(async () => {
  await upstream.close();
});

async function call(body: Record<string, unknown>): Promise<Response> {
  const response = await fetch(`${upstream.url}/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": "dev", "anthropic-version": "2023-06-01" },
    body: JSON.stringify(body),
  });
  expect(response.status).toBe(200);
  return response;
}

async function events(body: Record<string, unknown>): Promise<{ event: string; data: string }[]> {
  const out: { event: string; data: string }[] = [];
  const parser = createParser({ onEvent: (e) => out.push({ event: e.event ?? "message", data: e.data }) });
  parser.feed(await (await call({ ...body, stream: true })).text());
  return out;
}

/** A message without the ids the dev upstream draws afresh per answer. */
function withoutIds(text: string): unknown {
  return JSON.parse(text.replace(/"(msg|srvtoolu|toolu)_dev[A-Za-z0-9_-]*"/g, '"ID"'));
}

const REQUESTS: Record<string, Record<string, unknown>> = {
  "plain text": {
    model: "claude-sonnet-4-6",
    max_tokens: 200,
    messages: [{ role: "user", content: "Say hello to the gateway" }],
  },
  "three searches, a fetch and the advisor": {
    model: "claude-sonnet-4-6",
    max_tokens: 400,
    messages: [{ role: "user", content: "search the web for tollgate pricing" }],
    tools: [
      { type: "web_search_20250305", name: "web_search", max_uses: 5 },
      { type: "web_fetch_20250910", name: "web_fetch" },
      { type: "advisor_20260301", name: "advisor", model: "claude-opus-4-8" },
    ],
  },
  "thinking and a client tool": {
    model: "claude-sonnet-4-6",
    max_tokens: 2000,
    thinking: { type: "enabled", budget_tokens: 1024 },
    messages: [{ role: "user", content: "What is the weather in Paris? Use the tool." }],
    tools: [
      { name: "get_weather", input_schema: { type: "object", properties: { city: { type: "string" } } } },
    ],
    tool_choice: { type: "any" },
  },
};

describe("MessageAssembly", () => {
  it.each(Object.entries(REQUESTS))(
    "puts together the message the provider answers whole: %s",
    async (_, body) => {
      const whole = await (await call(body)).text();
      const assembly = new MessageAssembly();
      for (const { event, data } of await events(body)) assembly.add(event, data);
      expect(withoutIds(assembly.text())).toEqual(withoutIds(whole));
    },
  );

  it("ends a paused turn as a message whose stop reason is pause_turn", async () => {
    const body = REQUESTS["three searches, a fetch and the advisor"]!;
    const assembly = new MessageAssembly();
    for (const { event, data } of await events(body)) {
      if (passBoundary(event, data)?.kind === "server_tool") {
        for (const end of pausedTurnEnding(42n)) assembly.add(end.event, end.data);
        break;
      }
      assembly.add(event, data);
    }
    const message = JSON.parse(assembly.text()) as { stop_reason: string; usage: { output_tokens: number } };
    expect(message.stop_reason).toBe("pause_turn");
    expect(message.usage.output_tokens).toBe(42);
  });
});

describe("passBoundary", () => {
  it("finds the server tool calls of a loop, and nothing else", async () => {
    const found = (await events(REQUESTS["three searches, a fetch and the advisor"]!))
      .map(({ event, data }) => passBoundary(event, data))
      .filter((b) => b !== undefined);
    // Each tool's result is one too (its size bounds what the next pass reads).
    const results = found.filter((b) => b.kind === "result");
    expect(results).toHaveLength(5);
    for (const result of results) expect(result.bytes).toBeGreaterThan(50);
    expect(found.filter((b) => b.kind !== "result")).toEqual([
      { kind: "server_tool", name: "web_search" },
      { kind: "server_tool", name: "web_search" },
      { kind: "server_tool", name: "web_search" },
      { kind: "server_tool", name: "web_fetch" },
      { kind: "server_tool", name: "advisor" },
    ]);
    const plain = (await events(REQUESTS["plain text"]!)).filter(({ event, data }) =>
      passBoundary(event, data),
    );
    expect(plain).toEqual([]);
  });

  it("reads compaction and fallback blocks as boundaries", () => {
    const start = (block: unknown) =>
      JSON.stringify({ type: "content_block_start", index: 0, content_block: block });
    expect(passBoundary("content_block_start", start({ type: "compaction", content: null }))).toEqual({
      kind: "compaction",
    });
    expect(
      passBoundary(
        "content_block_start",
        start({ type: "fallback", from: { model: "a" }, to: { model: "b" } }),
      ),
    ).toEqual({
      kind: "fallback",
      to: "b",
    });
    expect(
      passBoundary("content_block_start", start({ type: "text", text: "server_tool_use" })),
    ).toBeUndefined();
    expect(passBoundary("content_block_delta", start({ type: "server_tool_use" }))).toBeUndefined();
  });
});
