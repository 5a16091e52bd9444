import type { AdvisorSpec, FallbackSpec, Speed, TextCallSpec } from "../billing/pricing.js";
import { MAX_FALLBACKS, MAX_TOOL_USES } from "../billing/pricing.js";
import { invalidField } from "../errors.js";
import type { Fields } from "./messages-request.js";
import type { ModelCatalog } from "./model-catalog.js";

/** The `max_uses` a web search tool without one is sent with, unless configured. */
export const DEFAULT_WEB_SEARCH_MAX_USES = 5;

/** What a request switches on that the provider bills beyond its four token counts. */
export type BillableFeatures = Omit<TextCallSpec, "kind" | "model" | "inputTokens" | "maxTokens">;

/** The features, and the fields as they go to the provider. */
export interface ReadFeatures {
  readonly features: BillableFeatures;
  /**
   * The request's other fields for the provider: the input object itself when nothing changed,
   * else a copy with new `tools` / `fallbacks` arrays (a model name or an inserted cap).
   */
  readonly rest: Fields;
  /** Each cap inserted (`tools.N.max_uses`), in order. */
  readonly repaired: readonly string[];
  /**
   * The server tools the request carries, by the prefix of each tool's `type` (its date suffix
   * dropped: `web_search`, `mcp_toolset`, …; `mcp_servers` for the MCP connector), for routing
   * to endpoints that run them (docs/providers.md).
   */
  readonly serverTools: readonly string[];
}

/** How the gateway treats a tool, by its `type`. */
type ToolKind =
  /** Run by the caller: the provider only samples the call (tokens). */
  | "client"
  /** Run by the provider inside the call: the call may loop (tokens, summed over iterations). */
  | "server"
  | "web_search"
  | "web_fetch"
  | "advisor"
  /** Billed by the provider in a way it does not report per call: refused. */
  | "refused";

/**
 * The tool types the gateway knows, by pattern (versions are dated suffixes). Anything else with
 * a `type` is refused: a tool the gateway cannot classify could be paid provider work it would
 * never charge for.
 */
const TOOL_TYPES: readonly (readonly [RegExp, ToolKind])[] = [
  [/^custom$/, "client"],
  [/^(bash|text_editor|computer|memory)_\d{8}$/, "client"],
  [/^web_search_\d{8}$/, "web_search"],
  [/^web_fetch_\d{8}$/, "web_fetch"],
  [/^advisor_\d{8}$/, "advisor"],
  [/^tool_search_tool_(regex|bm25)(_\d{8})?$/, "server"],
  [/^mcp_toolset$/, "server"],
  [/^code_execution_\d{8}$/, "refused"],
];

/** Why code execution cannot go through: said in the 400, and in docs/billing.md. */
const CODE_EXECUTION_REFUSED =
  "the provider bills code execution by container time, which it does not report per call, so " +
  "Tollgate cannot price it or bound its hold";

/**
 * Reads the billable features of a validated request's other fields and prepares them for the
 * provider, writing to nothing it was given: a web search tool without `max_uses` gets
 * `webSearchMaxUses` (listed in `repaired`); the advisor's and fallbacks' model names become the
 * provider's. Refuses, with InvalidArgument naming the field and nothing forwarded, what cannot be
 * priced per call: code execution tools, `container`, a tool type it does not know, and malformed
 * feature fields.
 */
