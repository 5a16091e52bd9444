import type { DeliveredUsage, PassKind, TokenCounts, UsagePass } from "../billing/pricing.js";

/** The usage object of the Anthropic format, as billing reads it (PROTOCOLS §1.3–1.4, §6). */
type AnthropicUsage = Record<string, unknown>;

/** Maps a provider model name to the gateway's id; a name it does not know is returned as is. */
export type ModelResolver = (providerName: string) => string;

/** The top-level usage fields billing reads or knowingly ignores; any other one is flagged. */
const KNOWN_FIELDS = new Set([
  "input_tokens",
  "output_tokens",
  "cache_creation_input_tokens",
  "cache_read_input_tokens",
  "cache_creation",
  "server_tool_use",
  "service_tier",
  "inference_geo",
  "speed",
  "iterations",
  // Informational: thinking tokens are already inside output_tokens.
  "output_tokens_details",
]);
const CACHE_CREATION_FIELDS = new Set(["ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens"]);
const SERVER_TOOL_FIELDS = new Set(["web_search_requests", "web_fetch_requests"]);
const ITERATION_FIELDS = new Set([
  "type",
  "model",
  "input_tokens",
  "output_tokens",
  "cache_creation_input_tokens",
  "cache_read_input_tokens",
  "cache_creation",
]);
const ITERATION_KINDS: Readonly<Record<string, PassKind>> = {
  message: "message",
  compaction: "compaction",
  advisor_message: "advisor",
  fallback_message: "fallback",
};

/**
 * A call's usage as billing prices it, from an Anthropic `usage` object and the answer's
 * `model`: the top-level counts, each `iterations` entry as a pass at its own model, the speed,
 * the residency, and the server tools' counts. Cache writes are split per TTL from
 * `cache_creation`; a `cache_creation_input_tokens` total larger than the two TTLs together (an
 * upstream that reports only the total) is billed at the 5-minute rate, the format's default
 * TTL. Fields, iteration types and values it does not know are listed in `unpriced`: the call is
 * charged for everything it knows, and the operator is told.
 */
export function billedUsage(usage: AnthropicUsage, model: unknown, resolve: ModelResolver): DeliveredUsage {
  const unpriced: string[] = [];
  flagUnknown(usage, KNOWN_FIELDS, "usage", unpriced);
  flagUnknown(object(usage.cache_creation), CACHE_CREATION_FIELDS, "usage.cache_creation", unpriced);
  const tools = object(usage.server_tool_use);
  flagUnknown(tools, SERVER_TOOL_FIELDS, "usage.server_tool_use", unpriced);
  const speed = usage.speed;
  if (speed !== undefined && speed !== null && speed !== "standard" && speed !== "fast")
    unpriced.push("usage.speed");
  const iterations = Array.isArray(usage.iterations) ? usage.iterations : [];
  const passes = iterations.map((entry: unknown, i): UsagePass => {
    const iteration = object(entry);
    flagUnknown(iteration, ITERATION_FIELDS, `usage.iterations.${i}`, unpriced);
    const kind = typeof iteration.type === "string" ? ITERATION_KINDS[iteration.type] : undefined;
    return {
      ...tokenCounts(iteration),
      kind: kind ?? "unknown",
      model: typeof iteration.model === "string" && iteration.model !== "" ? resolve(iteration.model) : "",
    };
  });
  return {
    ...tokenCounts(usage),
    images: 0,
    model: typeof model === "string" && model !== "" ? resolve(model) : "",
    passes,
    speed: speed === "fast" ? "fast" : "standard",
    inferenceGeo: typeof usage.inference_geo === "string" ? usage.inference_geo : "",
    webSearchRequests: count(tools.web_search_requests),
    webFetchRequests: count(tools.web_fetch_requests),
    unpriced,
  };
}

/**
 * Whether a usage object reports the two counts every answer carries (`input_tokens` and
 * `output_tokens` are required in the format): without them the charge is measured instead.
 */
export function hasUsage(usage: AnthropicUsage | undefined): usage is AnthropicUsage {
  return (
    usage !== undefined && typeof usage.input_tokens === "number" && typeof usage.output_tokens === "number"
  );
}

/** A non-streaming answer (a Message): its usage, model and content; throws if it is not JSON. */
export function readMessage(body: string): {
  usage: AnthropicUsage | undefined;
  model: unknown;
  content: unknown;
} {
  const message = JSON.parse(body) as { usage?: unknown; model?: unknown; content?: unknown } | null;
  if (message === null || typeof message !== "object")
    throw new Error("the provider's response is not a message");
  const usage = message.usage;
  return {
    usage: typeof usage === "object" && usage !== null ? (usage as AnthropicUsage) : undefined,
    model: message.model,
    content: message.content,
  };
}

