/**
 * The dev upstream's answer to POST /v1/messages (see dev-upstream.ts for the server): a
 * deterministic, labelled message and the usage it costs by the rule of dev-tokens.ts.
 *
 * A call runs as sampling passes, each accounted against the server's prompt cache:
 * - a declined primary (when dev-server-tools.ts says it declines): one `message` pass at the
 *   requested model that reads the prompt and writes nothing; the first fallback serves;
 * - a compaction (when the input reaches the edit's trigger): a `compaction` pass reading the
 *   whole input and writing the summary, which then stands in for the conversation;
 * - the executor's server-side loop: pass 1 reads the prompt (and thinks); each server tool call
 *   (searches, then a fetch, then the advisor) ends a pass, the tool runs between passes (the
 *   advisor as an `advisor_message` pass of its own, reading the transcript so far, uncached),
 *   and the next pass re-reads the conversation grown by what the executor wrote and the result,
 *   appended to the assistant turn being written; the last pass answers (text, or a client tool
 *   call). max_tokens bounds the executor's output over all its passes.
 *
 * The top-level counts are the sum of the serving executor's passes (the pass completing a
 * fallback-served answer is reported as `fallback_message`); the other passes are only in
 * `usage.iterations`, which is listed with the compaction edit (always) or when such a pass
 * happened. `server_tool_use` is reported when the request has a web search or fetch tool; usage
 * always says `service_tier`, `inference_geo` and `speed`.
 *
 * Streams: message_start carries the first executor pass's input (and the requested model: the
 * real stream starts before a decline, and the SDK relabels its snapshot from the fallback
 * block); server_tool_use input streams as input_json_delta like tool_use; server tool results
 * and the fallback block arrive whole in content_block_start; a compaction summary comes as one
 * compaction_delta; the final message_delta carries the cumulative counts (overwrite, never add),
 * the cumulative cache-write split when there was more than one pass, `server_tool_use` and
 * `iterations`.
 */
import { createHash } from "node:crypto";
import { newId } from "../../core/ids.js";
import {
  advisorAdvice,
  clientWebSearchInput,
  compactedConversation,
  compactionSummary,
  type DevFeatures,
  declines,
  fetchResult,
  plannedToolCalls,
  type ServerToolCall,
  type Speed,
  searchResults,
} from "./dev-server-tools.js";
import { countRequestTokens, type DevPromptCache, devTokenCount, type InputUsage } from "./dev-tokens.js";

/** What every generated answer starts with, so nobody mistakes it for a model's output. */
export const DEV_TEXT_LABEL = "[tollgate dev-upstream: generated text, not a model]";
const DEV_THINKING_LABEL = "[tollgate dev-upstream: generated thinking, not a model]";
const ECHO_WORDS = 12;

/** The fields of a Messages request the dev upstream reads, after {@link validateMessagesRequest}. */
interface MessagesRequest {
  readonly model: string;
  readonly max_tokens: number;
  readonly messages: readonly unknown[];
  readonly tools?: unknown;
  readonly tool_choice?: unknown;
  readonly thinking?: unknown;
  readonly stream?: unknown;
}

type GeneratedBlock =
  | { readonly type: "thinking"; readonly words: readonly string[]; readonly signature: string }
  | { readonly type: "text"; readonly words: readonly string[] }
  | { readonly type: "tool_use"; readonly id: string; readonly name: string; readonly input: unknown }
  | {
      readonly type: "server_tool_use";
      readonly id: string;
      readonly name: ServerToolCall["name"];
      readonly input: Record<string, unknown>;
    }
  /** A server tool's result block (web_search_tool_result, …), sent whole as the real API does. */
  | { readonly type: "server_result"; readonly json: Record<string, unknown> }
  | { readonly type: "compaction"; readonly content: string }
  | { readonly type: "fallback"; readonly from: string; readonly to: string };

type StopReason = "end_turn" | "max_tokens" | "tool_use";

/** One sampling pass of a call, as `usage.iterations` reports it. */
interface Pass {
  readonly type: "message" | "compaction" | "advisor_message" | "fallback_message";
  /** Set on advisor and fallback passes, and on the declined attempt's message pass. */
  readonly model?: string;
  readonly input: InputUsage;
  readonly output: number;
  /** A pass of the serving executor: the top-level counts are the sum of exactly these. */
  readonly executor: boolean;
}

