import type { ConnectError } from "@connectrpc/connect";
import { invalidField } from "../errors.js";

/** Which Messages API endpoint a body was sent to. */
export type MessagesCall = "create" | "count_tokens";

/** A validated request body. `json` is the parsed body; repair mutates it; unknown fields are passed through untouched. */
export interface MessagesRequest {
  readonly json: Record<string, unknown>;
  /** The model as the client named it. */
  readonly model: string;
  /** create: the client's max_tokens; count_tokens: 0. */
  readonly maxTokens: number;
  /** create: stream === true; count_tokens: false. */
  readonly stream: boolean;
}

/** More entries than any real conversation: a bound on the work one request can cause. */
export const MAX_MESSAGES = 100_000;

const ROLES = ["user", "assistant", "system"];
const TOOL_CHOICE_TYPES = ["auto", "any", "tool", "none"];
const THINKING_TYPES = ["enabled", "adaptive", "disabled"];
const THINKING_DISPLAYS = ["summarized", "omitted"];
const EFFORT_VALUES = ["low", "medium", "high", "xhigh", "max"];

// Fatal: a body that is not UTF-8 is refused rather than forwarded with replacement characters.
const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * Parses and validates a Messages API body (bytes or text); throws invalidField naming the field.
 * Only what the gateway relies on is checked (the provider validates the rest), so every field
 * a real client sends, known or not, passes through untouched.
 */
export function parseMessagesRequest(body: Uint8Array | string, call: MessagesCall): MessagesRequest {
  const json = parseBody(body);

  const model = json.model;
  if (model === undefined) throw required("model");
  if (typeof model !== "string" || model === "")
    throw invalidField("model", "model: must be a non-empty string");

  let maxTokens = 0;
  let stream = false;
  if (call === "create") {
    const value = json.max_tokens;
    if (value === undefined) throw required("max_tokens");
    // 0 is valid: it only pre-warms the prompt cache.
    if (!isCount(value, 0)) throw invalidField("max_tokens", "max_tokens: must be an integer >= 0");
    maxTokens = value;
    if (json.stream !== undefined) {
      if (typeof json.stream !== "boolean") throw invalidField("stream", "stream: must be a boolean");
      stream = json.stream;
    }
  }

  checkMessages(json.messages);
  if (json.system !== undefined && typeof json.system !== "string") {
    checkBlocks(json.system, "system", "system: must be a string or an array of content blocks");
  }
  checkUnitInterval(json, "temperature");
  checkUnitInterval(json, "top_p");
  if (json.top_k !== undefined && !isCount(json.top_k, 0)) {
    throw invalidField("top_k", "top_k: must be an integer >= 0");
  }
  checkStopSequences(json.stop_sequences);
  checkTools(json.tools);
  checkToolChoice(json.tool_choice);
  checkThinking(json.thinking);
  checkMetadata(json.metadata);
  checkOutputConfig(json.output_config);
  return { json, model, maxTokens, stream };
}

function parseBody(body: Uint8Array | string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(typeof body === "string" ? body : utf8.decode(body));
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw invalidField("body", `body: not valid JSON (${reason})`);
  }
  if (!isObject(parsed)) throw invalidField("body", "body: must be a JSON object");
  return parsed;
}

function checkMessages(messages: unknown): void {
  if (messages === undefined) throw required("messages");
  if (!Array.isArray(messages)) throw invalidField("messages", "messages: must be an array");
  if (messages.length > MAX_MESSAGES) {
    throw invalidField("messages", `messages: at most ${MAX_MESSAGES} messages are allowed`);
  }
  for (let i = 0; i < messages.length; i++) {
    const message: unknown = messages[i];
    const path = `messages.${i}`;
    if (!isObject(message)) throw invalidField(path, `${path}: must be an object`);
    const role = message.role;
    if (role === undefined) throw required(`${path}.role`);
    if (typeof role !== "string" || !ROLES.includes(role)) throw notOneOf(`${path}.role`, ROLES);
    const content = message.content;
    if (content === undefined) throw required(`${path}.content`);
    if (typeof content !== "string") {
      checkBlocks(
        content,
        `${path}.content`,
        `${path}.content: must be a string or an array of content blocks`,
      );
    }
  }
}

