import type { ConnectError } from "@connectrpc/connect";
import { invalidField } from "../errors.js";
import { EFFORTS, type Effort, type ThinkingType } from "./model-catalog.js";

/** Which Messages API endpoint a body was sent to. */
export type MessagesCall = "create" | "count_tokens";

/** JSON object fields as parsed, never written to. */
export type Fields = Readonly<Record<string, unknown>>;

/** `thinking.display`; null is the API's explicit "model default". */
export type ThinkingDisplay = "summarized" | "omitted";

/**
 * The request's `thinking`, typed. `extra` holds its other fields as sent, passed through
 * while the type stays the same (a budget_tokens on a non-"enabled" type is one of them).
 */
export type Thinking =
  | {
      readonly type: "enabled";
      readonly budgetTokens: number;
      readonly display: ThinkingDisplay | null | undefined;
      readonly extra: Fields;
    }
  | {
      readonly type: Exclude<ThinkingType, "enabled">;
      readonly display: ThinkingDisplay | null | undefined;
      readonly extra: Fields;
    };

/** The sampling knobs; undefined = not sent. */
export interface Sampling {
  readonly temperature: number | undefined;
  readonly topP: number | undefined;
  readonly topK: number | undefined;
}

/** What the gateway reads of a request, typed: repair works on this and nothing else. */
export interface MessagesView {
  /** The model as named in the body (the client's name until repair sets the provider's). */
  readonly model: string;
  /** create: max_tokens; count_tokens: 0 (a max_tokens sent there is unread and stays in rest). */
  readonly maxTokens: number;
  /** create: stream === true; count_tokens: false (a stream sent there stays in rest). */
  readonly stream: boolean;
  /** undefined = no thinking field. */
  readonly thinking: Thinking | undefined;
  /** output_config.effort; null is the API's explicit "default", undefined = not sent. */
  readonly effort: Effort | null | undefined;
  /** output_config's other fields (format, …) as sent; undefined = no output_config. */
  readonly outputConfig: Fields | undefined;
  readonly sampling: Sampling;
}

/**
 * A validated request body: the typed view, and every other top-level field untouched (messages,
 * system, tools, metadata, and fields the gateway has never heard of).
 */
export interface MessagesRequest {
  readonly call: MessagesCall;
  readonly view: MessagesView;
  readonly rest: Fields;
  /** The body's top-level keys in the caller's order, which the encoder keeps. */
  readonly keys: readonly string[];
}

/** More entries than any real conversation: a bound on the work one request can cause. */
export const MAX_MESSAGES = 100_000;

const ROLES = ["user", "assistant", "system"];
const TOOL_CHOICE_TYPES = ["auto", "any", "tool", "none"];
const THINKING_TYPES: readonly ThinkingType[] = ["enabled", "adaptive", "disabled"];
const THINKING_DISPLAYS: readonly ThinkingDisplay[] = ["summarized", "omitted"];

/** The top-level fields the view holds, per call; the rest are passed through. */
const VIEW_FIELDS: Readonly<Record<MessagesCall, ReadonlySet<string>>> = {
  create: new Set([
    "model",
    "max_tokens",
    "stream",
    "thinking",
    "output_config",
    "temperature",
    "top_p",
    "top_k",
  ]),
  count_tokens: new Set(["model", "thinking", "output_config", "temperature", "top_p", "top_k"]),
};

