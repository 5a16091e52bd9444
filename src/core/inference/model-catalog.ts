import type { PriceCatalog } from "../billing/price-catalog.js";

/** An `output_config.effort` level, lowest first. */
export type Effort = "low" | "medium" | "high" | "xhigh" | "max";

/** Every effort level, lowest first: the index orders them. */
export const EFFORTS: readonly Effort[] = ["low", "medium", "high", "xhigh", "max"];

/** A `thinking.type` the gateway understands. */
export type ThinkingType = "enabled" | "adaptive" | "disabled";

/** What an upstream model accepts; drives the repair table. */
export interface TextModelCapabilities {
  /** Thinking types the model accepts ("disabled" listed = turning thinking off is allowed). */
  readonly thinkingTypes: readonly ThinkingType[];
  /**
   * "strict": any non-default temperature/top_p/top_k is refused (temperature exactly 1 and
   * top_p >= 0.99 pass; any top_k fails). "legacy": accepted, except that with thinking on
   * temperature (≠1) and top_k are refused and top_p must be >= 0.95.
   */
  readonly sampling: "strict" | "legacy";
  /** temperature and top_p are refused when both are given. */
  readonly exclusiveTemperatureTopP: boolean;
  /** output_config.effort values accepted; empty = effort not supported at all. */
  readonly efforts: readonly Effort[];
  /** When set, thinking {type:"disabled"} is only accepted at this effort or lower (Opus 5: "high"). */
  readonly disabledThinkingMaxEffort?: Effort;
}

/** A text model the gateway serves. */
export interface TextModel {
  /** The gateway's id, e.g. "model-opus-4-8"; also the price catalog key. */
  readonly id: string;
  /** The provider's id, e.g. "claude-opus-4-8": what is sent upstream. */
  readonly upstreamId: string;
  /** Vendor names also accepted, so that clients configured for the vendor work unchanged. */
  readonly aliases: readonly string[];
  /** Human name for GET /v1/models, e.g. "Opus 4.8". */
  readonly displayName: string;
  /** RFC 3339, for GET /v1/models; informational. */
  readonly createdAt: string;
  /** Max input tokens, from the price catalog's context_window (its single source of truth). */
  readonly contextWindow: number;
  /** The output ceiling, from the price catalog's max_output_tokens (its single source of truth). */
  readonly maxOutputTokens: number;
  readonly capabilities: TextModelCapabilities;
}

/** A row of the capability table: a model before the price catalog supplies its limits. */
export type ModelTableEntry = Omit<TextModel, "maxOutputTokens" | "contextWindow">;

/** The text models served, and the lookup from a requested name. */
export interface ModelCatalog {
  /** The models served, in table order. */
  readonly models: readonly TextModel[];
  /** The model a request names: a gateway id or an alias, case-insensitively; undefined if unknown. */
  resolve(name: string): TextModel | undefined;
}

const ALL_EFFORTS = EFFORTS;
const EFFORTS_BUT_XHIGH: readonly Effort[] = ["low", "medium", "high", "max"];

/** Opus 4.7 onwards: adaptive thinking only (or off), no sampling knobs, every effort. */
const CURRENT: TextModelCapabilities = {
  thinkingTypes: ["adaptive", "disabled"],
  sampling: "strict",
  exclusiveTemperatureTopP: false,
  efforts: ALL_EFFORTS,
};

/** The 4.6 generation: manual budgets still accepted next to adaptive; no xhigh. */
const GENERATION_4_6: TextModelCapabilities = {
  thinkingTypes: ["adaptive", "enabled", "disabled"],
  sampling: "legacy",
  exclusiveTemperatureTopP: true,
  efforts: EFFORTS_BUT_XHIGH,
};

