import type { TextModel } from "./model-catalog.js";

/** Tokens the provider adds around the request's own text (tool-use system prompt, message framing). */
export const PROVIDER_OVERHEAD_TOKENS = 4_096;

/** Tokens allowed per `image` block: its bytes do not bound its tokens. */
export const IMAGE_BLOCK_TOKENS = 6_000;

/** Tokens allowed per `document` block whose source is not plain text (PDF, URL, file, content). */
export const DOCUMENT_BLOCK_TOKENS = 100_000;

/**
 * An upper bound of a request's input tokens, all kinds together, for the pre-call hold.
 *
 * The tokenizer is byte-level, so a text never has more tokens than its UTF-8 bytes: the JSON
 * body's byte length bounds all the request's text (messages, system, tool schemas, JSON
 * escaping only adds bytes), plus {@link PROVIDER_OVERHEAD_TOKENS} for what the provider adds.
 * Media are not bounded by their bytes (a URL or file id is a few bytes; a page renders to many
 * tokens), so each `image` block adds {@link IMAGE_BLOCK_TOKENS} and each non-text `document`
 * block {@link DOCUMENT_BLOCK_TOKENS}, wherever they appear: in message content and in the
 * content of nested blocks such as `tool_result`. The total is capped at the model's context
 * window, since the provider refuses larger inputs before charging for them.
 */
export function inputTokenBound(
  bodyBytes: number,
  json: Readonly<Record<string, unknown>>,
  model: TextModel,
): bigint {
  let tokens = bodyBytes + PROVIDER_OVERHEAD_TOKENS;
  const messages = json.messages;
  if (Array.isArray(messages)) {
    for (const message of messages) {
      if (typeof message === "object" && message !== null) tokens += mediaTokens((message as Blocky).content);
    }
  }
  return BigInt(Math.min(tokens, model.contextWindow));
}

interface Blocky {
  readonly type?: unknown;
  readonly content?: unknown;
  readonly source?: unknown;
}

/**
 * The media allowance of content arrays, including those nested in blocks that carry content of
 * their own (tool_result). A work list, not recursion: nesting depth is the client's choice.
 */
function mediaTokens(content: unknown): number {
  let tokens = 0;
  const pending: unknown[] = [content];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    if (!Array.isArray(next)) continue;
    for (const item of next) {
      if (typeof item !== "object" || item === null) continue;
      const block = item as Blocky;
      if (block.type === "image") {
        tokens += IMAGE_BLOCK_TOKENS;
      } else if (block.type === "document") {
        const source = block.source as Blocky | null | undefined;
        if (source?.type !== "text") tokens += DOCUMENT_BLOCK_TOKENS;
      } else if (Array.isArray(block.content)) {
        pending.push(block.content);
      }
    }
  }
  return tokens;
}
