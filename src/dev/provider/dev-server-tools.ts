/**
 * The dev upstream's reading of what a Messages request switches on beyond plain sampling — the
 * things the provider bills beyond the four token counts — and the deterministic blocks it answers
 * them with. dev-upstream.ts runs the call (the sampling passes and their usage); this file only
 * decides what the request asked for, refuses what the real API refuses, and builds the content.
 *
 * - `speed: "fast"` runs fast on {@link FAST_MODELS}, at standard on {@link STANDARD_SPEED_MODELS},
 *   and is a 400 elsewhere. `inference_geo` (`"us"` or `"global"`, default global) is a 400 on
 *   Claude models older than 4.6.
 * - Server tools (by `type`, as the real API names them): `web_search_*` does
 *   `min(max_uses ?? 3, 3)` searches (or `min(max_uses, N)` when the last user text says
 *   {@link SEARCHES_MARKER} `[searches:N]`, for tests of a longer loop), `web_fetch_*` one fetch (none with `max_uses: 0`),
 *   `advisor_*` one advisor call (none with `max_uses: 0`). Results point at `example.invalid`
 *   and say they are generated. The advisor reads the executor's transcript up to its call
 *   (uncached) and answers a labelled sentence of about 20 words cut at the tool's `max_tokens`
 *   (default 1500, so uncut): its output tokens are its words, `stop_reason` says if it was cut.
 * - Compaction (`context_management.edits[]` with `compact_20260112`): triggers at
 *   `trigger.value` input tokens (default 150000). Any positive value is accepted, so tests can
 *   use small ones; the real API's minimum is 50000.
 * - Server-side fallback (`fallbacks: "default"` or 1–3 entries): the primary declines only when
 *   the last user text contains {@link DECLINE_MARKER}; the first fallback then serves
 *   ("default": {@link DEFAULT_FALLBACK_MODEL}).
 *
 * Beta headers are not checked: the dev upstream is looser than the real API there.
 */

/** A request the real API would refuse with 400 invalid_request_error; the message names the field. */
export class InvalidDevRequest extends Error {}

export type Speed = "standard" | "fast";

/** Models that run `speed: "fast"` fast (a dated id of them too). */
const FAST_MODELS = ["claude-opus-5", "claude-opus-4-8"];
/** Models that accept `speed: "fast"` but run and report standard. */
const STANDARD_SPEED_MODELS = ["claude-opus-4-6"];
/** Residency needs a Claude model of this generation or newer. */
const MIN_GEO_VERSION = [4, 6] as const;
const GEOS = ["us", "global"];

export const DEFAULT_FALLBACK_MODEL = "claude-opus-4-8";
const MAX_FALLBACKS = 3;
/** The word in the last user text that makes the primary model decline (when fallbacks are set). */
export const DECLINE_MARKER = "[decline]";

/** `[searches:N]` in the last user text: the executor searches N times (at most max_uses). */
export const SEARCHES_MARKER = /\[searches:(\d+)\]/;

const DEFAULT_COMPACTION_TRIGGER = 150_000;
/** Searches a web_search tool does at most (and without `max_uses`). */
const MAX_SEARCHES = 3;
const RESULTS_PER_SEARCH = 2;
/** The advisor's output cap without the tool's `max_tokens`; its advice is shorter anyway. */
const ADVISOR_DEFAULT_MAX_TOKENS = 1500;

const SEARCH_LABEL = "[tollgate dev-upstream: generated search result, not a web page]";
const PAGE_LABEL = "[tollgate dev-upstream: generated page, nothing was fetched]";
const ADVICE_LABEL = "[tollgate dev-upstream: generated advice, not a model]";
const SUMMARY_LABEL = "[tollgate dev-upstream: generated summary, not a model]";
/** Fixed, so answers are deterministic. */
const RETRIEVED_AT = "2026-01-01T00:00:00Z";

/** One model attempt a fallback chain would make after the primary declines. */
export interface FallbackAttempt {
  readonly model: string;
  /** undefined: the request's max_tokens. */
  readonly maxTokens: number | undefined;
  readonly speed: Speed;
}

/** What a request switches on, read and checked by {@link readDevFeatures}. */
export interface DevFeatures {
  /** The speed the requested model runs at. */
  readonly speed: Speed;
  /** What usage reports as `inference_geo`. */
  readonly inferenceGeo: string;
  /** Searches to do (0 without a web_search tool). */
  readonly webSearches: number;
  /** The web search tool's max_uses (0 without one; unlimited as a large number). */
  readonly webSearchMaxUses: number;
  /** Fetches to do (0 or 1). */
  readonly webFetches: number;
  /** Whether the request carries a web search or fetch tool, so usage reports `server_tool_use`. */
  readonly webTools: boolean;
  /** The advisor call to make, if any. */
  readonly advisor: { readonly model: string; readonly maxTokens: number } | undefined;
  /** The input-token trigger of the compaction edit, if the request has one. */
  readonly compactionTrigger: number | undefined;
  /** The fallback chain, first attempt first; empty without `fallbacks`. */
  readonly fallbacks: readonly FallbackAttempt[];
}