/** A create request as the dev upstream ran it. */
export interface Call {
  /** The model that served: the requested one, or the fallback after a decline. */
  readonly model: string;
  /** The request's `model`: a stream starts (message_start) before the primary can decline. */
  readonly requestedModel: string;
  readonly blocks: readonly GeneratedBlock[];
  readonly stopReason: StopReason;
  readonly passes: readonly Pass[];
  readonly features: DevFeatures;
  /** The serving attempt's speed. */
  readonly speed: Speed;
  readonly webSearchRequests: number;
  readonly webFetchRequests: number;
}

/** The model, output cap and speed of the attempt that serves the call. */
interface Attempt {
  readonly model: string;
  readonly maxTokens: number;
  readonly speed: Speed;
}

/** The minimal checks of the real API; undefined when the request is acceptable. */
export function validateMessagesRequest(body: Record<string, unknown>): string | undefined {
  if (typeof body.model !== "string" || body.model === "") return "model: Field required";
  if (typeof body.max_tokens !== "number" || !Number.isInteger(body.max_tokens) || body.max_tokens < 1) {
    return "max_tokens: Input should be an integer >= 1";
  }
  if (!Array.isArray(body.messages)) return "messages: Field required";
  if (body.messages.length === 0) return "messages: at least one message is required";
  const choice = body.tool_choice;
  if (isRecord(choice) && (choice.type === "any" || choice.type === "tool")) {
    const tools = toolNames(body.tools);
    if (tools.length === 0) return "tool_choice: requires tools";
    if (choice.type === "tool" && !tools.includes(String(choice.name))) {
      return `tool_choice.name: tool ${JSON.stringify(choice.name)} not found in tools`;
    }
  }
  return undefined;
}

/** The conversation the request's input is counted from (a sent-back compaction cuts it). */
export function readConversation(
  body: Record<string, unknown>,
  features: DevFeatures,
): Record<string, unknown> {
  return features.compactionTrigger === undefined ? body : compactedConversation(body);
}

/**
 * Runs a create request: the primary's decline and the fallback (when asked to decline), the
 * compaction (when the input reaches the trigger), then the executor's sampling loop. Every pass
 * is accounted against the server's prompt cache by the rule of dev-tokens.ts. `body` has passed
 * {@link validateMessagesRequest}, and `features` were read from it.
 */
export function runCall(body: Record<string, unknown>, features: DevFeatures, cache: DevPromptCache): Call {
  const request = body as unknown as MessagesRequest;
  const userText = lastUserText(request.messages);
  const passes: Pass[] = [];
  const markers: GeneratedBlock[] = [];
  let context = readConversation(body, features);
  let attempt: Attempt = { model: request.model, maxTokens: request.max_tokens, speed: features.speed };
  const fallback = declines(features, userText) ? features.fallbacks[0] : undefined;
  if (fallback !== undefined) {
    // The primary reads the prompt and declines before writing anything; the fallback starts over.
    passes.push({
      type: "message",
      model: request.model,
      input: cache.account(context),
      output: 0,
      executor: false,
    });
    markers.push({ type: "fallback", from: request.model, to: fallback.model });
    attempt = {
      model: fallback.model,
      maxTokens: fallback.maxTokens ?? request.max_tokens,
      speed: fallback.speed,
    };
    context = { ...context, model: fallback.model };
  }
  const trigger = features.compactionTrigger;
  const total = countRequestTokens(context);
  if (trigger !== undefined && total >= trigger) {
    const summary = compactionSummary(total, userText);
    passes.push({
      type: "compaction",
      input: cache.account(context),
      output: devTokenCount(summary),
      executor: false,
    });
    markers.push({ type: "compaction", content: summary });
    // The summary stands in for the whole conversation; tools and system stay.
    context = { ...context, messages: [{ role: "assistant", content: [blockJson(markers.at(-1)!)] }] };
  }
  const executor = runExecutor(request, attempt, context, features, userText, cache, passes);
  if (fallback !== undefined) {
    // The pass that completes a fallback-served answer is reported as the fallback's.
    const last = passes.findLastIndex((pass) => pass.executor);
    passes[last] = { ...passes[last]!, type: "fallback_message", model: attempt.model };
  }
  return {
    model: attempt.model,
    requestedModel: request.model,
    blocks: [...markers, ...executor.blocks],
    stopReason: executor.stopReason,
    passes,
    features,
    speed: attempt.speed,
    webSearchRequests: executor.searches,
    webFetchRequests: executor.fetches,
  };
}

