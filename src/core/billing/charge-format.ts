/**
 * Pure display formatting of prices and charges, shared by the CLI and the dashboard bundle. It
 * imports only generated types (erased at build) and money.ts, so the browser bundle pulls in no
 * Node module. Every amount is an integer formatted exactly: no floating point anywhere.
 */
import type {
  CatalogSource,
  ChargeLine,
  ResidencyMultiplier,
  ServerToolPrice,
  TextRates,
  Usage,
} from "../../gen/tollgate/billing/v1/billing_pb.js";
import { formatUnits } from "./money.js";

/** Basis points of a multiplier of ×1 (ChargeLine.multiplier_bp, ResidencyMultiplier.multiplier_bp). */
const BP_DECIMALS = 4;
const BP_ONE = 10_000;
const PICO_DECIMALS = 12;
const MICRO_DECIMALS = 6;

/** Groups an integer's digits in threes with commas ("1234567" → "1,234,567"), locale-free. */
function groupDigits(digits: string): string {
  return digits.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

/**
 * Units of 10^-decimals dollars as an exact dollar amount: "$1,234.50", "$0.000135", "$5.00".
 * Trailing zeros beyond the cents are dropped, never digits that carry value.
 */
export function formatDollars(units: bigint, decimals: number): string {
  const text = formatUnits(units, decimals);
  const sign = text.startsWith("-") ? "-" : "";
  const [whole = "0", fraction = ""] = text.replace(/^-/, "").split(".");
  const cents = fraction.replace(/0+$/, "").padEnd(2, "0");
  return `${sign}$${groupDigits(whole)}.${cents}`;
}

/** Pico-dollars (10^-12 $, ChargeLine.amount_pico) as exact dollars. */
export function formatPicoDollars(pico: bigint): string {
  return formatDollars(pico, PICO_DECIMALS);
}

/** Integer micro-dollars (every catalog price) as exact dollars. */
export function formatMicroDollars(micro: bigint): string {
  return formatDollars(micro, MICRO_DECIMALS);
}

/** A multiplier in basis points as "×1.1" (11000), "×2" (20000), "×1.25" (12500). */
export function formatMultiplier(basisPoints: number): string {
  const text = formatUnits(BigInt(basisPoints), BP_DECIMALS).replace(/\.?0+$/, "");
  return `×${text}`;
}

/** A count with grouped digits: "12,000". */
export function formatCount(count: bigint | number): string {
  const text = `${count}`;
  return text.startsWith("-") ? `-${groupDigits(text.slice(1))}` : groupDigits(text);
}

/** A model's residency multipliers as "us ×1.1, eu ×1.2"; "" when it takes no `inference_geo`. */
export function formatResidency(residency: readonly ResidencyMultiplier[]): string {
  return residency.map((r) => `${r.geo} ${formatMultiplier(r.multiplierBp)}`).join(", ");
}

/**
 * Column titles of one set of token rates, in the order {@link formatRates} returns them (the
 * dashboard's long-standing order: writes before reads).
 */
export const RATE_HEADERS = ["Input", "Output", "Cache write 5m", "Cache write 1h", "Cache read"] as const;

/** The rates of a set (a TextModelPrice has the same fields) as dollars, in {@link RATE_HEADERS} order. */
export function formatRates(
  rates: Pick<
    TextRates,
    "inputPerMtok" | "outputPerMtok" | "cacheReadPerMtok" | "cacheWrite5mPerMtok" | "cacheWrite1hPerMtok"
  >,
): string[] {
  return [
    rates.inputPerMtok,
    rates.outputPerMtok,
    rates.cacheWrite5mPerMtok,
    rates.cacheWrite1hPerMtok,
    rates.cacheReadPerMtok,
  ].map(formatMicroDollars);
}

/** Where the catalog comes from, in one line; says so when the core did not report it. */
export function formatCatalogSource(catalog: CatalogSource | undefined): string {
  if (catalog === undefined || catalog.version === "") return "Catalog version not reported by this gateway.";
  const effective = catalog.effectiveDate === "" ? "" : `, effective ${catalog.effectiveDate}`;
  const source = catalog.source === "" ? "" : `; prices from ${catalog.source}`;
  return `Catalog ${catalog.version}${effective}${source}.`;
}

/** What one use is called, for the fee text. */
const TOOL_UNIT: Record<string, string> = { web_search: "search", web_fetch: "fetch" };

/** A server tool's fee: "$0.01 per search", or "tokens only" when it has no fee of its own. */
export function formatServerToolFee(tool: ServerToolPrice): string {
  if (tool.pricePerUse === 0n) return "tokens only";
  return `${formatMicroDollars(tool.pricePerUse)} per ${TOOL_UNIT[tool.tool] ?? "use"}`;
}

/**
 * A server tool's note without what {@link formatServerToolFee} already says (the core may open
 * it with "per search;" or say "tokens only"), so the two read well side by side.
 */
export function formatServerToolNote(tool: ServerToolPrice): string {
  const unit = `per ${TOOL_UNIT[tool.tool] ?? "use"}`;
  const parts = tool.note
    .split(";")
    .map((part) => part.trim())
    .filter((part) => part !== "" && part !== unit && part !== formatServerToolFee(tool));
  return parts.join("; ");
}

/** The sentence about the web-search cap the gateway adds to a `web_search` tool without one. */
export function webSearchCapText(maxUses: number): string {
  return maxUses > 0
    ? `A web_search tool without max_uses is sent with max_uses ${maxUses} (listed in x-gateway-repaired-params): it bounds the call's hold.`
    : "";
}

/** The sentence about the provider's sampling-iteration limit with server tools. */
export function iterationLimitText(limit: number): string {
  return limit > 0
    ? `A call with server tools runs at most ${limit} sampling iterations; its hold counts every iteration's input.`
    : "";
}

/** Why code execution is not offered, as the proto explains it. */
export const CODE_EXECUTION_REFUSED =
  "Code execution is refused: the provider bills it by container time, which it does not report per call.";

/** How a token line's pass is named when the core sent no description. */
const PASS_LABEL: Record<string, string> = {
  message: "tokens",
  compaction: "compaction pass",
  advisor: "advisor call",
  fallback: "fallback attempt",
  declined: "declined attempt (not charged)",
};

/** One charge line, ready to lay out: what it is, its counts, and its exact amount. */
export interface ChargeLineView {
  /** The core's description, or one built from the line's fields when it sent none. */
  readonly label: string;
  /** Token lines: the non-zero token counts ("12,000 in · 800 out"); "" otherwise. */
  readonly counts: string;
  /** amount_pico as exact dollars. */
  readonly amount: string;
  /** False for a declined attempt: listed, not charged. */
  readonly charged: boolean;
}

/** The non-zero token counts of a usage, "12,000 in · 800 out · 5,000 cache read"; "" when none. */
export function formatTokenCounts(tokens: Usage | undefined): string {
  if (tokens === undefined) return "";
  const counts: [bigint, string][] = [
    [tokens.inputTokens, "in"],
    [tokens.outputTokens, "out"],
    [tokens.cacheWrite5mTokens, "cache write 5m"],
    [tokens.cacheWrite1hTokens, "cache write 1h"],
    [tokens.cacheReadTokens, "cache read"],
  ];
  return counts
    .filter(([count]) => count !== 0n)
    .map(([count, name]) => `${formatCount(count)} ${name}`)
    .join(" · ");
}

/** A description from the line's fields, for rows whose core sent none (older or partial ones). */
function describe(line: ChargeLine): string {
  if (line.kind === "web_search" || line.kind === "web_fetch") {
    const [one, many] =
      line.kind === "web_search" ? ["web search", "web searches"] : ["web fetch", "web fetches"];
    return `${formatCount(line.quantity)} ${line.quantity === 1n ? one : many}`;
  }
  const parts = [line.model, PASS_LABEL[line.pass] ?? line.pass];
  if (line.speed === "fast") parts.push("fast mode");
  if (line.multiplierBp !== 0 && line.multiplierBp !== BP_ONE)
    parts.push(`residency ${formatMultiplier(line.multiplierBp)}`);
  return parts.filter((part) => part !== "").join(" · ");
}

/**
 * Whether a line is one ordinary pass (standard speed, no residency multiplier): alone, it says
 * nothing the call's own row does not, so a display may fold it away.
 */
export function isPlainTokenLine(line: ChargeLine): boolean {
  return (
    line.kind === "tokens" &&
    line.pass === "message" &&
    line.speed !== "fast" &&
    (line.multiplierBp === 0 || line.multiplierBp === BP_ONE)
  );
}

/** A charge line as its label, counts, amount and whether it was charged. */
export function chargeLineView(line: ChargeLine): ChargeLineView {
  return {
    label: line.description === "" ? describe(line) : line.description,
    counts: line.kind === "tokens" ? formatTokenCounts(line.tokens) : "",
    amount: formatPicoDollars(line.amountPico),
    charged: line.pass !== "declined",
  };
}

/** A charge line in one line of text: "3 web searches  $0.03". */
export function formatChargeLine(line: ChargeLine): string {
  const view = chargeLineView(line);
  return [view.label, view.counts, view.amount].filter((part) => part !== "").join("  ");
}

/**
 * A call's charge lines as aligned text lines (label, counts, amount right-aligned), each
 * prefixed with `indent`, then the unpriced warning if any: what `tollgate usage` prints under
 * a call.
 */
export function formatChargeLines(
  lines: readonly ChargeLine[],
  unpriced: readonly string[],
  indent = "    ",
): string[] {
  const views = lines.map(chargeLineView);
  const width = (pick: (v: ChargeLineView) => string) => Math.max(0, ...views.map((v) => pick(v).length));
  const [labelWidth, countsWidth, amountWidth] = [
    width((v) => v.label),
    width((v) => v.counts),
    width((v) => v.amount),
  ];
  const text = views.map((v) => {
    // The counts column only when some line has counts, so fee-only calls carry no wide gap.
    const cells = [v.label.padEnd(labelWidth), ...(countsWidth > 0 ? [v.counts.padEnd(countsWidth)] : [])];
    return `${indent}${[...cells, v.amount.padStart(amountWidth)].join("  ")}`;
  });
  const warning = unpricedWarning(unpriced);
  if (warning !== "") text.push(`${indent}! ${warning}`);
  return text;
}

/** The warning for usage fields the gateway could not price; "" when there are none. */
export function unpricedWarning(unpriced: readonly string[]): string {
  if (unpriced.length === 0) return "";
  return `Not priced: ${unpriced.join(", ")}. The call was charged for everything else, and the operator was told.`;
}