/** Reads the request's billable features; throws {@link InvalidDevRequest} where the real API says 400. */
export function readDevFeatures(body: Record<string, unknown>): DevFeatures {
  const model = String(body.model);
  const geo = readGeo(body.inference_geo, model);
  const tools = Array.isArray(body.tools) ? body.tools.filter(isRecord) : [];
  const search = tools.find((tool) => /^web_search_\d{8}$/.test(String(tool.type)));
  const fetch = tools.find((tool) => /^web_fetch_\d{8}$/.test(String(tool.type)));
  return {
    speed: servedSpeed(model, body.speed, "speed"),
    inferenceGeo: geo,
    webSearches: runs(search, "web_search", MAX_SEARCHES),
    webSearchMaxUses: search === undefined ? 0 : (maxUses(search, "web_search") ?? Number.MAX_SAFE_INTEGER),
    webFetches: runs(fetch, "web_fetch", 1),
    webTools: search !== undefined || fetch !== undefined,
    advisor: readAdvisor(tools.find((tool) => /^advisor_\d{8}$/.test(String(tool.type)))),
    compactionTrigger: readCompactionTrigger(body.context_management),
    fallbacks: readFallbacks(body.fallbacks, body.speed === "fast", typeof body.inference_geo === "string"),
  };
}

/** The speed `model` serves a request for `requested` at. */
function servedSpeed(model: string, requested: unknown, field: string): Speed {
  if (requested === undefined || requested === null || requested === "standard") return "standard";
  if (requested !== "fast") throw new InvalidDevRequest(`${field}: Input should be 'standard' or 'fast'`);
  if (isOneOf(model, FAST_MODELS)) return "fast";
  if (isOneOf(model, STANDARD_SPEED_MODELS)) return "standard";
  throw new InvalidDevRequest(`${field}: fast mode is not supported for model ${model}`);
}

/** Whether the model takes `speed: "fast"` at all (served fast or not). */
function takesFast(model: string): boolean {
  return isOneOf(model, FAST_MODELS) || isOneOf(model, STANDARD_SPEED_MODELS);
}

function readGeo(requested: unknown, model: string): string {
  if (requested === undefined || requested === null) return "global";
  if (typeof requested !== "string" || !GEOS.includes(requested)) {
    throw new InvalidDevRequest(
      `inference_geo: Input should be one of ${GEOS.map((g) => `'${g}'`).join(", ")}`,
    );
  }
  if (olderThanGeo(model)) {
    throw new InvalidDevRequest(`inference_geo: is not supported for model ${model}`);
  }
  return requested;
}

/** Whether a Claude model id names a generation before residency (unknown names are not). */
function olderThanGeo(model: string): boolean {
  const version = claudeVersion(model);
  if (version === undefined) return false;
  const [major, minor] = version;
  return major < MIN_GEO_VERSION[0] || (major === MIN_GEO_VERSION[0] && minor < MIN_GEO_VERSION[1]);
}

/** [major, minor] of `claude-opus-4-6`, `claude-haiku-4-5-20251001`, `claude-3-5-haiku-…`; else undefined. */
function claudeVersion(model: string): readonly [number, number] | undefined {
  const current = /^claude-[a-z]+-(\d+)(?:-(\d{1,2}))?(?:-\d{8})?$/.exec(model);
  const legacy = current === null ? /^claude-(\d+)(?:-(\d))?-[a-z]/.exec(model) : null;
  const match = current ?? legacy;
  if (match === null) return undefined;
  return [Number(match[1]), Number(match[2] ?? 0)];
}

/** How many times a server tool runs: never without the tool, else its `max_uses` up to `most`. */
function runs(tool: Record<string, unknown> | undefined, name: string, most: number): number {
  if (tool === undefined) return 0;
  return Math.min(maxUses(tool, name) ?? most, most);
}

/** A tool's `max_uses`, undefined when absent; a 400 unless a non-negative integer. */
function maxUses(tool: Record<string, unknown>, name: string): number | undefined {
  const value = tool.max_uses;
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0) {
    throw new InvalidDevRequest(`tools.${name}.max_uses: Input should be a non-negative integer`);
  }
  return value;
}