/**
 * The executor's server-side loop. Pass 1 reads the prompt, may think, and calls the first server
 * tool; the tool runs between passes and each later pass re-reads the conversation grown by what
 * the executor wrote and the results. The last pass answers (text, or a client tool call). Output
 * is cut at max_tokens over all passes together: thinking first, a tool call whole or not at all.
 */
function runExecutor(
  request: MessagesRequest,
  attempt: Attempt,
  context: Record<string, unknown>,
  features: DevFeatures,
  userText: string,
  cache: DevPromptCache,
  passes: Pass[],
): { blocks: GeneratedBlock[]; stopReason: StopReason; searches: number; fetches: number } {
  const written: GeneratedBlock[] = [];
  let budget = attempt.maxTokens;
  let input = cache.account(context);
  let output = 0;
  let truncated = false;
  let searches = 0;
  let fetches = 0;
  const write = (block: GeneratedBlock, tokens: number) => {
    written.push(block);
    output += tokens;
    budget -= tokens;
  };
  const endPass = () => {
    passes.push({ type: "message", input, output, executor: true });
    output = 0;
  };

  const thinking = thinkingBlock(request, userText, budget);
  if (thinking !== undefined) {
    write(thinking.block, thinking.block.words.length);
    truncated = thinking.truncated;
  }
  for (const call of plannedToolCalls(features, userText)) {
    if (truncated) break;
    const tokens = devTokenCount(JSON.stringify(call.input));
    if (tokens > budget) {
      truncated = true;
      break;
    }
    const id = newId("srvtoolu_dev");
    write({ type: "server_tool_use", id, name: call.name, input: call.input }, tokens);
    endPass();
    if (call.name === "web_search") searches++;
    if (call.name === "web_fetch") fetches++;
    written.push(runServerTool(call, id, features, withAssistantTurn(context, written), passes));
    input = cache.account(withAssistantTurn(context, written));
  }
  if (!truncated) {
    const answer = answerBlock(request, userText, budget);
    if (answer.block !== undefined) write(answer.block, answer.tokens);
    truncated = answer.truncated;
  }
  endPass();
  const calledTool = written.at(-1)?.type === "tool_use";
  const stopReason = truncated ? "max_tokens" : calledTool ? "tool_use" : "end_turn";
  return { blocks: written, stopReason, searches, fetches };
}

/** The labelled thinking block, cut at `budget` words, when `thinking` is enabled or adaptive. */
function thinkingBlock(
  request: MessagesRequest,
  userText: string,
  budget: number,
): { block: Extract<GeneratedBlock, { type: "thinking" }>; truncated: boolean } | undefined {
  const thinking = isRecord(request.thinking) ? request.thinking.type : undefined;
  if (thinking !== "enabled" && thinking !== "adaptive") return undefined;
  const all = words(`${DEV_THINKING_LABEL} The last user message has ${words(userText).length} words.`);
  const taken = all.slice(0, budget);
  const signature = createHash("sha256").update(taken.join(" ")).digest("base64");
  return { block: { type: "thinking", words: taken, signature }, truncated: taken.length < all.length };
}

/**
 * The last pass's answer within `budget`: a client tool call (whole or absent: half a JSON input
 * helps nobody), else the labelled echo cut at `budget` words.
 */
function answerBlock(
  request: MessagesRequest,
  userText: string,
  budget: number,
): { block?: GeneratedBlock; tokens: number; truncated: boolean } {
  const tool = answerTool(request, userText);
  if (tool !== undefined) {
    const tokens = devTokenCount(JSON.stringify(tool.input));
    if (tokens > budget) return { tokens: 0, truncated: true };
    return { block: { type: "tool_use", id: newId("toolu_dev"), ...tool }, tokens, truncated: false };
  }
  const all = words(`${DEV_TEXT_LABEL} ${echo(words(userText), request.messages)}`);
  const taken = all.slice(0, budget);
  return {
    ...(taken.length > 0 ? { block: { type: "text", words: taken } } : {}),
    tokens: taken.length,
    truncated: taken.length < all.length,
  };
}

/**
 * Runs one server tool call between executor passes and returns its result block. The advisor is
 * a pass of its own: it reads the executor's transcript so far (uncached) at its own model.
 */
