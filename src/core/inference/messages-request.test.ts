import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { errorInfo } from "../errors.js";
import {
  encodeMessagesRequest,
  MAX_MESSAGES,
  type MessagesCall,
  messagesBody,
  parseMessagesRequest,
} from "./messages-request.js";

const MINIMAL = { model: "model-opus-4-8", max_tokens: 1024, messages: [{ role: "user", content: "Hi" }] };

/** The error a body is refused with, checked to be INVALID_FIELD naming `field`. */
function refusal(body: unknown, field: string, call: MessagesCall = "create"): string {
  try {
    const raw = typeof body === "string" || body instanceof Uint8Array ? body : JSON.stringify(body);
    parseMessagesRequest(raw, call);
  } catch (error) {
    if (!(error instanceof ConnectError)) throw error;
    expect(error.code).toBe(Code.InvalidArgument);
    expect(errorInfo(error)?.reason).toBe("INVALID_FIELD");
    expect(errorInfo(error)?.metadata.field).toBe(field);
    expect(error.rawMessage.startsWith(`${field}: `)).toBe(true);
    return error.rawMessage;
  }
  throw new Error("expected a refusal");
}

function withField(field: string, value: unknown): Record<string, unknown> {
  return { ...MINIMAL, [field]: value };
}

/** Parses a create body given as an object and encodes it back, unrepaired, as an object. */
function roundTrip(body: unknown, call: MessagesCall = "create"): Record<string, unknown> {
  return messagesBody(parseMessagesRequest(JSON.stringify(body), call));
}

/** A body shaped like Claude Code's: system-role messages, 24 tools, metadata, beta fields. */
function claudeCodeBody(): Record<string, unknown> {
  const schema = {
    type: "object",
    properties: { path: { type: "string", description: "x".repeat(3_000) } },
    required: ["path"],
    additionalProperties: false,
    $schema: "http://json-schema.org/draft-07/schema#",
  };
  return {
    model: "claude-opus-4-8",
    max_tokens: 64_000,
    stream: true,
    system: [
      { type: "text", text: "You are Claude Code, Anthropic's official CLI for Claude." },
      { type: "text", text: "y".repeat(10_000), cache_control: { type: "ephemeral", ttl: "1h" } },
    ],
    messages: [
      {
        role: "user",
        content: [
          { type: "text", text: "<system-reminder>context</system-reminder>" },
          { type: "text", text: "fix the bug", cache_control: { type: "ephemeral" } },
        ],
      },
      {
        role: "assistant",
        content: [
          { type: "thinking", thinking: "hmm", signature: "sig" },
          { type: "tool_use", id: "toolu_1", name: "Read", input: { path: "a.ts" } },
        ],
      },
      {
        role: "user",
        content: [
          {
            type: "tool_result",
            tool_use_id: "toolu_1",
            content: [{ type: "text", text: "file" }, { type: "future_block" }],
            is_error: false,
          },
        ],
      },
      { role: "system", content: "The user switched to plan mode." },
      { role: "user", content: "continue" },
    ],
    tools: Array.from({ length: 24 }, (_, i) => ({
      name: `Tool${i}`,
      description: "d".repeat(500),
      input_schema: schema,
      ...(i === 0 ? { cache_control: { type: "ephemeral" } } : {}),
    })),
    tool_choice: { type: "auto", disable_parallel_tool_use: false },
    metadata: {
      user_id: JSON.stringify({ device_id: "d".repeat(64), account_uuid: "", session_id: "s" }),
    },
    thinking: { type: "adaptive", display: "summarized" },
    output_config: { effort: "high", format: null, future: 1 },
    context_management: { edits: [{ type: "clear_thinking_20251015", keep: "all" }] },
    cache_control: { type: "ephemeral" },
    service_tier: "auto",
    container: null,
    inference_geo: "us",
    speed: null,
    diagnostics: { cache: true },
    some_future_field: { anything: [1, 2, 3] },
  };
}

