import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { DEV_TEXT_LABEL, type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { sseFrames } from "../../src/upstream/sse.js";
import { runClaude } from "../helpers/claude-code.js";

// Claude Code's WebSearch against the dev upstream alone: the main request offers a client tool
// `WebSearch`; the model's tool_use of it makes the CLI send its own request with a web_search
// server tool; the search results come back to the main loop as a tool_result. The request
// shapes below are what Claude Code 2.1.197 sent (captured against the dev upstream).

const MODEL = "claude-opus-4-8";

/** Claude Code's client WebSearch tool, as its main request offers it. */
const WEB_SEARCH_CLIENT_TOOL = {
  name: "WebSearch",
  description: "Search the web. Returns result blocks with titles and URLs. US-only.",
  input_schema: {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    type: "object",
    properties: {
      query: { description: "The search query to use", type: "string", minLength: 2 },
      allowed_domains: { type: "array", items: { type: "string" } },
      blocked_domains: { type: "array", items: { type: "string" } },
    },
    required: ["query"],
    additionalProperties: false,
  },
};
const BASH_TOOL = {
  name: "Bash",
  description: "Runs a command",
  input_schema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] },
};

/** The main request's first turn: a reminder block, then the prompt; a mid-conversation system message last. */
function mainRequest(
  prompt: string,
  tools: unknown[] = [BASH_TOOL, WEB_SEARCH_CLIENT_TOOL],
): Record<string, unknown> {
  return {
    model: MODEL,
    max_tokens: 64000,
    stream: true,
    thinking: { type: "adaptive" },
    context_management: { edits: [{ type: "clear_thinking_20251015", keep: "all" }] },
    output_config: { effort: "high" },
    system: [{ type: "text", text: "You are Claude Code." }],
    tools,
    messages: [
      {
        role: "user",
        content: [
          { type: "text", text: "<system-reminder>\nToday's date is 2026-11-24.\n</system-reminder>\n\n" },
          { type: "text", text: prompt, cache_control: { type: "ephemeral" } },
        ],
      },
      { role: "system", content: "Available agent types for the Agent tool: …" },
    ],
  };
}

/** The web-search sub-request, as the CLI sends it (metadata left out). */
function searchSubRequest(query: string): Record<string, unknown> {
  return {
    model: MODEL,
    messages: [
      { role: "user", content: [{ type: "text", text: `Perform a web search for the query: ${query}` }] },
    ],
    system: [
      { type: "text", text: "x-anthropic-billing-header: cc_version=2.1.197.3d9; cc_entrypoint=sdk-cli;" },
      { type: "text", text: "You are a Claude agent, built on Anthropic's Claude Agent SDK." },
      { type: "text", text: "You are an assistant for performing a web search tool use" },
    ],
    tools: [{ type: "web_search_20250305", name: "web_search", max_uses: 8 }],
    tool_choice: { type: "tool", name: "web_search" },
    max_tokens: 64000,
    thinking: { type: "disabled" },
    output_config: { effort: "high" },
    stream: true,
  };
}

interface Streamed {
  readonly content: Record<string, unknown>[];
  readonly stopReason: unknown;
  readonly usage: Record<string, unknown>;
}

