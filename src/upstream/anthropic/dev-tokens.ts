/**
 * The dev-upstream's tokenizer and prompt-cache accounting. Not a real tokenizer: one token per
 * run of non-whitespace, so tests can compute expected usage (and prices) by hand.
 *
 * Counting ({@link countRequestTokens}): the sum of {@link devTokenCount} over every text-bearing
 * string of a request — `system` (a string, or each block's `text`); each message's `content`
 * (a string, or per block: `text` of text blocks, `thinking` of thinking blocks,
 * `JSON.stringify(input)` of tool_use blocks, a tool_result's `content` string or its text
 * blocks); `JSON.stringify(tool)` for each entry of `tools` — plus 3 per message. Other blocks
 * (images, documents, redacted thinking) count 0. Adding a text block `{type:"text",text:T}` to a
 * message therefore adds exactly `devTokenCount(T)`.
 *
 * Caching ({@link DevPromptCache}): the request is walked as a sequence of units — each tool,
 * then each system block (a string system is one unit), then per message a 3-token unit for the
 * message itself followed by its content blocks (a string content is one unit). A unit carrying
 * `cache_control: {type:"ephemeral", ttl?:"5m"|"1h"}` is a breakpoint (ttl defaults to 5m); a
 * top-level `cache_control` (automatic caching) is a breakpoint on the last unit of the last
 * message. A prefix (model + units up to and including one, `cache_control` stripped, canonical
 * JSON) is identified by its hash. The longest cached, unexpired prefix ending at a breakpoint or
 * up to 20 units before one (the real API's look-back, which lets a conversation move its
 * breakpoint forward each turn) makes every token in it a cache read and refreshes its expiry;
 * each breakpoint after it turns the tokens since the previous cached point into a cache write of
 * its ttl and caches its prefix; tokens after the last breakpoint are plain input. There is no
 * minimum cacheable length. Hence input + cache writes + cache reads = {@link countRequestTokens}.
 */
import { createHash } from "node:crypto";

/** The dev tokenizer: one token per run of non-whitespace characters. */
export function devTokenCount(text: string): number {
  return text.match(/\S+/g)?.length ?? 0;
}

/** Input tokens of a Messages request body (parsed JSON), by the rule in this file's comment. */
export function countRequestTokens(json: unknown): number {
  let total = 0;
  for (const unit of requestUnits(json)) total += unit.tokens;
  return total;
}

/** How a request's input tokens split by prompt caching, in the Anthropic usage field names. */
export interface InputUsage {
  readonly input_tokens: number;
  readonly cache_creation_input_tokens: number;
  readonly cache_read_input_tokens: number;
  readonly cache_creation: {
    readonly ephemeral_5m_input_tokens: number;
    readonly ephemeral_1h_input_tokens: number;
  };
}

const TTL_MS = { "5m": 5 * 60_000, "1h": 60 * 60_000 } as const;
type Ttl = keyof typeof TTL_MS;
/** How far before a breakpoint the cache looks for an earlier cached prefix. */
const LOOK_BACK_UNITS = 20;

/** An in-memory prompt cache that splits each request's input tokens into reads, writes and input. */
export class DevPromptCache {
  /** Prefix hash → when it expires (ms since epoch) and the lifetime a hit renews. */
  readonly #entries = new Map<string, { expiry: number; ttl: Ttl }>();