function readAdvisor(tool: Record<string, unknown> | undefined): DevFeatures["advisor"] {
  if (tool === undefined) return undefined;
  if (typeof tool.model !== "string" || tool.model === "") {
    throw new InvalidDevRequest("tools.advisor.model: Field required");
  }
  const maxTokens = optionalPositive(tool.max_tokens, "tools.advisor.max_tokens");
  if (maxUses(tool, "advisor") === 0) return undefined;
  return { model: tool.model, maxTokens: maxTokens ?? ADVISOR_DEFAULT_MAX_TOKENS };
}

/** An optional positive integer field; undefined when absent. */
function optionalPositive(value: unknown, field: string): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 1) {
    throw new InvalidDevRequest(`${field}: Input should be a positive integer`);
  }
  return value;
}

/** The trigger of a `compact_20260112` edit; undefined without one. */
function readCompactionTrigger(management: unknown): number | undefined {
  if (!isRecord(management) || !Array.isArray(management.edits)) return undefined;
  const edit = management.edits.find((e) => isRecord(e) && e.type === "compact_20260112");
  if (!isRecord(edit)) return undefined;
  if (edit.trigger === undefined || edit.trigger === null) return DEFAULT_COMPACTION_TRIGGER;
  const trigger = edit.trigger;
  // Looser than the real API, which wants at least 50000: tests use small triggers.
  if (
    !isRecord(trigger) ||
    trigger.type !== "input_tokens" ||
    typeof trigger.value !== "number" ||
    !Number.isInteger(trigger.value) ||
    trigger.value < 1
  ) {
    throw new InvalidDevRequest(
      "context_management.edits.trigger: expected {type: 'input_tokens', value: n}",
    );
  }
  return trigger.value;
}

function readFallbacks(fallbacks: unknown, requestFast: boolean, geo: boolean): FallbackAttempt[] {
  if (fallbacks === undefined || fallbacks === null) return [];
  if (fallbacks === "default") {
    const model = DEFAULT_FALLBACK_MODEL;
    return [{ model, maxTokens: undefined, speed: fallbackSpeed(model, undefined, requestFast, "") }];
  }
  if (!Array.isArray(fallbacks) || fallbacks.length === 0 || fallbacks.length > MAX_FALLBACKS) {
    throw new InvalidDevRequest(`fallbacks: must be "default" or a list of 1 to ${MAX_FALLBACKS} entries`);
  }
  return fallbacks.map((entry: unknown, i): FallbackAttempt => {
    const field = `fallbacks.${i}`;
    if (!isRecord(entry) || typeof entry.model !== "string" || entry.model === "") {
      throw new InvalidDevRequest(`${field}.model: Field required`);
    }
    const model = entry.model;
    const maxTokens = optionalPositive(entry.max_tokens, `${field}.max_tokens`);
    // Each entry is validated as if the request were made to its model.
    if (geo && olderThanGeo(model)) {
      throw new InvalidDevRequest(`${field}.model: inference_geo is not supported for ${model}`);
    }
    const speed = fallbackSpeed(model, entry.speed, requestFast, `${field}.speed`);
    return { model, maxTokens, speed };
  });
}

/**
 * A fallback attempt's speed: its entry's own `speed` when set; otherwise fast only when the
 * request asked for fast and the fallback model takes it (never a 400 for the inherited value).
 */
function fallbackSpeed(model: string, own: unknown, requestFast: boolean, field: string): Speed {
  if (own !== undefined && own !== null) return servedSpeed(model, own, field);
  return requestFast && takesFast(model) ? servedSpeed(model, "fast", field) : "standard";
}

/** Whether the primary model declines this request (it needs a fallback chain to do so). */
export function declines(features: DevFeatures, userText: string): boolean {
  return features.fallbacks.length > 0 && userText.includes(DECLINE_MARKER);
}

/** The server tool calls the executor makes, in order: the searches, the fetch, the advisor. */
export interface ServerToolCall {
  readonly name: "web_search" | "web_fetch" | "advisor";
  readonly input: Record<string, unknown>;
}

/** The calls the executor makes for this request, one sampling pass before each. */
export function plannedToolCalls(features: DevFeatures, userText: string): ServerToolCall[] {
  const calls: ServerToolCall[] = [];
  const query = searchQuery(userText);
  const asked = SEARCHES_MARKER.exec(userText);
  const searches =
    asked === null ? features.webSearches : Math.min(Number(asked[1]), features.webSearchMaxUses);
  for (let round = 1; round <= searches; round++) {
    // Later rounds refine the query, as a model does when the first results fall short.
    calls.push({ name: "web_search", input: { query: round === 1 ? query : `${query} (refined ${round})` } });
  }
  if (features.webFetches > 0) calls.push({ name: "web_fetch", input: { url: fetchUrl(userText) } });
  if (features.advisor !== undefined) calls.push({ name: "advisor", input: {} });
  return calls;
}