export function readBillableFeatures(
  json: Fields,
  models: ModelCatalog,
  webSearchMaxUses: number,
): ReadFeatures {
  const repaired: string[] = [];
  if (json.container !== undefined && json.container !== null) {
    throw invalidField("container", `container: ${CODE_EXECUTION_REFUSED}.`);
  }
  let serverToolLoop = Array.isArray(json.mcp_servers) && json.mcp_servers.length > 0;
  const serverTools = new Set<string>(serverToolLoop ? ["mcp_servers"] : []);
  let webSearchUses = 0n;
  let advisor: AdvisorSpec | undefined;
  const tools = Array.isArray(json.tools) ? (json.tools as readonly Fields[]) : [];
  const sentTools = tools.map((tool, i) => {
    const kind = toolKind(tool.type, `tools.${i}.type`);
    if (kind !== "client") {
      serverToolLoop = true;
      serverTools.add(String(tool.type).replace(/_\d{8}$/, ""));
    }
    if (kind === "web_search") {
      let sent = tool;
      if (tool.max_uses === undefined || tool.max_uses === null) {
        sent = { ...tool, max_uses: webSearchMaxUses };
        repaired.push(`tools.${i}.max_uses`);
      }
      webSearchUses += count(sent.max_uses, `tools.${i}.max_uses`, 1n, MAX_TOOL_USES);
      return sent;
    }
    if (kind === "advisor") {
      if (advisor !== undefined) throw invalidField(`tools.${i}`, `tools.${i}: at most one advisor tool.`);
      const { id, sent } = providerModel(tool, models, `tools.${i}.model`);
      advisor = {
        model: id,
        maxTokens: optionalCount(tool.max_tokens, `tools.${i}.max_tokens`, 1n),
        maxUses: optionalCount(tool.max_uses, `tools.${i}.max_uses`, 1n),
      };
      return sent;
    }
    return tool;
  });
  const fallbacks = json.fallbacks;
  let defaultFallback = false;
  const fallbackSpecs: FallbackSpec[] = [];
  let sentFallbacks: readonly unknown[] | undefined;
  if (fallbacks === "default") {
    defaultFallback = true;
  } else if (fallbacks !== undefined && fallbacks !== null) {
    if (!Array.isArray(fallbacks) || fallbacks.length === 0 || fallbacks.length > MAX_FALLBACKS) {
      throw invalidField("fallbacks", `fallbacks: must be "default" or a list of 1–${MAX_FALLBACKS} models.`);
    }
    sentFallbacks = fallbacks.map((entry: unknown, i) => {
      const path = `fallbacks.${i}`;
      if (typeof entry !== "object" || entry === null || Array.isArray(entry)) {
        throw invalidField(path, `${path}: must be an object with a model.`);
      }
      const fallback = entry as Fields;
      const { id, sent } = providerModel(fallback, models, `${path}.model`);
      fallbackSpecs.push({
        model: id,
        maxTokens: optionalCount(fallback.max_tokens, `${path}.max_tokens`, 1n),
        speed: speedOf(fallback.speed, `${path}.speed`),
      });
      return sent;
    });
  }
  const geo = json.inference_geo;
  if (geo !== undefined && geo !== null && typeof geo !== "string") {
    throw invalidField("inference_geo", "inference_geo: must be a string");
  }
  const features: BillableFeatures = {
    speed: speedOf(json.speed, "speed"),
    inferenceGeo: typeof geo === "string" ? geo : undefined,
    serverToolLoop,
    webSearchMaxUses: webSearchUses,
    advisor,
    compaction: hasCompaction(json.context_management),
    fallbacks: fallbackSpecs,
    defaultFallback,
  };
  const toolsChanged = sentTools.some((tool, i) => tool !== tools[i]);
  const fallbacksChanged =
    sentFallbacks?.some((entry, i) => entry !== (fallbacks as readonly unknown[])[i]) === true;
  if (!toolsChanged && !fallbacksChanged)
    return { features, rest: json, repaired, serverTools: [...serverTools] };
  const rest = {
    ...json,
    ...(toolsChanged ? { tools: sentTools } : {}),
    ...(fallbacksChanged ? { fallbacks: sentFallbacks } : {}),
  };
  return { features, rest, repaired, serverTools: [...serverTools] };
}

function toolKind(type: unknown, field: string): ToolKind {
  // A tool without a type is a custom (client) tool.
  if (type === undefined || type === null) return "client";
  if (typeof type !== "string") throw invalidField(field, `${field}: must be a string`);
  const kind = TOOL_TYPES.find(([pattern]) => pattern.test(type))?.[1];
  if (kind === "refused")
    throw invalidField(field, `${field}: ${type} is refused: ${CODE_EXECUTION_REFUSED}.`);
  if (kind === undefined) {
    throw invalidField(
      field,
      `${field}: Tollgate does not know the tool type ${JSON.stringify(type)}, so it cannot price it.`,
    );
  }
  return kind;
}

/**
 * The gateway model an entry names (its `model`), and the entry as sent: the same object when
 * it already names the provider's model, else a copy that does.
 */
function providerModel(
  entry: Fields,
  models: ModelCatalog,
  field: string,
): { readonly id: string; readonly sent: Fields } {
  const name = entry.model;
  if (typeof name !== "string" || name === "") throw invalidField(field, `${field}: Field required`);
  const model = models.resolve(name);
  if (model === undefined) {
    throw invalidField(
      field,
      `${field}: unknown model ${JSON.stringify(name)}; one of ${models.models.map((m) => m.id).join(", ")}.`,
    );
  }
  return { id: model.id, sent: name === model.upstreamId ? entry : { ...entry, model: model.upstreamId } };
}

function hasCompaction(value: unknown): boolean {
  if (typeof value !== "object" || value === null) return false;
  const edits = (value as { edits?: unknown }).edits;
  return (
    Array.isArray(edits) &&
    edits.some(
      (edit) => typeof (edit as { type?: unknown } | null)?.type === "string" && /^compact_/.test(edit.type),
    )
  );
}

function speedOf(value: unknown, field: string): Speed | undefined {
  if (value === undefined || value === null) return undefined;
  if (value === "standard" || value === "fast") return value;
  throw invalidField(field, `${field}: must be one of "standard", "fast"`);
}

function optionalCount(value: unknown, field: string, min: bigint): bigint {
  return value === undefined || value === null ? 0n : count(value, field, min, 1_000_000_000n);
}

function count(value: unknown, field: string, min: bigint, max: bigint): bigint {
  if (!Number.isSafeInteger(value) || BigInt(value as number) < min || BigInt(value as number) > max) {
    throw invalidField(field, `${field}: must be an integer between ${min} and ${max}`);
  }
  return BigInt(value as number);
}