/** Posts a streamed request and assembles the message as a client would (usage: overwrite, never add). */
async function streamed(upstream: DevUpstream, body: unknown): Promise<Streamed> {
  const response = await fetch(`${upstream.url}/v1/messages?beta=true`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  expect(response.status).toBe(200);
  const content: Record<string, unknown>[] = [];
  const json = new Map<number, string>();
  let usage: Record<string, unknown> = {};
  let stopReason: unknown;
  for await (const frame of sseFrames(response.body!)) {
    if (frame.kind !== "event") continue;
    const data = JSON.parse(frame.data);
    if (frame.event === "message_start") usage = { ...data.message.usage };
    if (frame.event === "content_block_start") content[data.index] = { ...data.content_block };
    if (frame.event === "content_block_delta") {
      const block = content[data.index]!;
      if (data.delta.type === "text_delta") block.text = `${block.text}${data.delta.text}`;
      if (data.delta.type === "input_json_delta") {
        json.set(data.index, `${json.get(data.index) ?? ""}${data.delta.partial_json}`);
      }
    }
    if (frame.event === "content_block_stop" && json.has(data.index)) {
      content[data.index]!.input = JSON.parse(json.get(data.index)!);
    }
    if (frame.event === "message_delta") {
      stopReason = data.delta.stop_reason;
      Object.assign(usage, data.usage);
    }
  }
  return { content, stopReason, usage };
}

describe("Claude Code's WebSearch flow on the wire", () => {
  let upstream: DevUpstream;
  beforeEach(async () => {
    upstream = await startDevUpstream();
  });
  afterEach(async () => {
    await upstream.close();
  });

  it("calls the client WebSearch tool when asked to search the web", async () => {
    const answer = await streamed(upstream, mainRequest("search the web for tollgate pricing"));
    expect(answer.content.map((block) => block.type)).toEqual(["thinking", "tool_use"]);
    expect(answer.content[1]).toMatchObject({ name: "WebSearch", input: { query: "tollgate pricing" } });
    expect(answer.stopReason).toBe("tool_use");
    // A client tool: no server tool use to report.
    expect(answer.usage.server_tool_use).toBeUndefined();
  });

  it("answers in text without the tool, or when not asked to search", async () => {
    const noTool = await streamed(upstream, mainRequest("search the web for tollgate pricing", [BASH_TOOL]));
    expect(noTool.content.map((block) => block.type)).toEqual(["thinking", "text"]);
    const notAsked = await streamed(upstream, mainRequest("what is tollgate pricing?"));
    expect(notAsked.content.map((block) => block.type)).toEqual(["thinking", "text"]);
    expect(notAsked.stopReason).toBe("end_turn");
  });

  it("answers the CLI's search sub-request with three searches despite max_uses 8", async () => {
    const answer = await streamed(upstream, searchSubRequest("tollgate pricing"));
    expect(answer.content.map((block) => block.type)).toEqual([
      "server_tool_use",
      "web_search_tool_result",
      "server_tool_use",
      "web_search_tool_result",
      "server_tool_use",
      "web_search_tool_result",
      "text",
    ]);
    expect(answer.content[0]).toMatchObject({ name: "web_search", input: { query: "tollgate pricing" } });
    expect(answer.stopReason).toBe("end_turn");
    expect(answer.usage.server_tool_use).toEqual({ web_search_requests: 3, web_fetch_requests: 0 });
  });

  it("answers the tool result with text, not another call", async () => {
    const first = mainRequest("search the web for tollgate pricing");
    const call = (await streamed(upstream, first)).content;
    const toolUse = call.find((block) => block.type === "tool_use")!;
    const followUp = {
      ...first,
      messages: [
        ...(first.messages as unknown[]),
        { role: "assistant", content: call },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: toolUse.id, content: 'Web search results for query: "x"' },
          ],
        },
      ],
    };
    const answer = await streamed(upstream, followUp);
    expect(answer.content.at(-1)).toEqual({
      type: "text",
      text: `${DEV_TEXT_LABEL} You sent 1 tool result.`,
    });
    expect(answer.stopReason).toBe("end_turn");
  });
});

/** Runs the CLI against the dev upstream (which takes any token). */
function claude(baseUrl: string, prompt: string, args: readonly string[]) {
  return runClaude({ baseUrl, token: "dev-token", prompt, args });
}

describe("the Claude Code CLI's WebSearch against the dev upstream", () => {
  let upstream: DevUpstream;
  beforeEach(async () => {
    upstream = await startDevUpstream();
  });
  afterEach(async () => {
    await upstream.close();
  });

  const bodies = () => upstream.messageRequests().map((request) => request.body as Record<string, unknown>);

  it("searches when WebSearch is allowed: main request, search sub-request, main request with the results", async () => {
    const run = await claude(upstream.url, "search the web for tollgate pricing", [
      "--allowedTools",
      "WebSearch",
    ]);
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    expect(run.stdout).toContain(`${DEV_TEXT_LABEL} You sent 1 tool result.`);
    const [main, search, followUp] = bodies();
    expect(bodies()).toHaveLength(3);
    expect((main!.tools as { name: string }[]).map((tool) => tool.name)).toContain("WebSearch");
    expect(search).toMatchObject({
      model: main!.model,
      max_tokens: 64000,
      stream: true,
      thinking: { type: "disabled" },
      tools: [{ type: "web_search_20250305", name: "web_search", max_uses: 8 }],
      tool_choice: { type: "tool", name: "web_search" },
      messages: [
        {
          role: "user",
          content: [{ type: "text", text: "Perform a web search for the query: tollgate pricing" }],
        },
      ],
    });
    expect(upstream.messageRequests()[1]!.headers["anthropic-beta"]).toContain("claude-code-20250219");
    // The CLI turned the three searches' results into the tool result of its next turn.
    const toolResult = JSON.stringify((followUp!.messages as unknown[]).at(-1));
    expect(toolResult).toContain("tool_result");
    expect(toolResult.match(/example\.invalid\/dev-upstream\/search\//g)?.length).toBe(6);
  });

  it("does not search headless without the permission", async () => {
    const run = await claude(upstream.url, "search the web for tollgate pricing", []);
    expect(run.code).toBe(0);
    expect(bodies()).toHaveLength(2);
    const toolResult = JSON.stringify((bodies()[1]!.messages as unknown[]).at(-1));
    expect(toolResult).toContain("haven't granted it yet");
  });
});
