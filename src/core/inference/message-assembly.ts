/**
 * A message put together from its stream's events, as the provider's non-streaming answer
 * would carry it: the gateway sends a call it holds pass by pass to the provider as a stream
 * (it must see the pass boundaries) and answers a non-streaming client with the message the
 * events describe. The rules are the official SDK's (`BetaMessageStream`'s accumulation in
 * @anthropic-ai/sdk): `message_start` gives the message with empty content, each block starts
 * whole and grows by its deltas (text, citations, tool input JSON parsed at the block's stop,
 * thinking, signature, compaction), `message_delta` sets the stop reason and overwrites the
 * usage field by field, and a `fallback` block relabels the model that served.
 */
export class MessageAssembly {
  #message: Record<string, unknown> | undefined;
  readonly #content: Record<string, unknown>[] = [];
  /** Tool input JSON, by block index, until the block stops. */
  readonly #inputs = new Map<number, string>();

  /** Takes one event (`data` as the provider sent it). */
  add(event: string, data: string): void {
    switch (event) {
      case "message_start": {
        const message = record(record(JSON.parse(data)).message);
        this.#message = { ...message, usage: { ...record(message.usage) } };
        return;
      }
      case "content_block_start": {
        const { index, content_block } = JSON.parse(data) as { index: number; content_block: unknown };
        const block = { ...record(content_block) };
        this.#content[index] = block;
        if (block.type === "fallback" && this.#message !== undefined) {
          const to = record(block.to).model ?? block.to;
          if (typeof to === "string") this.#message.model = to;
        }
        return;
      }
      case "content_block_delta": {
        const { index, delta } = JSON.parse(data) as { index: number; delta: Record<string, unknown> };
        const block = this.#content[index];
        if (block === undefined) return;
        switch (delta.type) {
          case "text_delta":
            block.text = `${block.text ?? ""}${delta.text}`;
            return;
          case "citations_delta":
            block.citations = [...((block.citations as unknown[] | undefined) ?? []), delta.citation];
            return;
          case "input_json_delta":
            this.#inputs.set(index, (this.#inputs.get(index) ?? "") + String(delta.partial_json));
            return;
          case "thinking_delta":
            block.thinking = `${block.thinking ?? ""}${delta.thinking}`;
            return;
          case "signature_delta":
            block.signature = delta.signature;
            return;
          case "compaction_delta":
            block.content = delta.content;
            if ("encrypted_content" in delta) block.encrypted_content = delta.encrypted_content;
            return;
        }
        return;
      }
      case "content_block_stop": {
        const { index } = JSON.parse(data) as { index: number };
        const json = this.#inputs.get(index);
        const block = this.#content[index];
        if (json === undefined || block === undefined) return;
        this.#inputs.delete(index);
        block.input = json.trim() === "" ? {} : JSON.parse(json);
        return;
      }
      case "message_delta": {
        if (this.#message === undefined) return;
        const { delta, usage } = JSON.parse(data) as {
          delta?: Record<string, unknown>;
          usage?: Record<string, unknown>;
        };
        for (const [field, value] of Object.entries(delta ?? {})) this.#message[field] = value;
        const total = record(this.#message.usage);
        for (const [field, value] of Object.entries(usage ?? {})) {
          if (value !== null && value !== undefined) total[field] = value;
        }
        return;
      }
    }
  }

  /** The message so far as JSON text: whole once `message_stop` went by. */
  text(): string {
    return JSON.stringify({ ...this.#message, content: this.#content.filter((b) => b !== undefined) });
  }
}

function record(value: unknown): Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : {};
}