function runServerTool(
  call: ServerToolCall,
  id: string,
  features: DevFeatures,
  transcript: Record<string, unknown>,
  passes: Pass[],
): GeneratedBlock {
  switch (call.name) {
    case "web_search":
      return {
        type: "server_result",
        json: {
          type: "web_search_tool_result",
          tool_use_id: id,
          content: searchResults(String(call.input.query)),
        },
      };
    case "web_fetch":
      return {
        type: "server_result",
        json: {
          type: "web_fetch_tool_result",
          tool_use_id: id,
          content: fetchResult(String(call.input.url)),
        },
      };
    case "advisor": {
      const advisor = features.advisor!;
      const read = countRequestTokens(transcript);
      const advice = advisorAdvice(advisor.model, read, advisor.maxTokens);
      passes.push({
        type: "advisor_message",
        model: advisor.model,
        input: plainInput(read),
        output: advice.outputTokens,
        executor: false,
      });
      return {
        type: "server_result",
        json: { type: "advisor_tool_result", tool_use_id: id, content: advice.content },
      };
    }
  }
}

/** The conversation with what the executor wrote appended to the assistant turn it is writing. */
function withAssistantTurn(
  context: Record<string, unknown>,
  written: readonly GeneratedBlock[],
): Record<string, unknown> {
  const messages = Array.isArray(context.messages) ? context.messages : [];
  const content = written.map(blockJson);
  const last = messages.at(-1);
  // A prefilled (or compacted) assistant turn is continued, not followed by a new message.
  if (isRecord(last) && last.role === "assistant") {
    const prior = typeof last.content === "string" ? [{ type: "text", text: last.content }] : last.content;
    const continued = { ...last, content: [...(Array.isArray(prior) ? prior : []), ...content] };
    return { ...context, messages: [...messages.slice(0, -1), continued] };
  }
  return { ...context, messages: [...messages, { role: "assistant", content }] };
}

/** The client tool the answer calls: the one `tool_choice` forces, or Claude Code's WebSearch when asked. */
function answerTool(
  request: MessagesRequest,
  userText: string,
): { name: string; input: unknown } | undefined {
  const forced = chosenTool(request);
  if (forced !== undefined) return { name: String(forced.name), input: sampleInput(forced.input_schema) };
  // Answering a tool result with the same call again would loop forever.
  if (toolResultCount(request.messages) > 0) return undefined;
  const search = clientWebSearchInput(request.tools, userText);
  return search === undefined ? undefined : { name: "WebSearch", input: search };
}

function plainInput(tokens: number): InputUsage {
  return {
    input_tokens: tokens,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
    cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 },
  };
}

function blockJson(block: GeneratedBlock): Record<string, unknown> {
  switch (block.type) {
    case "thinking":
      return { type: "thinking", thinking: block.words.join(" "), signature: block.signature };
    case "text":
      return { type: "text", text: block.words.join(" ") };
    case "tool_use":
    case "server_tool_use":
      return { type: block.type, id: block.id, name: block.name, input: block.input };
    case "server_result":
      return block.json;
    case "compaction":
      return { type: "compaction", content: block.content, encrypted_content: null };
    case "fallback":
      return {
        type: "fallback",
        from: { model: block.from },
        to: { model: block.to },
        trigger: { type: "refusal", category: null },
      };
  }
}

/** The answer as a Message (non-streaming). */
export function messageJson(id: string, call: Call): Record<string, unknown> {
  return {
    ...messageHead(id, call.model),
    content: call.blocks.map(blockJson),
    stop_reason: call.stopReason,
    stop_sequence: null,
    usage: usageJson(call),
  };
}

function messageHead(id: string, model: string): Record<string, unknown> {
  return { id, type: "message", role: "assistant", model };
}