// Fatal: a body that is not UTF-8 is refused rather than forwarded with replacement characters.
const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * Parses and validates a Messages API body (bytes or text) into its typed view and the untouched
 * rest; throws invalidField naming the field. Only what the gateway relies on is checked (the
 * provider validates the rest), so every field a real client sends, known or not, passes through.
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
    // Judged as the number the JSON text denotes, which is what goes upstream (the body is
    // re-encoded from this view): `1e3` and `1.0` are 1000 and 1; `0`, `-0` and `1e-999` are 0,
    // which the format refuses (issue 29: such calls were forwarded and charged).
    if (!isCount(value, 1)) throw invalidField("max_tokens", "max_tokens: must be an integer >= 1");
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
  const temperature = unitInterval(json, "temperature");
  const topP = unitInterval(json, "top_p");
  if (json.top_k !== undefined && !isCount(json.top_k, 0)) {
    throw invalidField("top_k", "top_k: must be an integer >= 0");
  }
  checkStopSequences(json.stop_sequences);
  checkTools(json.tools);
  checkToolChoice(json.tool_choice, json.tools);
  const thinking = readThinking(json.thinking);
  checkMetadata(json.metadata);
  const outputConfig = readOutputConfig(json.output_config);

  const keys = Object.keys(json);
  const viewFields = VIEW_FIELDS[call];
  // fromEntries defines properties: a "__proto__" key stays a field, as JSON.parse made it.
  const rest = Object.fromEntries(Object.entries(json).filter(([key]) => !viewFields.has(key)));
  const view: MessagesView = {
    model,
    maxTokens,
    stream,
    thinking,
    effort: outputConfig?.effort,
    outputConfig: outputConfig?.other,
    sampling: { temperature, topP, topK: json.top_k as number | undefined },
  };
  return { call, view, rest, keys };
}

/**
 * The body a request goes upstream as, as an object: the view's fields where the caller had
 * them (new ones after), the rest as sent. Shallow: the rest's values are shared, not copied.
 */
export function messagesBody(request: MessagesRequest): Record<string, unknown> {
  const { call, view, rest, keys } = request;
  const viewFields = VIEW_FIELDS[call];
  const sent = new Set(keys);
  const written = viewEntries(view, call, sent);
  const entries: (readonly [string, unknown])[] = [];
  for (const key of sent) {
    if (!viewFields.has(key)) {
      if (Object.hasOwn(rest, key)) entries.push([key, rest[key]]);
    } else if (written.has(key)) {
      entries.push([key, written.get(key)]);
      written.delete(key);
    }
  }
  // Fields the caller did not send: what repair added, then whatever the rest gained.
  for (const entry of written) entries.push(entry);
  for (const key of Object.keys(rest)) if (!sent.has(key)) entries.push([key, rest[key]]);
  return Object.fromEntries(entries);
}

/** The body a request goes upstream as: {@link messagesBody}, serialised. */
export function encodeMessagesRequest(request: MessagesRequest): string {
  return JSON.stringify(messagesBody(request));
}

/** The view's top-level fields as JSON values, absent ones left out. */
function viewEntries(
  view: MessagesView,
  call: MessagesCall,
  sent: ReadonlySet<string>,
): Map<string, unknown> {
  const entries = new Map<string, unknown>([["model", view.model]]);
  if (call === "create") {
    entries.set("max_tokens", view.maxTokens);
    // An explicit `stream: false` is written back as sent; an absent one stays absent.
    if (view.stream || sent.has("stream")) entries.set("stream", view.stream);
  }
  if (view.thinking !== undefined) entries.set("thinking", thinkingJson(view.thinking));
  if (view.effort !== undefined || view.outputConfig !== undefined) {
    entries.set("output_config", {
      ...(view.effort === undefined ? {} : { effort: view.effort }),
      ...view.outputConfig,
    });
  }
  const { temperature, topP, topK } = view.sampling;
  if (temperature !== undefined) entries.set("temperature", temperature);
  if (topP !== undefined) entries.set("top_p", topP);
  if (topK !== undefined) entries.set("top_k", topK);
  return entries;
}

function thinkingJson(thinking: Thinking): Record<string, unknown> {
  return {
    type: thinking.type,
    ...(thinking.type === "enabled" ? { budget_tokens: thinking.budgetTokens } : {}),
    ...(thinking.display === undefined ? {} : { display: thinking.display }),
    ...thinking.extra,
  };
}

/**
 * The deepest nesting of objects and arrays a body may have. Real requests stay far below it
 * (a tool's JSON schema rarely passes 20); past it the code that walks a request (token bounds,
 * re-encoding) would run out of stack.
 */
export const MAX_BODY_DEPTH = 256;