/**
 * What to search for: Claude Code's sub-request says "Perform a web search for the query: Q";
 * a person says "search the web for Q"; anything else searches its first words.
 */
export function searchQuery(userText: string): string {
  const asked = /query:\s*(.+)$/im.exec(userText) ?? /search the web for\s+([^\n.?!]+)/i.exec(userText);
  const query = asked?.[1]?.trim() ?? userText.match(/\S+/g)?.slice(0, 8).join(" ") ?? "";
  return query === "" ? "dev-upstream" : query;
}

/** The URL to fetch: the first one in the user text, else a generated one. */
function fetchUrl(userText: string): string {
  return /https?:\/\/\S+/.exec(userText)?.[0] ?? "https://example.invalid/dev-upstream/page";
}

/**
 * Claude Code's client `WebSearch` tool call for a user asking to "search the web for Q": the
 * input of the tool_use, or undefined when the request does not ask for it. Claude Code then runs
 * the search as its own request with a web_search server tool.
 */
export function clientWebSearchInput(tools: unknown, userText: string): { query: string } | undefined {
  if (!/search the web for/i.test(userText) || !Array.isArray(tools)) return undefined;
  const tool = tools.find(
    (t) => isRecord(t) && t.name === "WebSearch" && (t.type === undefined || t.type === "custom"),
  );
  return tool === undefined ? undefined : { query: searchQuery(userText) };
}

/** The `content` of one search's web_search_tool_result: labelled results under example.invalid. */
export function searchResults(query: string): Record<string, unknown>[] {
  const slug =
    query
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, "-")
      .replace(/^-|-$/g, "") || "query";
  return Array.from({ length: RESULTS_PER_SEARCH }, (_, i) => {
    const url = `https://example.invalid/dev-upstream/search/${slug}/${i + 1}`;
    const text = `${SEARCH_LABEL} Result ${i + 1} for ${query}.`;
    return {
      type: "web_search_result",
      url,
      title: `${SEARCH_LABEL} ${query} #${i + 1}`,
      // Opaque in the real API; here a base64 of labelled text, one token in the dev count.
      encrypted_content: Buffer.from(text).toString("base64"),
      page_age: null,
    };
  });
}

/** The `content` of a web_fetch_tool_result for `url`: a labelled plain-text document. */
export function fetchResult(url: string): Record<string, unknown> {
  return {
    type: "web_fetch_result",
    url,
    retrieved_at: RETRIEVED_AT,
    content: {
      type: "document",
      source: { type: "text", media_type: "text/plain", data: `${PAGE_LABEL} The page at ${url}.` },
      title: `${PAGE_LABEL} ${url}`,
      citations: null,
    },
  };
}

/**
 * The advisor's answer after reading `inputTokens` of transcript: a labelled sentence, cut at
 * its `maxTokens` words; its output tokens are its words (the dev advisor does not think).
 */
export function advisorAdvice(
  model: string,
  inputTokens: number,
  maxTokens: number,
): { readonly content: Record<string, unknown>; readonly outputTokens: number } {
  const advice = `${ADVICE_LABEL} ${model} read ${inputTokens} tokens of the transcript and advises answering directly.`;
  const all = advice.match(/\S+/g) ?? [];
  const taken = all.slice(0, maxTokens);
  const stopReason = taken.length < all.length ? "max_tokens" : "end_turn";
  return {
    content: { type: "advisor_result", text: taken.join(" "), stop_reason: stopReason },
    outputTokens: taken.length,
  };
}

/** The compaction summary of a context of `inputTokens` ending with `userText`. */
export function compactionSummary(inputTokens: number, userText: string): string {
  const asked = userText.match(/\S+/g)?.slice(0, 8).join(" ") ?? "";
  return `${SUMMARY_LABEL} ${inputTokens} tokens summarised. Last asked: ${asked}`;
}

/**
 * The conversation the provider reads when `context_management` compacts: a compaction block
 * sent back (with its summary) replaces everything before it. Without one, the body as sent.
 */
export function compactedConversation(body: Record<string, unknown>): Record<string, unknown> {
  const messages = Array.isArray(body.messages) ? body.messages : [];
  for (let m = messages.length - 1; m >= 0; m--) {
    const message = messages[m];
    if (!isRecord(message) || !Array.isArray(message.content)) continue;
    const at = message.content.findLastIndex(
      (block) => isRecord(block) && block.type === "compaction" && typeof block.content === "string",
    );
    if (at < 0) continue;
    const kept = { ...message, content: message.content.slice(at) };
    return { ...body, messages: [kept, ...messages.slice(m + 1)] };
  }
  return body;
}

function isOneOf(model: string, family: readonly string[]): boolean {
  return family.some((name) => model === name || new RegExp(`^${name}-\\d{8}$`).test(model));
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