/** The generated text of a message's content blocks (text, thinking, tool input), for counting. */
export function contentTexts(content: unknown): string[] {
  if (!Array.isArray(content)) return [];
  const texts: string[] = [];
  for (const block of content) {
    const b = object(block);
    const text = b.text ?? b.thinking ?? (b.input === undefined ? undefined : JSON.stringify(b.input));
    if (typeof text === "string" && text.length > 0) texts.push(text);
  }
  return texts;
}

/**
 * Follows a relayed stream and knows, at any point, what was delivered: the usage of
 * `message_start`, overwritten field by field by each cumulative `message_delta` (the format's
 * rule: overwrite when present, never add; `server_tool_use` and `iterations` arrive there), the
 * model that answered, and the raw text of every delivered content delta. It is told only of
 * events the client has received. Deltas are kept unparsed: they are read only when a stream
 * is cut (or carried no usage) and its output must be counted.
 */
export class StreamMeter {
  private usage: AnthropicUsage | undefined;
  private model: unknown;
  private readonly deltas: string[] = [];
  /** `message_start` reached the client: the input was consumed. */
  started = false;
  /** The final `message_delta` reached the client: its usage is authoritative. */
  finished = false;
  /** The provider sent an `error` event. */
  failed = false;

  /** Records one delivered event (`data` as the provider sent it). */
  delivered(event: string, data: string): void {
    switch (event) {
      case "content_block_delta":
        this.deltas.push(data);
        return;
      case "message_start": {
        const start = JSON.parse(data) as { message?: { usage?: AnthropicUsage; model?: unknown } };
        this.usage = start.message?.usage === undefined ? undefined : { ...start.message.usage };
        this.model = start.message?.model;
        this.started = true;
        return;
      }
      case "message_delta": {
        const delta = JSON.parse(data) as { usage?: AnthropicUsage; delta?: { stop_reason?: unknown } };
        if (delta.usage !== undefined && delta.usage !== null) {
          this.usage ??= {};
          const usage = this.usage;
          for (const [field, value] of Object.entries(delta.usage)) {
            if (value !== null && value !== undefined) usage[field] = value;
          }
        }
        // A message_delta with a stop reason closes the message; its counts are final.
        if (delta.delta?.stop_reason !== undefined && delta.delta.stop_reason !== null) this.finished = true;
        return;
      }
      case "error":
        this.failed = true;
        return;
    }
  }

  /** Whether any content (text, thinking, tool input) reached the client. */
  get deliveredContent(): boolean {
    return this.deltas.length > 0;
  }

  /** Whether the provider reported any usage so far. */
  get reportedAny(): boolean {
    return hasUsage(this.usage);
  }

  /** The usage reported so far (final once {@link finished}). */
  reported(resolve: ModelResolver): DeliveredUsage {
    return billedUsage(this.usage ?? {}, this.model, resolve);
  }

  /**
   * The generated text the client received, one string per content block in block order:
   * text, thinking and tool-input JSON. Signatures are not output text and are left out.
   */
  deliveredBlocks(): string[] {
    const blocks = new Map<number, string>();
    for (const data of this.deltas) {
      const { index, delta } = JSON.parse(data) as { index?: number; delta?: Record<string, unknown> };
      const text = delta?.text ?? delta?.thinking ?? delta?.partial_json;
      if (typeof index !== "number" || typeof text !== "string") continue;
      blocks.set(index, (blocks.get(index) ?? "") + text);
    }
    return [...blocks.entries()]
      .sort(([a], [b]) => a - b)
      .map(([, text]) => text)
      .filter((text) => text.length > 0);
  }
}

function tokenCounts(usage: AnthropicUsage): TokenCounts {
  const creation = object(usage.cache_creation);
  const write5m = count(creation.ephemeral_5m_input_tokens);
  const write1h = count(creation.ephemeral_1h_input_tokens);
  const writeTotal = count(usage.cache_creation_input_tokens);
  const unattributed = writeTotal > write5m + write1h ? writeTotal - write5m - write1h : 0n;
  return {
    inputTokens: count(usage.input_tokens),
    outputTokens: count(usage.output_tokens),
    cacheWrite5mTokens: write5m + unattributed,
    cacheWrite1hTokens: write1h,
    cacheReadTokens: count(usage.cache_read_input_tokens),
  };
}

/** Lists the fields of `obj` outside `known` that carry a value (null, 0 and "" bill nothing). */
function flagUnknown(
  obj: Record<string, unknown>,
  known: ReadonlySet<string>,
  path: string,
  out: string[],
): void {
  for (const [field, value] of Object.entries(obj)) {
    if (known.has(field) || value === null || value === 0 || value === "" || value === false) continue;
    out.push(`${path}.${field}`);
  }
}

function object(value: unknown): Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : {};
}

function count(value: unknown): bigint {
  return typeof value === "number" && Number.isSafeInteger(value) && value > 0 ? BigInt(value) : 0n;
}
