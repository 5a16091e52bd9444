import type { DeliveredUsage } from "../billing/pricing.js";

/** The usage fields of the Anthropic format that billing reads (PROTOCOLS §1.3–1.4). */
interface AnthropicUsage {
  input_tokens?: number | null;
  output_tokens?: number | null;
  cache_creation_input_tokens?: number | null;
  cache_read_input_tokens?: number | null;
  cache_creation?: {
    ephemeral_5m_input_tokens?: number | null;
    ephemeral_1h_input_tokens?: number | null;
  } | null;
}

/** Usage with every count zero. */
const ZERO: DeliveredUsage = {
  inputTokens: 0n,
  outputTokens: 0n,
  cacheWrite5mTokens: 0n,
  cacheWrite1hTokens: 0n,
  cacheReadTokens: 0n,
  images: 0,
};

/**
 * A call's usage as billing counts it, from an Anthropic `usage` object. Cache writes are billed
 * per TTL from `cache_creation`; a `cache_creation_input_tokens` total larger than the two TTLs
 * together (an upstream that reports only the total) is billed at the 5-minute rate, the
 * format's default TTL.
 */
export function billedUsage(usage: AnthropicUsage | undefined): DeliveredUsage {
  if (usage === undefined) return ZERO;
  const write5m = count(usage.cache_creation?.ephemeral_5m_input_tokens);
  const write1h = count(usage.cache_creation?.ephemeral_1h_input_tokens);
  const writeTotal = count(usage.cache_creation_input_tokens);
  const unattributed = writeTotal > write5m + write1h ? writeTotal - write5m - write1h : 0n;
  return {
    inputTokens: count(usage.input_tokens),
    outputTokens: count(usage.output_tokens),
    cacheWrite5mTokens: write5m + unattributed,
    cacheWrite1hTokens: write1h,
    cacheReadTokens: count(usage.cache_read_input_tokens),
    images: 0,
  };
}

/** The usage of a non-streaming response body (a Message); throws if it is not one. */
export function messageUsage(body: string): DeliveredUsage {
  const message = JSON.parse(body) as { type?: unknown; usage?: AnthropicUsage };
  if (message === null || typeof message !== "object" || typeof message.usage !== "object") {
    throw new Error("the provider's response has no usage");
  }
  return billedUsage(message.usage);
}

/**
 * Follows a relayed stream and knows, at any point, what was delivered: the usage of
 * `message_start`, overwritten field by field by each cumulative `message_delta` (the format's
 * rule: overwrite when present, never add), and the raw text of every delivered content delta.
 * It is told only of events the client has received. Deltas are kept unparsed: they are read
 * only when a stream is cut and its output must be counted.
 */
export class StreamMeter {
  private usage: AnthropicUsage | undefined;
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
        const start = JSON.parse(data) as { message?: { usage?: AnthropicUsage } };
        this.usage = { ...start.message?.usage };
        this.started = true;
        return;
      }
      case "message_delta": {
        const delta = JSON.parse(data) as { usage?: AnthropicUsage; delta?: { stop_reason?: unknown } };
        this.usage ??= {};
        const usage = this.usage;
        for (const [field, value] of Object.entries(delta.usage ?? {})) {
          if (value !== null && value !== undefined) (usage as Record<string, unknown>)[field] = value;
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

  /** The usage reported so far (final once {@link finished}). */
  reported(): DeliveredUsage {
    return billedUsage(this.usage);
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

function count(value: number | null | undefined): bigint {
  return typeof value === "number" && Number.isSafeInteger(value) && value > 0 ? BigInt(value) : 0n;
}