describe("parseMessagesRequest", () => {
  it("parses a minimal body from bytes or text", () => {
    const text = JSON.stringify(MINIMAL);
    for (const body of [text, new TextEncoder().encode(text)]) {
      const request = parseMessagesRequest(body, "create");
      expect(request).toEqual({
        call: "create",
        view: {
          model: "model-opus-4-8",
          maxTokens: 1024,
          stream: false,
          thinking: undefined,
          effort: undefined,
          outputConfig: undefined,
          sampling: { temperature: undefined, topP: undefined, topK: undefined },
        },
        rest: { messages: MINIMAL.messages },
        keys: ["model", "max_tokens", "messages"],
      });
    }
  });

  it("accepts a Claude Code body of 75+ KB untouched, unknown fields included", () => {
    const body = JSON.stringify(claudeCodeBody());
    expect(body.length).toBeGreaterThan(75_000);
    const request = parseMessagesRequest(body, "create");
    expect(messagesBody(request)).toEqual(claudeCodeBody());
    expect(encodeMessagesRequest(request)).toBe(body);
    expect(request.view).toMatchObject({ model: "claude-opus-4-8", maxTokens: 64_000, stream: true });
  });

  it("reads stream only when it is true", () => {
    expect(parseMessagesRequest(JSON.stringify(withField("stream", false)), "create").view.stream).toBe(
      false,
    );
    expect(parseMessagesRequest(JSON.stringify(withField("stream", true)), "create").view.stream).toBe(true);
  });

  // Issue 29: max_tokens is an integer >= 1; 0 (once taken as a cache pre-warm) is refused.
  it.each(["0", "-0", "1e-999", "0.5", "1.5", "-1", '"16"', "null"])("refuses max_tokens %s", (raw) => {
    const body = `{"model":"model-opus-4-8","max_tokens":${raw},"messages":[{"role":"user","content":"Hi"}]}`;
    expect(refusal(body, "max_tokens")).toBe("max_tokens: must be an integer >= 1");
  });

  it.each([
    ["1", 1],
    ["1.0", 1],
    ["1e3", 1000],
  ])("takes max_tokens %s as the integer it denotes, %d, and sends that on", (raw, value) => {
    const body = `{"model":"model-opus-4-8","max_tokens":${raw},"messages":[{"role":"user","content":"Hi"}]}`;
    const request = parseMessagesRequest(body, "create");
    expect(request.view.maxTokens).toBe(value);
    expect(encodeMessagesRequest(request)).toContain(`"max_tokens":${value},`);
  });

  it("needs no max_tokens for count_tokens and reports 0 and no stream", () => {
    const { max_tokens: _, ...body } = MINIMAL;
    const request = parseMessagesRequest(JSON.stringify({ ...body, stream: "ignored" }), "count_tokens");
    expect(request.view.maxTokens).toBe(0);
    expect(request.view.stream).toBe(false);
    // Unread there, so passed through as sent.
    expect(request.rest.stream).toBe("ignored");
    const odd = parseMessagesRequest(JSON.stringify({ ...body, max_tokens: "x" }), "count_tokens");
    expect(odd.view.maxTokens).toBe(0);
    expect(messagesBody(odd)).toEqual({ ...body, max_tokens: "x" });
  });

  it("accepts the nulls the API types as nullable", () => {
    const body = {
      ...MINIMAL,
      metadata: { user_id: null },
      output_config: { effort: null, format: null },
      thinking: { type: "adaptive", display: null },
    };
    expect(roundTrip(body)).toEqual(body);
  });

  it("accepts every documented value", () => {
    const body = {
      ...MINIMAL,
      system: "be brief",
      temperature: 0,
      top_p: 1,
      top_k: 0,
      stop_sequences: ["\n\nHuman:"],
      tools: [{ name: "get_weather", input_schema: { type: "object" } }],
      tool_choice: { type: "tool", name: "get_weather" },
      thinking: { type: "enabled", budget_tokens: 1, display: "omitted" },
      metadata: {},
      output_config: { effort: "max", format: { type: "json_schema", schema: {} } },
    };
    expect(roundTrip(body)).toEqual(body);
    for (const type of ["auto", "any", "none"]) {
      parseMessagesRequest(JSON.stringify({ ...body, tool_choice: { type } }), "create");
    }
    for (const effort of ["low", "medium", "high", "xhigh"]) {
      parseMessagesRequest(JSON.stringify(withField("output_config", { effort })), "create");
    }
    for (const thinking of [{ type: "adaptive" }, { type: "disabled" }]) {
      parseMessagesRequest(JSON.stringify(withField("thinking", thinking)), "create");
    }
  });

  it("refuses a body that is not JSON, or not an object", () => {
    expect(refusal("{", "body")).toMatch(/^body: not valid JSON \(.+\)$/);
    expect(refusal("", "body")).toMatch(/^body: not valid JSON/);
    expect(refusal(new Uint8Array([0x7b, 0xff, 0x7d]), "body")).toMatch(/^body: not valid JSON/);
    for (const body of ["[]", "null", "42", '"text"']) expect(refusal(body, "body")).toMatch(/^body: /);
  });

  it("refuses a missing or empty model", () => {
    const { model: _, ...noModel } = MINIMAL;
    expect(refusal(noModel, "model")).toBe("model: Field required");
    expect(refusal(withField("model", ""), "model")).toBe("model: must be a non-empty string");
    expect(refusal(withField("model", 42), "model")).toBe("model: must be a non-empty string");
    expect(refusal(withField("model", null), "model")).toBe("model: must be a non-empty string");
  });

  it("refuses a missing or non-integer max_tokens on create", () => {
    const { max_tokens: _, ...noMax } = MINIMAL;
    expect(refusal(noMax, "max_tokens")).toBe("max_tokens: Field required");
    for (const value of [-1, 1.5, "1024", null, 2 ** 53]) {
      expect(refusal(withField("max_tokens", value), "max_tokens")).toBe(
        "max_tokens: must be an integer >= 1",
      );
    }
  });

  it("refuses a missing or malformed messages array", () => {
    const { messages: _, ...noMessages } = MINIMAL;
    expect(refusal(noMessages, "messages")).toBe("messages: Field required");
    expect(refusal(noMessages, "messages", "count_tokens")).toBe("messages: Field required");
    expect(refusal(withField("messages", {}), "messages")).toBe("messages: must be an array");
    expect(refusal(withField("messages", null), "messages")).toBe("messages: must be an array");
    expect(refusal(withField("messages", []), "messages")).toBe("messages: at least one message is required");
    expect(refusal(withField("messages", []), "messages", "count_tokens")).toBe(
      "messages: at least one message is required",
    );
  });

  it("refuses more than MAX_MESSAGES messages", () => {
    const one = { role: "user", content: "x" };
    const ok = Array.from({ length: MAX_MESSAGES }, () => one);
    expect(
      parseMessagesRequest(JSON.stringify(withField("messages", ok)), "create").rest.messages,
    ).toHaveLength(MAX_MESSAGES);
    expect(refusal(withField("messages", [...ok, one]), "messages")).toMatch(/^messages: at most 100000/);
  });

  it("names the message at fault", () => {
    const user = { role: "user", content: "x" };
    const at2 = (message: unknown) => withField("messages", [user, user, message]);
    expect(refusal(at2("hi"), "messages.2")).toBe("messages.2: must be an object");
    expect(refusal(at2({ content: "x" }), "messages.2.role")).toBe("messages.2.role: Field required");
    expect(refusal(at2({ role: "tool", content: "x" }), "messages.2.role")).toBe(
      'messages.2.role: must be one of "user", "assistant", "system"',
    );
    expect(refusal(at2({ role: "user" }), "messages.2.content")).toBe("messages.2.content: Field required");
    expect(refusal(at2({ role: "user", content: null }), "messages.2.content")).toMatch(
      /^messages\.2\.content: must be a string or an array/,
    );
    expect(refusal(at2({ role: "user", content: ["x"] }), "messages.2.content.0")).toBe(
      "messages.2.content.0: must be an object",
    );
    expect(refusal(at2({ role: "user", content: [{ type: "text" }, {}] }), "messages.2.content.1.type")).toBe(
      "messages.2.content.1.type: Field required",
    );
    expect(refusal(at2({ role: "user", content: [{ type: 3 }] }), "messages.2.content.0.type")).toBe(
      "messages.2.content.0.type: must be a string",
    );
  });

  it("does not look inside content blocks", () => {
    const content = [
      { type: "tool_result", content: [{ nonsense: true }] },
      { type: "unheard_of", x: null },
    ];
    parseMessagesRequest(JSON.stringify(withField("messages", [{ role: "user", content }])), "create");
  });

  it("refuses a malformed system", () => {
    expect(refusal(withField("system", 42), "system")).toMatch(/^system: must be a string or an array/);
    expect(refusal(withField("system", null), "system")).toMatch(/^system: /);
    expect(refusal(withField("system", [{ text: "x" }]), "system.0.type")).toBe(
      "system.0.type: Field required",
    );
    expect(refusal(withField("system", [null]), "system.0")).toBe("system.0: must be an object");
  });

  it("refuses sampling parameters out of range", () => {
    for (const field of ["temperature", "top_p"]) {
      for (const value of [-0.1, 1.01, "0.5", null]) {
        expect(refusal(withField(field, value), field)).toBe(`${field}: must be a number between 0 and 1`);
      }
    }
    for (const value of [-1, 0.5, "5", null]) {
      expect(refusal(withField("top_k", value), "top_k")).toBe("top_k: must be an integer >= 0");
    }
  });

  it("refuses stop_sequences that are not strings", () => {
    expect(refusal(withField("stop_sequences", "STOP"), "stop_sequences")).toBe(
      "stop_sequences: must be an array of strings",
    );
    expect(refusal(withField("stop_sequences", ["a", 1]), "stop_sequences.1")).toBe(
      "stop_sequences.1: must be a string",
    );
  });

  it("refuses a non-boolean stream on create only", () => {
    expect(refusal(withField("stream", "yes"), "stream")).toBe("stream: must be a boolean");
    expect(refusal(withField("stream", null), "stream")).toBe("stream: must be a boolean");
  });

  it("refuses malformed tools and tool_choice", () => {
    expect(refusal(withField("tools", {}), "tools")).toBe("tools: must be an array");
    expect(refusal(withField("tools", [{}, "x"]), "tools.1")).toBe("tools.1: must be an object");
    expect(refusal(withField("tool_choice", "auto"), "tool_choice")).toBe("tool_choice: must be an object");
    expect(refusal(withField("tool_choice", {}), "tool_choice.type")).toBe(
      "tool_choice.type: Field required",
    );
    expect(refusal(withField("tool_choice", { type: "some" }), "tool_choice.type")).toBe(
      'tool_choice.type: must be one of "auto", "any", "tool", "none"',
    );
    expect(refusal(withField("tool_choice", { type: "tool" }), "tool_choice.name")).toBe(
      "tool_choice.name: Field required",
    );
    expect(refusal(withField("tool_choice", { type: "tool", name: 1 }), "tool_choice.name")).toBe(
      "tool_choice.name: must be a string",
    );
  });

  it("refuses a tool_choice that needs a tool the request does not have", () => {
    const tools = [{ name: "weather", input_schema: { type: "object" } }];
    expect(refusal(withField("tool_choice", { type: "any" }), "tool_choice")).toBe(
      "tool_choice: type any needs tools",
    );
    expect(refusal({ ...MINIMAL, tools: [], tool_choice: { type: "tool", name: "x" } }, "tool_choice")).toBe(
      "tool_choice: type tool needs tools",
    );
    expect(
      refusal({ ...MINIMAL, tools, tool_choice: { type: "tool", name: "clock" } }, "tool_choice.name"),
    ).toBe('tool_choice.name: no tool named "clock" in tools');
    for (const choice of [
      { type: "any" },
      { type: "tool", name: "weather" },
      { type: "auto" },
      { type: "none" },
    ]) {
      expect(() =>
        parseMessagesRequest(JSON.stringify({ ...MINIMAL, tools, tool_choice: choice }), "create"),
      ).not.toThrow();
    }
    expect(() =>
      parseMessagesRequest(JSON.stringify(withField("tool_choice", { type: "auto" })), "create"),
    ).not.toThrow();
  });

  it("refuses malformed thinking", () => {
    expect(refusal(withField("thinking", true), "thinking")).toBe("thinking: must be an object");
    expect(refusal(withField("thinking", null), "thinking")).toBe("thinking: must be an object");
    expect(refusal(withField("thinking", {}), "thinking.type")).toBe("thinking.type: Field required");
    expect(refusal(withField("thinking", { type: "on" }), "thinking.type")).toBe(
      'thinking.type: must be one of "enabled", "adaptive", "disabled"',
    );
    expect(refusal(withField("thinking", { type: "enabled" }), "thinking.budget_tokens")).toBe(
      "thinking.budget_tokens: Field required",
    );
    for (const budget_tokens of [0, 1.5, "2048"]) {
      expect(
        refusal(withField("thinking", { type: "enabled", budget_tokens }), "thinking.budget_tokens"),
      ).toBe("thinking.budget_tokens: must be an integer >= 1");
    }
    expect(refusal(withField("thinking", { type: "adaptive", display: "full" }), "thinking.display")).toBe(
      'thinking.display: must be one of "summarized", "omitted"',
    );
  });

  it("refuses malformed metadata", () => {
    expect(refusal(withField("metadata", "u"), "metadata")).toBe("metadata: must be an object");
    expect(refusal(withField("metadata", null), "metadata")).toBe("metadata: must be an object");
    expect(refusal(withField("metadata", { user_id: 7 }), "metadata.user_id")).toBe(
      "metadata.user_id: must be a string",
    );
  });

  it("refuses malformed output_config", () => {
    expect(refusal(withField("output_config", []), "output_config")).toBe("output_config: must be an object");
    expect(refusal(withField("output_config", null), "output_config")).toBe(
      "output_config: must be an object",
    );
    expect(refusal(withField("output_config", { effort: "extreme" }), "output_config.effort")).toBe(
      'output_config.effort: must be one of "low", "medium", "high", "xhigh", "max"',
    );
    expect(refusal(withField("output_config", { format: "json" }), "output_config.format")).toBe(
      "output_config.format: must be an object",
    );
  });

  it("validates count_tokens bodies the same way, bar max_tokens and stream", () => {
    const { max_tokens: _, ...body } = MINIMAL;
    expect(refusal({ ...body, temperature: 2 }, "temperature", "count_tokens")).toMatch(/^temperature: /);
    expect(refusal({ ...body, thinking: { type: "x" } }, "thinking.type", "count_tokens")).toMatch(
      /^thinking\.type: /,
    );
  });
});