/** The answer as the Anthropic event sequence; each event's `type` is its SSE event name. */
export function messageEvents(
  id: string,
  call: Call,
): { readonly type: string; readonly [field: string]: unknown }[] {
  const events: { readonly type: string; readonly [field: string]: unknown }[] = [
    {
      type: "message_start",
      message: {
        // The SDK relabels the snapshot from the fallback block, as the real stream needs it to.
        ...messageHead(id, call.requestedModel),
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: startUsage(call),
      },
    },
  ];
  if (call.blocks.length === 0) events.push({ type: "ping" });
  for (const [index, block] of call.blocks.entries()) {
    const delta = (payload: Record<string, unknown>) =>
      events.push({ type: "content_block_delta", index, delta: payload });
    events.push({ type: "content_block_start", index, content_block: startBlock(block) });
    if (index === 0) events.push({ type: "ping" });
    switch (block.type) {
      case "thinking":
        for (const [i, word] of block.words.entries())
          delta({ type: "thinking_delta", thinking: spaced(word, i) });
        delta({ type: "signature_delta", signature: block.signature });
        break;
      case "text":
        for (const [i, word] of block.words.entries()) delta({ type: "text_delta", text: spaced(word, i) });
        break;
      case "tool_use":
      case "server_tool_use": {
        delta({ type: "input_json_delta", partial_json: "" });
        for (const piece of pieces(JSON.stringify(block.input))) {
          delta({ type: "input_json_delta", partial_json: piece });
        }
        break;
      }
      case "compaction":
        delta({ type: "compaction_delta", content: block.content, encrypted_content: null });
        break;
      case "server_result":
      case "fallback":
        // Whole in content_block_start, no deltas.
        break;
    }
    events.push({ type: "content_block_stop", index });
  }
  events.push({
    type: "message_delta",
    delta: { stop_reason: call.stopReason, stop_sequence: null },
    usage: deltaUsage(call),
  });
  events.push({ type: "message_stop" });
  return events;
}

/** A block as `content_block_start` announces it: empty where deltas follow, whole otherwise. */
function startBlock(block: GeneratedBlock): Record<string, unknown> {
  switch (block.type) {
    case "thinking":
      return { type: "thinking", thinking: "", signature: "" };
    case "text":
      return { type: "text", text: "" };
    case "tool_use":
    case "server_tool_use":
      return { type: block.type, id: block.id, name: block.name, input: {} };
    case "compaction":
      return { type: "compaction", content: null, encrypted_content: null };
    case "server_result":
    case "fallback":
      return blockJson(block);
  }
}

/**
 * A call's usage: the top-level counts are the serving executor's passes summed (a compaction,
 * an advisor call or a declined attempt is only in `iterations`); `server_tool_use` when the
 * request has web tools; `iterations` with the compaction edit or when a pass is not plain
 * sampling (an advisor call, a fallback).
 */
function usageJson(call: Call): Record<string, unknown> {
  const top = sumPasses(call.passes.filter((pass) => pass.executor));
  return {
    ...countsJson(top),
    ...serverToolJson(call),
    ...serviceJson(call),
    ...iterationsJson(call),
  };
}

/** message_start's usage: what is known when the answer starts, the first executor pass's input. */
function startUsage(call: Call): Record<string, unknown> {
  const first = call.passes.find((pass) => pass.executor)!;
  return { ...countsJson({ input: first.input, output: 1 }), ...serviceJson(call) };
}

function serviceJson(call: Call): Record<string, unknown> {
  return { service_tier: "standard", inference_geo: call.features.inferenceGeo, speed: call.speed };
}

/**
 * The final message_delta's usage: cumulative totals that overwrite message_start's. The cache
 * write split rides along only when later passes changed it from message_start's.
 */
function deltaUsage(call: Call): Record<string, unknown> {
  const executorPasses = call.passes.filter((pass) => pass.executor);
  const top = sumPasses(executorPasses);
  return {
    input_tokens: top.input.input_tokens,
    cache_creation_input_tokens: top.input.cache_creation_input_tokens,
    cache_read_input_tokens: top.input.cache_read_input_tokens,
    output_tokens: top.output,
    ...(executorPasses.length > 1 ? { cache_creation: { ...top.input.cache_creation } } : {}),
    ...serverToolJson(call),
    ...iterationsJson(call),
  };
}

function countsJson(pass: Pick<Pass, "input" | "output">): Record<string, unknown> {
  return {
    input_tokens: pass.input.input_tokens,
    output_tokens: pass.output,
    cache_creation_input_tokens: pass.input.cache_creation_input_tokens,
    cache_read_input_tokens: pass.input.cache_read_input_tokens,
    cache_creation: { ...pass.input.cache_creation },
  };
}

function serverToolJson(call: Call): Record<string, unknown> {
  if (!call.features.webTools) return {};
  return {
    server_tool_use: {
      web_search_requests: call.webSearchRequests,
      web_fetch_requests: call.webFetchRequests,
    },
  };
}

function iterationsJson(call: Call): Record<string, unknown> {
  const listed =
    call.features.compactionTrigger !== undefined || call.passes.some((pass) => pass.model !== undefined);
  if (!listed) return {};
  return {
    iterations: call.passes.map((pass) => ({
      type: pass.type,
      ...(pass.model === undefined ? {} : { model: pass.model }),
      ...countsJson(pass),
    })),
  };
}