  /** Accounts one request at `now`, recording the prefixes it writes and refreshing those it reads. */
  account(json: unknown, now: number = Date.now()): InputUsage {
    const units = requestUnits(json);
    const model = isRecord(json) && typeof json.model === "string" ? json.model : "";
    // Per unit: the hash of the prefix ending with it, and the tokens through it.
    const prefixes: { hash: string; tokensThrough: number }[] = [];
    const breakpoints: { index: number; ttl: Ttl }[] = [];
    const hasher = createHash("sha256").update(JSON.stringify(model));
    let running = 0;
    for (const [index, unit] of units.entries()) {
      hasher.update("\n").update(unit.canonical);
      running += unit.tokens;
      prefixes.push({ hash: hasher.copy().digest("hex"), tokensThrough: running });
      if (unit.ttl !== undefined) breakpoints.push({ index, ttl: unit.ttl });
    }
    for (const [hash, entry] of this.#entries) if (entry.expiry <= now) this.#entries.delete(hash);

    let hit = -1;
    for (const point of breakpoints) {
      for (let i = point.index; i >= Math.max(0, point.index - LOOK_BACK_UNITS) && i > hit; i--) {
        if (this.#entries.has(prefixes[i]!.hash)) {
          hit = i;
          break;
        }
      }
    }
    let read = 0;
    if (hit >= 0) {
      const prefix = prefixes[hit]!;
      const entry = this.#entries.get(prefix.hash)!;
      read = prefix.tokensThrough;
      // A hit refreshes the entry's lifetime, as the real cache does.
      entry.expiry = Math.max(entry.expiry, now + TTL_MS[entry.ttl]);
    }
    let write5m = 0;
    let write1h = 0;
    let cached = read;
    for (const point of breakpoints) {
      if (point.index <= hit) continue;
      const prefix = prefixes[point.index]!;
      const segment = prefix.tokensThrough - cached;
      if (point.ttl === "1h") write1h += segment;
      else write5m += segment;
      cached = prefix.tokensThrough;
      this.#entries.set(prefix.hash, { expiry: now + TTL_MS[point.ttl], ttl: point.ttl });
    }
    const input = running - cached;
    return {
      input_tokens: input,
      cache_creation_input_tokens: write5m + write1h,
      cache_read_input_tokens: read,
      cache_creation: { ephemeral_5m_input_tokens: write5m, ephemeral_1h_input_tokens: write1h },
    };
  }

  /** Forgets every cached prefix. */
  clear(): void {
    this.#entries.clear();
  }
}

/** One step of the walk over a request: its tokens, its cache breakpoint, and what it hashes as. */
interface Unit {
  readonly tokens: number;
  readonly ttl: Ttl | undefined;
  readonly canonical: string;
}

function requestUnits(json: unknown): Unit[] {
  const units: Unit[] = [];
  if (!isRecord(json)) return units;
  if (Array.isArray(json.tools)) {
    for (const tool of json.tools) units.push(unit(tool, devTokenCount(JSON.stringify(tool) ?? "")));
  }
  if (typeof json.system === "string") units.push(unit(json.system, devTokenCount(json.system)));
  else if (Array.isArray(json.system)) {
    for (const block of json.system) units.push(unit(block, textOf(block)));
  }
  let lastMessageUnit = -1;
  if (Array.isArray(json.messages)) {
    for (const message of json.messages) {
      const role = isRecord(message) ? message.role : undefined;
      units.push({ tokens: 3, ttl: undefined, canonical: canonicalJson({ role }) });
      const content = isRecord(message) ? message.content : undefined;
      if (typeof content === "string") units.push(unit(content, devTokenCount(content)));
      else if (Array.isArray(content)) {
        for (const block of content) units.push(unit(block, blockTokens(block)));
      }
      lastMessageUnit = units.length - 1;
    }
  }
  // Automatic caching: the top-level breakpoint moves onto the last block of the conversation.
  const automatic = ttlOf(json);
  const last = units[lastMessageUnit];
  if (automatic !== undefined && last !== undefined && last.ttl === undefined) {
    units[lastMessageUnit] = { ...last, ttl: automatic };
  }
  return units;
}

function unit(value: unknown, tokens: number): Unit {
  return { tokens, ttl: ttlOf(value), canonical: canonicalJson(value) };
}

function blockTokens(block: unknown): number {
  if (!isRecord(block)) return 0;
  switch (block.type) {
    case "text":
      return textOf(block);
    case "thinking":
      return typeof block.thinking === "string" ? devTokenCount(block.thinking) : 0;
    case "tool_use":
    case "server_tool_use":
      return devTokenCount(JSON.stringify(block.input ?? {}));
    case "tool_result": {
      const content = block.content;
      if (typeof content === "string") return devTokenCount(content);
      if (!Array.isArray(content)) return 0;
      let total = 0;
      for (const inner of content) if (isRecord(inner) && inner.type === "text") total += textOf(inner);
      return total;
    }
    default:
      return 0;
  }
}

function textOf(block: unknown): number {
  return isRecord(block) && typeof block.text === "string" ? devTokenCount(block.text) : 0;
}

function ttlOf(value: unknown): Ttl | undefined {
  if (!isRecord(value) || !isRecord(value.cache_control)) return undefined;
  if (value.cache_control.type !== "ephemeral") return undefined;
  return value.cache_control.ttl === "1h" ? "1h" : "5m";
}

/** Key-sorted JSON without `cache_control`, so moving a breakpoint keeps the prefix's identity. */
function canonicalJson(value: unknown): string {
  return (
    JSON.stringify(value, (_key, inner: unknown) => {
      if (!isRecord(inner)) return inner;
      const sorted: Record<string, unknown> = {};
      for (const key of Object.keys(inner).sort()) if (key !== "cache_control") sorted[key] = inner[key];
      return sorted;
    }) ?? "null"
  );
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
