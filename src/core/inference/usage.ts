import { ConnectError } from "@connectrpc/connect";
import {
  checkUsage,
  type DeliveredUsage,
  type PassKind,
  type TokenCounts,
  type UsagePass,
} from "../billing/pricing.js";
import { UpstreamFailure } from "../ports/providers.js";

/** The usage object of the Anthropic format, as billing reads it (docs/protocols.md, "Usage"). */
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

/** The token counts of a usage object or one of its `iterations`, each checked when present. */
const COUNT_FIELDS = [
  "input_tokens",
  "output_tokens",
  "cache_creation_input_tokens",
  "cache_read_input_tokens",
] as const;

/**
 * Why a usage object cannot be billed as reported, or undefined when it can. Billable usage
 * carries the format's two required counts (`input_tokens`, `output_tokens`); every count it
 * carries is a whole number, not negative, within what one call can bill (billing's own bounds);
 * some input was read (input, cache writes and cache reads together: no request has none); and
 * when content reached the client, some output was written. Anything else — missing, negative,
 * fractional, absurd or contradicted by what was delivered — is not believed: the call is
 * charged the gateway's own count instead (never a silent $0, never a settlement that fails).
 */
export function usageProblem(
  usage: AnthropicUsage | undefined,
  contentDelivered: boolean,
): string | undefined {
  if (usage === undefined) return "no usage";
  if (typeof usage.input_tokens !== "number" || typeof usage.output_tokens !== "number")
    return "no input_tokens and output_tokens";
  const iterations = Array.isArray(usage.iterations) ? usage.iterations : [];
  const counts = [
    ...countFields("usage", usage),
    ...Object.entries(object(usage.server_tool_use)).map(
      ([f, v]): Count => [`usage.server_tool_use.${f}`, v],
    ),
    ...iterations.flatMap((entry: unknown, i) => countFields(`usage.iterations.${i}`, object(entry))),
  ];
  for (const [field, value] of counts) {
    if (value === undefined || value === null) continue;
    if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0)
      return `${field} is ${JSON.stringify(value) ?? String(value)}`;
  }
  try {
    // Billing's own bounds, so that the settlement can never refuse what is charged here.
    checkUsage(billedUsage(usage, "", (name) => name));
  } catch (error) {
    return error instanceof ConnectError ? error.rawMessage : String(error);
  }
  const read =
    count(usage.input_tokens) +
    count(usage.cache_creation_input_tokens) +
    count(usage.cache_read_input_tokens);
  if (read === 0n) return "no input tokens read";
  if (contentDelivered && usage.output_tokens === 0) return "no output tokens for delivered content";
  return undefined;
}

/** A reported count: its path in the usage object and its value. */
type Count = [string, unknown];

/** The token counts of a usage object or of one of its passes, cache TTLs included. */
function countFields(path: string, counts: Record<string, unknown>): Count[] {
  return [
    ...COUNT_FIELDS.map((field): Count => [`${path}.${field}`, counts[field]]),
    ...Object.entries(object(counts.cache_creation)).map(
      ([f, v]): Count => [`${path}.cache_creation.${f}`, v],
    ),
  ];
}

/**
 * A non-streaming answer (a Message): its usage, model and content. Throws UpstreamFailure
 * "malformed" unless it is a JSON object of `type` "message" with a `content` array — anything
 * else (HTML, an error object sent with a 200, a truncated body) is no answer to relay or bill.
 */
export function readMessage(body: string): {
  usage: AnthropicUsage | undefined;
  model: unknown;
  content: unknown;
} {
  let message: unknown;
  try {
    message = JSON.parse(body);
  } catch {
    throw new UpstreamFailure("malformed", "upstream 200 body is not JSON");
  }
  if (typeof message !== "object" || message === null || Array.isArray(message))
    throw new UpstreamFailure("malformed", "upstream 200 body is not a JSON object");
  const { type, content, usage, model } = message as Record<string, unknown>;
  if (type !== "message" || !Array.isArray(content))
    throw new UpstreamFailure(
      "malformed",
      `upstream 200 body is not a message (type ${JSON.stringify(type) ?? "missing"})`,
    );
  return {
    usage: typeof usage === "object" && usage !== null ? (usage as AnthropicUsage) : undefined,
    model,
    content,
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
  /**
   * The gateway ended the turn at a pass boundary it could not hold for: the provider's final
   * usage never came, so the delivered output is counted (as for a cut stream).
   */
  paused = false;

  /** Records one delivered event (`data` as the provider sent it). */
  delivered(event: string, data: string): void {
    switch (event) {
      case "content_block_delta":
        this.deltas.push(data);
        return;
      case "content_block_start": {
        // The format starts blocks empty; a provider that starts one with text delivered it.
        const block = object(object(JSON.parse(data)).content_block);
        if (typeof (block.text ?? block.thinking) === "string" && (block.text ?? block.thinking) !== "")
          this.deltas.push(data);
        return;
      }
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

  /** The output delivered so far, estimated (a token per four characters, rounded up). */
  outputEstimate(): bigint {
    const chars = this.deliveredBlocks().reduce((n, text) => n + text.length, 0);
    return BigInt(Math.ceil(chars / 4));
  }

  /** Whether any content (text, thinking, tool input) reached the client. */
  get deliveredContent(): boolean {
    return this.deltas.length > 0;
  }

  /**
   * Why the usage reported so far cannot be billed as it stands (see {@link usageProblem}), or
   * undefined. Before the final `message_delta` only the input side is judged: the output of a
   * cut stream is counted, not read.
   */
  get usageProblem(): string | undefined {
    return usageProblem(this.usage, this.finished && this.deliveredContent);
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
      const { index, delta, content_block } = JSON.parse(data) as {
        index?: number;
        delta?: Record<string, unknown>;
        content_block?: Record<string, unknown>;
      };
      const part = delta ?? content_block;
      const text = part?.text ?? part?.thinking ?? part?.partial_json;
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
  // Object.keys, not Object.entries: no [field, value] pair per field on every billed call.
  for (const field of Object.keys(obj)) {
    const value = obj[field];
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