/** The capability table, from the vendor's model documentation; one row per served model. */
export const DEFAULT_MODEL_TABLE: readonly ModelTableEntry[] = [
  {
    id: "model-opus-5",
    upstreamId: "claude-opus-5",
    aliases: ["claude-opus-5"],
    displayName: "Opus 5",
    createdAt: "2026-09-15T00:00:00Z",
    capabilities: { ...CURRENT, disabledThinkingMaxEffort: "high" },
  },
  {
    id: "model-opus-4-8",
    upstreamId: "claude-opus-4-8",
    aliases: ["claude-opus-4-8"],
    displayName: "Opus 4.8",
    createdAt: "2026-06-10T00:00:00Z",
    capabilities: CURRENT,
  },
  {
    id: "model-opus-4-7",
    upstreamId: "claude-opus-4-7",
    aliases: ["claude-opus-4-7"],
    displayName: "Opus 4.7",
    createdAt: "2026-04-16T00:00:00Z",
    capabilities: CURRENT,
  },
  {
    id: "model-opus-4-6",
    upstreamId: "claude-opus-4-6",
    aliases: ["claude-opus-4-6"],
    displayName: "Opus 4.6",
    createdAt: "2026-02-05T00:00:00Z",
    capabilities: GENERATION_4_6,
  },
  {
    id: "model-sonnet-5",
    upstreamId: "claude-sonnet-5",
    aliases: ["claude-sonnet-5"],
    displayName: "Sonnet 5",
    createdAt: "2026-08-20T00:00:00Z",
    capabilities: CURRENT,
  },
  {
    id: "model-sonnet-4-6",
    upstreamId: "claude-sonnet-4-6",
    aliases: ["claude-sonnet-4-6"],
    displayName: "Sonnet 4.6",
    createdAt: "2026-02-17T00:00:00Z",
    capabilities: GENERATION_4_6,
  },
  {
    id: "model-haiku-4-5",
    upstreamId: "claude-haiku-4-5-20251001",
    aliases: ["claude-haiku-4-5", "claude-haiku-4-5-20251001"],
    displayName: "Haiku 4.5",
    createdAt: "2025-10-01T00:00:00Z",
    // Manual budgets only, and no effort parameter at all.
    capabilities: {
      thinkingTypes: ["enabled", "disabled"],
      sampling: "legacy",
      exclusiveTemperatureTopP: true,
      efforts: [],
    },
  },
  {
    id: "model-fable-5",
    upstreamId: "claude-fable-5",
    aliases: ["claude-fable-5"],
    displayName: "Fable 5",
    createdAt: "2026-10-01T00:00:00Z",
    // Always thinks: "disabled" is not accepted.
    capabilities: { ...CURRENT, thinkingTypes: ["adaptive"] },
  },
];

/** Joins the capability table with the price catalog: only models priced there are served. */
export function buildModelCatalog(
  prices: PriceCatalog,
  table: readonly ModelTableEntry[] = DEFAULT_MODEL_TABLE,
): ModelCatalog {
  // Names are checked over the whole table, priced or not: a clash is a table bug either way.
  const owner = new Map<string, string>();
  for (const entry of table) {
    for (const name of new Set([entry.id, ...entry.aliases].map((n) => n.toLowerCase()))) {
      const other = owner.get(name);
      if (other !== undefined) {
        throw new Error(`model table: ${JSON.stringify(name)} names both ${other} and ${entry.id}`);
      }
      owner.set(name, entry.id);
    }
  }
  const models: TextModel[] = [];
  const byName = new Map<string, TextModel>();
  for (const entry of table) {
    const price = prices.text.get(entry.id);
    // Unpriced models cannot be billed, so they are not served.
    if (price === undefined) continue;
    const model: TextModel = {
      ...entry,
      maxOutputTokens: price.maxOutputTokens,
      contextWindow: price.contextWindow,
    };
    models.push(model);
    byName.set(entry.id.toLowerCase(), model);
    for (const alias of entry.aliases) byName.set(alias.toLowerCase(), model);
  }
  return {
    models,
    resolve: (name) => byName.get(name.toLowerCase()),
  };
}
