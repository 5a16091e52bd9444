import type { TextCallSpec } from "../billing/pricing.js";

/**
 * Where a stream shows that the provider starts another sampling pass of the same call
 * (docs/billing.md, "Holding pass by pass"): the block that ends the pass in progress.
 * - `server_tool`: a `server_tool_use` block (web search, web fetch, the advisor, a tool
 *   search or an MCP tool): the tool runs, then the next pass reads the whole context so far
 *   plus its result; the advisor also runs a pass of its own at the advisor model.
 * - `compaction`: a `compaction` block: the summarising pass is over, the executor's pass
 *   reads the summary next.
 * - `fallback`: a `fallback` block: the model asked for declined, `to` (a provider model name)
 *   serves the call.
 * - `result`: a server tool's result block (`web_search_tool_result`, …), which arrives whole:
 *   `bytes` (its JSON's UTF-8 length) bounds the tokens the next pass reads of it.
 */
export type StreamBoundary =
  | { readonly kind: "server_tool"; readonly name: string }
  | { readonly kind: "compaction" }
  | { readonly kind: "fallback"; readonly to: string }
  | { readonly kind: "result"; readonly bytes: number };

/**
 * Holds for what a boundary starts before it is relayed: resolves true when nothing more is
 * needed or the raise was granted (durably), false when the balance cannot cover it; the call's
 * stream then ends there as a paused turn.
 */
export type PassRaiser = (boundary: StreamBoundary) => Promise<boolean>;

/** Whether a call may run several sampling passes (a server tool, compaction, fallbacks, an advisor). */
export function runsSeveralPasses(spec: TextCallSpec): boolean {
  return (
    spec.serverToolLoop === true ||
    spec.compaction === true ||
    spec.advisor !== undefined ||
    (spec.fallbacks?.length ?? 0) > 0 ||
    spec.defaultFallback === true
  );
}

/**
 * The boundary a stream event shows, or undefined: only a `content_block_start` can be one, and
 * only of the block types above. `data` is the event's JSON as the provider sent it; the type is
 * looked for before it is parsed, so the per-event cost of a call that cannot loop stays nil.
 */
export function passBoundary(event: string, data: string): StreamBoundary | undefined {
  if (event !== "content_block_start") return undefined;
  if (!BOUNDARY_TYPES.test(data)) return undefined;
  const block = (JSON.parse(data) as { content_block?: Record<string, unknown> }).content_block;
  switch (block?.type) {
    case "server_tool_use":
      return { kind: "server_tool", name: typeof block.name === "string" ? block.name : "" };
    case "compaction":
      return { kind: "compaction" };
    case "fallback":
      return { kind: "fallback", to: fallbackModel(block.to) };
    default:
      return typeof block?.type === "string" && block.type.endsWith("_tool_result")
        ? { kind: "result", bytes: Buffer.byteLength(data) }
        : undefined;
  }
}

/** The model a fallback block hands the call to: `to.model` (the SDK's shape), or `to` itself. */
function fallbackModel(to: unknown): string {
  if (typeof to === "string") return to;
  const model = typeof to === "object" && to !== null ? (to as { model?: unknown }).model : undefined;
  return typeof model === "string" ? model : "";
}

const BOUNDARY_TYPES = /"(server_tool_use|compaction|fallback|[a-z_]+_tool_result)"/;

/**
 * The end of a turn the gateway pauses at a boundary it could not hold for, in the format's own
 * shape for a paused server-tool turn: `message_delta` with `stop_reason: "pause_turn"` (and the
 * output so far, an estimate: the provider's final count never came), then `message_stop`.
 * Clients re-send the conversation to continue (docs/billing.md).
 */
export function pausedTurnEnding(outputSoFar: bigint): readonly { event: string; data: string }[] {
  return [
    {
      event: "message_delta",
      data: JSON.stringify({
        type: "message_delta",
        delta: { stop_reason: "pause_turn", stop_sequence: null },
        usage: { output_tokens: Number(outputSoFar) },
      }),
    },
    { event: "message_stop", data: JSON.stringify({ type: "message_stop" }) },
  ];
}