/** An array of objects with a string `type`; block internals are the provider's to check. */
function checkBlocks(value: unknown, path: string, message: string): void {
  if (!Array.isArray(value)) throw invalidField(path, message);
  for (let i = 0; i < value.length; i++) {
    const block: unknown = value[i];
    if (!isObject(block)) throw invalidField(`${path}.${i}`, `${path}.${i}: must be an object`);
    const type = block.type;
    if (type === undefined) throw required(`${path}.${i}.type`);
    if (typeof type !== "string")
      throw invalidField(`${path}.${i}.type`, `${path}.${i}.type: must be a string`);
  }
}

function checkUnitInterval(json: Record<string, unknown>, field: "temperature" | "top_p"): void {
  const value = json[field];
  if (value === undefined) return;
  if (typeof value !== "number" || !(value >= 0 && value <= 1)) {
    throw invalidField(field, `${field}: must be a number between 0 and 1`);
  }
}

function checkStopSequences(value: unknown): void {
  if (value === undefined) return;
  if (!Array.isArray(value))
    throw invalidField("stop_sequences", "stop_sequences: must be an array of strings");
  for (let i = 0; i < value.length; i++) {
    if (typeof value[i] !== "string") {
      throw invalidField(`stop_sequences.${i}`, `stop_sequences.${i}: must be a string`);
    }
  }
}

function checkTools(value: unknown): void {
  if (value === undefined) return;
  if (!Array.isArray(value)) throw invalidField("tools", "tools: must be an array");
  for (let i = 0; i < value.length; i++) {
    if (!isObject(value[i])) throw invalidField(`tools.${i}`, `tools.${i}: must be an object`);
  }
}

function checkToolChoice(value: unknown): void {
  if (value === undefined) return;
  if (!isObject(value)) throw invalidField("tool_choice", "tool_choice: must be an object");
  const type = value.type;
  if (type === undefined) throw required("tool_choice.type");
  if (typeof type !== "string" || !TOOL_CHOICE_TYPES.includes(type)) {
    throw notOneOf("tool_choice.type", TOOL_CHOICE_TYPES);
  }
  if (type === "tool") {
    if (value.name === undefined) throw required("tool_choice.name");
    if (typeof value.name !== "string")
      throw invalidField("tool_choice.name", "tool_choice.name: must be a string");
  }
}

function checkThinking(value: unknown): void {
  if (value === undefined) return;
  if (!isObject(value)) throw invalidField("thinking", "thinking: must be an object");
  const type = value.type;
  if (type === undefined) throw required("thinking.type");
  if (typeof type !== "string" || !THINKING_TYPES.includes(type))
    throw notOneOf("thinking.type", THINKING_TYPES);
  if (type === "enabled") {
    const budget = value.budget_tokens;
    if (budget === undefined) throw required("thinking.budget_tokens");
    if (!isCount(budget, 1)) {
      throw invalidField("thinking.budget_tokens", "thinking.budget_tokens: must be an integer >= 1");
    }
  }
  // null is the API's explicit "model default" (the SDK types it `| null`).
  const display = value.display;
  if (display !== undefined && display !== null) {
    if (typeof display !== "string" || !THINKING_DISPLAYS.includes(display)) {
      throw notOneOf("thinking.display", THINKING_DISPLAYS);
    }
  }
}

function checkMetadata(value: unknown): void {
  if (value === undefined) return;
  if (!isObject(value)) throw invalidField("metadata", "metadata: must be an object");
  // null is accepted: the API types user_id `string | null`.
  const userId = value.user_id;
  if (userId !== undefined && userId !== null && typeof userId !== "string") {
    throw invalidField("metadata.user_id", "metadata.user_id: must be a string");
  }
}

function checkOutputConfig(value: unknown): void {
  if (value === undefined) return;
  if (!isObject(value)) throw invalidField("output_config", "output_config: must be an object");
  // effort and format are both typed `| null` by the API: null means the default.
  const effort = value.effort;
  if (effort !== undefined && effort !== null) {
    if (typeof effort !== "string" || !EFFORT_VALUES.includes(effort)) {
      throw notOneOf("output_config.effort", EFFORT_VALUES);
    }
  }
  const format = value.format;
  if (format !== undefined && format !== null && !isObject(format)) {
    throw invalidField("output_config.format", "output_config.format: must be an object");
  }
}

/** A plain JSON object (not null, not an array). */
function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function isCount(value: unknown, min: number): value is number {
  return Number.isSafeInteger(value) && (value as number) >= min;
}

function required(field: string): ConnectError {
  return invalidField(field, `${field}: Field required`);
}

function notOneOf(field: string, allowed: readonly string[]): ConnectError {
  return invalidField(field, `${field}: must be one of ${allowed.map((a) => JSON.stringify(a)).join(", ")}`);
}