function sumPasses(passes: readonly Pass[]): Pick<Pass, "input" | "output"> {
  const sum = (field: (pass: Pass) => number) => passes.reduce((total, pass) => total + field(pass), 0);
  return {
    input: {
      input_tokens: sum((p) => p.input.input_tokens),
      cache_creation_input_tokens: sum((p) => p.input.cache_creation_input_tokens),
      cache_read_input_tokens: sum((p) => p.input.cache_read_input_tokens),
      cache_creation: {
        ephemeral_5m_input_tokens: sum((p) => p.input.cache_creation.ephemeral_5m_input_tokens),
        ephemeral_1h_input_tokens: sum((p) => p.input.cache_creation.ephemeral_1h_input_tokens),
      },
    },
    output: sum((p) => p.output),
  };
}

/** A word as a delta: its leading space, except the first, so the deltas concatenate to the text. */
function spaced(word: string, index: number): string {
  return index === 0 ? word : ` ${word}`;
}

/** Splits JSON text into 2–3 pieces, as the real API streams tool input in fragments. */
function pieces(json: string): string[] {
  if (json.length < 3) return [json];
  const count = json.length < 12 ? 2 : 3;
  const size = Math.ceil(json.length / count);
  const out: string[] = [];
  for (let start = 0; start < json.length; start += size) out.push(json.slice(start, start + size));
  return out;
}

function words(text: string): string[] {
  return text.match(/\S+/g) ?? [];
}

/** The text of the last user message: its string content or its text blocks. */
function lastUserText(messages: readonly unknown[]): string {
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i];
    if (!isRecord(message) || message.role !== "user") continue;
    if (typeof message.content === "string") return message.content;
    if (!Array.isArray(message.content)) return "";
    return message.content
      .filter(
        (block): block is { text: string } =>
          isRecord(block) && block.type === "text" && typeof block.text === "string",
      )
      .map((block) => block.text)
      .join(" ");
  }
  return "";
}

/** What the answer says: the first words of the last user message, or what it carried instead. */
function echo(userWords: readonly string[], messages: readonly unknown[]): string {
  if (userWords.length > 0) return `You said: ${userWords.slice(0, ECHO_WORDS).join(" ")}`;
  const results = toolResultCount(messages);
  if (results > 0) return `You sent ${results} tool result${results === 1 ? "" : "s"}.`;
  return "You sent no text.";
}

/** How many tool_result blocks the last user message carries. */
function toolResultCount(messages: readonly unknown[]): number {
  const last = messages.findLast((message) => isRecord(message) && message.role === "user");
  if (!isRecord(last) || !Array.isArray(last.content)) return 0;
  return last.content.filter((block) => isRecord(block) && block.type === "tool_result").length;
}

function toolNames(tools: unknown): string[] {
  if (!Array.isArray(tools)) return [];
  return tools.filter(isRecord).map((tool) => String(tool.name));
}

/**
 * The client tool `tool_choice` forces: the named one, or the first for `any`; undefined
 * otherwise. Server tools (those with a `type`) are run by the loop, never answered as tool_use.
 */
function chosenTool(request: MessagesRequest): Record<string, unknown> | undefined {
  const choice = request.tool_choice;
  if (!isRecord(choice) || !Array.isArray(request.tools)) return undefined;
  const tools = request.tools
    .filter(isRecord)
    .filter((tool) => tool.type === undefined || tool.type === "custom");
  if (choice.type === "any") return tools[0];
  if (choice.type === "tool") return tools.find((tool) => tool.name === choice.name);
  return undefined;
}

/** A small deterministic input: the schema's required properties, each with a placeholder value. */
function sampleInput(schema: unknown): Record<string, unknown> {
  const input: Record<string, unknown> = {};
  if (!isRecord(schema) || !isRecord(schema.properties) || !Array.isArray(schema.required)) return input;
  for (const name of schema.required) {
    if (typeof name === "string") input[name] = sampleValue(schema.properties[name]);
  }
  return input;
}

function sampleValue(schema: unknown): unknown {
  if (!isRecord(schema)) return "dev-upstream";
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
  switch (schema.type) {
    case "number":
    case "integer":
      return 1;
    case "boolean":
      return true;
    case "array":
      return [];
    case "object":
      return sampleInput(schema);
    case "null":
      return null;
    default:
      return "dev-upstream";
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