describe("the typed view", () => {
  it("types what the gateway reads and keeps the nested fields it does not", () => {
    const { view } = parseMessagesRequest(
      JSON.stringify({
        ...MINIMAL,
        stream: true,
        temperature: 0.5,
        top_p: 0.9,
        top_k: 7,
        thinking: { type: "enabled", budget_tokens: 2048, display: "omitted", future: [1] },
        output_config: { effort: "high", format: null, future: "x" },
      }),
      "create",
    );
    expect(view).toEqual({
      model: "model-opus-4-8",
      maxTokens: 1024,
      stream: true,
      thinking: { type: "enabled", budgetTokens: 2048, display: "omitted", extra: { future: [1] } },
      effort: "high",
      outputConfig: { format: null, future: "x" },
      sampling: { temperature: 0.5, topP: 0.9, topK: 7 },
    });
  });

  it("keeps a budget_tokens sent with another thinking type as one of its other fields", () => {
    const { view } = parseMessagesRequest(
      JSON.stringify(withField("thinking", { type: "adaptive", budget_tokens: 5 })),
      "create",
    );
    expect(view.thinking).toEqual({ type: "adaptive", display: undefined, extra: { budget_tokens: 5 } });
  });

  it("passes every other top-level field through untouched, unknown ones included", () => {
    const body = claudeCodeBody();
    const request = parseMessagesRequest(JSON.stringify(body), "create");
    const typed = ["model", "max_tokens", "stream", "thinking", "output_config"];
    expect(Object.keys(request.rest)).toEqual(Object.keys(body).filter((key) => !typed.includes(key)));
    expect(request.rest).toMatchObject({
      some_future_field: { anything: [1, 2, 3] },
      diagnostics: { cache: true },
      service_tier: "auto",
      container: null,
      metadata: body.metadata,
    });
    expect(request.rest.messages).toEqual(body.messages);
  });

  it("encodes in the caller's key order, fields added by repair last", () => {
    const text =
      '{"messages":[{"role":"user","content":"x"}],"top_k":3,"x_new":{"a":1},"max_tokens":5,"model":"m"}';
    const request = parseMessagesRequest(text, "create");
    expect(encodeMessagesRequest(request)).toBe(text);
    const view = {
      ...request.view,
      model: "upstream",
      sampling: { ...request.view.sampling, topK: undefined },
      effort: "low" as const,
    };
    expect(encodeMessagesRequest({ ...request, view })).toBe(
      '{"messages":[{"role":"user","content":"x"}],"x_new":{"a":1},"max_tokens":5,"model":"upstream",' +
        '"output_config":{"effort":"low"}}',
    );
  });

  it("writes an explicit stream: false back, and no stream when none was sent", () => {
    expect(roundTrip(withField("stream", false))).toEqual(withField("stream", false));
    expect(roundTrip(MINIMAL)).not.toHaveProperty("stream");
  });

  it("keeps a __proto__ field a field", () => {
    const text =
      '{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"__proto__":{"x":1}}';
    const request = parseMessagesRequest(text, "create");
    expect(Object.hasOwn(request.rest, "__proto__")).toBe(true);
    expect(encodeMessagesRequest(request)).toBe(text);
  });
});