/** Whether JSON `text` nests objects and arrays deeper than `limit` (brackets in strings ignored). */
function nestsDeeperThan(text: string, limit: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // a backslash escapes the next character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) {
      if (++depth > limit) return true;
    } else if (c === 0x7d || c === 0x5d) depth--;
  }
  return false;
}

function parseBody(body: Uint8Array | string): Record<string, unknown> {
  let text: string;
  let parsed: unknown;
  try {
    text = typeof body === "string" ? body : utf8.decode(body);
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw invalidField("body", `body: not valid JSON (${reason})`);
  }
  if (nestsDeeperThan(text, MAX_BODY_DEPTH)) {
    throw invalidField("body", `body: nested deeper than ${MAX_BODY_DEPTH} levels of objects and arrays`);
  }
  try {
    parsed = JSON.parse(text);
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
  if (messages.length === 0) throw invalidField("messages", "messages: at least one message is required");
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

function unitInterval(json: Record<string, unknown>, field: "temperature" | "top_p"): number | undefined {
  const value = json[field];
  if (value === undefined) return undefined;
  if (typeof value !== "number" || !(value >= 0 && value <= 1)) {
    throw invalidField(field, `${field}: must be a number between 0 and 1`);
  }
  return value;
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

/** `tools` has passed {@link checkTools}. A choice that needs a tool needs one to exist, as the API says. */
function checkToolChoice(value: unknown, tools: unknown): void {
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
  if (type !== "any" && type !== "tool") return;
  const names = Array.isArray(tools) ? tools.map((tool: Record<string, unknown>) => tool.name) : [];
  if (names.length === 0) throw invalidField("tool_choice", `tool_choice: type ${type} needs tools`);
  if (type === "tool" && !names.includes(value.name)) {
    throw invalidField(
      "tool_choice.name",
      `tool_choice.name: no tool named ${JSON.stringify(value.name)} in tools`,
    );
  }
}

function readThinking(value: unknown): Thinking | undefined {
  if (value === undefined) return undefined;
  if (!isObject(value)) throw invalidField("thinking", "thinking: must be an object");
  const type = value.type;
  if (type === undefined) throw required("thinking.type");
  if (!isOneOf(type, THINKING_TYPES)) throw notOneOf("thinking.type", THINKING_TYPES);
  let budget: unknown;
  if (type === "enabled") {
    budget = value.budget_tokens;
    if (budget === undefined) throw required("thinking.budget_tokens");
    if (!isCount(budget, 1)) {
      throw invalidField("thinking.budget_tokens", "thinking.budget_tokens: must be an integer >= 1");
    }
  }
  // null is the API's explicit "model default" (the SDK types it `| null`).
  const display = value.display;
  if (display !== undefined && display !== null && !isOneOf(display, THINKING_DISPLAYS)) {
    throw notOneOf("thinking.display", THINKING_DISPLAYS);
  }
  const read = type === "enabled" ? ["type", "budget_tokens", "display"] : ["type", "display"];
  const extra = Object.fromEntries(Object.entries(value).filter(([key]) => !read.includes(key)));
  return type === "enabled"
    ? { type, budgetTokens: budget as number, display, extra }
    : { type, display, extra };
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

/** output_config split into its effort and its other fields (passed through). */
function readOutputConfig(
  value: unknown,
): { readonly effort: Effort | null | undefined; readonly other: Fields } | undefined {
  if (value === undefined) return undefined;
  if (!isObject(value)) throw invalidField("output_config", "output_config: must be an object");
  // effort and format are both typed `| null` by the API: null means the default.
  const effort = value.effort;
  if (effort !== undefined && effort !== null && !isOneOf(effort, EFFORTS)) {
    throw notOneOf("output_config.effort", EFFORTS);
  }
  const format = value.format;
  if (format !== undefined && format !== null && !isObject(format)) {
    throw invalidField("output_config.format", "output_config.format: must be an object");
  }
  const other = Object.fromEntries(Object.entries(value).filter(([key]) => key !== "effort"));
  return { effort, other };
}

/** A plain JSON object (not null, not an array). */
function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function isOneOf<T extends string>(value: unknown, allowed: readonly T[]): value is T {
  return typeof value === "string" && (allowed as readonly string[]).includes(value);
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
