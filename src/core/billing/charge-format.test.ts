import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  ChargeLineSchema,
  ServerToolPriceSchema,
  TextRatesSchema,
  UsageSchema,
} from "../../gen/tollgate/billing/v1/billing_pb.js";
import {
  chargeLineView,
  formatCatalogSource,
  formatChargeLine,
  formatChargeLines,
  formatCount,
  formatDollars,
  formatMicroDollars,
  formatMultiplier,
  formatPicoDollars,
  formatRates,
  formatResidency,
  formatServerToolFee,
  formatServerToolNote,
  formatTokenCounts,
  isPlainTokenLine,
  iterationLimitText,
  unpricedWarning,
  webSearchCapText,
} from "./charge-format.js";

/** A fast, US-only Opus pass, as the core describes it. */
const fastLine = create(ChargeLineSchema, {
  kind: "tokens",
  pass: "message",
  model: "model-opus-4-8",
  tokens: create(UsageSchema, { inputTokens: 12_000n, outputTokens: 800n, cacheReadTokens: 5_000n }),
  speed: "fast",
  multiplierBp: 11_000,
  // (12,000 × $10 + 800 × $50 + 5,000 × $1) / 1M × 1.1 = $0.1815
  amountPico: 181_500_000_000n,
  description: "model-opus-4-8 · tokens · fast mode ×2 · US-only ×1.1",
});
const searchLine = create(ChargeLineSchema, {
  kind: "web_search",
  quantity: 3n,
  amountPico: 30_000_000_000n,
  description: "3 web searches",
});
const declinedLine = create(ChargeLineSchema, {
  kind: "tokens",
  pass: "declined",
  model: "model-opus-5",
  tokens: create(UsageSchema, { inputTokens: 2_000n }),
  multiplierBp: 10_000,
  amountPico: 0n,
  description: "model-opus-5 · declined attempt (not charged)",
});

describe("money formatting", () => {
  it("formats dollars exactly, keeping every significant digit and at least cents", () => {
    expect(formatDollars(5_000_000n, 6)).toBe("$5.00");
    expect(formatDollars(300_000n, 6)).toBe("$0.30");
    expect(formatDollars(134_000n, 6)).toBe("$0.134");
    expect(formatDollars(1_234_567_890_000n, 6)).toBe("$1,234,567.89");
    expect(formatDollars(-1n, 6)).toBe("-$0.000001");
    expect(formatDollars(0n, 6)).toBe("$0.00");
    expect(formatDollars(42n, 0)).toBe("$42.00");
  });

  it("formats pico- and micro-dollars without floating point", () => {
    expect(formatPicoDollars(30_000_000_000n)).toBe("$0.03");
    expect(formatPicoDollars(1n)).toBe("$0.000000000001");
    // Beyond 2^53: a float would lose the last digits.
    expect(formatPicoDollars(9_007_199_254_740_993_123n)).toBe("$9,007,199.254740993123");
    expect(formatMicroDollars(10_000n)).toBe("$0.01");
    expect(formatMicroDollars(12_500_000n)).toBe("$12.50");
  });

  it("formats basis points as a multiplier", () => {
    expect(formatMultiplier(11_000)).toBe("×1.1");
    expect(formatMultiplier(20_000)).toBe("×2");
    expect(formatMultiplier(12_500)).toBe("×1.25");
    expect(formatMultiplier(10_001)).toBe("×1.0001");
    expect(formatMultiplier(9_000)).toBe("×0.9");
    expect(formatMultiplier(10_000)).toBe("×1");
  });

  it("groups counts", () => {
    expect(formatCount(0n)).toBe("0");
    expect(formatCount(1_000_000)).toBe("1,000,000");
    expect(formatCount(-12_345n)).toBe("-12,345");
  });
});

describe("catalog formatting", () => {
  it("formats a rate set and residency multipliers", () => {
    const rates = create(TextRatesSchema, {
      inputPerMtok: 10_000_000n,
      outputPerMtok: 50_000_000n,
      cacheReadPerMtok: 1_000_000n,
      cacheWrite5mPerMtok: 12_500_000n,
      cacheWrite1hPerMtok: 20_000_000n,
    });
    expect(formatRates(rates)).toEqual(["$10.00", "$50.00", "$12.50", "$20.00", "$1.00"]);
    expect(
      formatResidency([
        { $typeName: "tollgate.billing.v1.ResidencyMultiplier", geo: "us", multiplierBp: 11_000 },
        { $typeName: "tollgate.billing.v1.ResidencyMultiplier", geo: "eu", multiplierBp: 12_000 },
      ]),
    ).toBe("us ×1.1, eu ×1.2");
    expect(formatResidency([])).toBe("");
  });

  it("formats server-tool fees without repeating the unit in the note", () => {
    const search = create(ServerToolPriceSchema, {
      tool: "web_search",
      pricePerUse: 10_000n,
      note: "per search; failed searches are free",
    });
    const fetch = create(ServerToolPriceSchema, { tool: "web_fetch", pricePerUse: 0n, note: "tokens only" });
    expect(formatServerToolFee(search)).toBe("$0.01 per search");
    expect(formatServerToolNote(search)).toBe("failed searches are free");
    expect(formatServerToolFee(fetch)).toBe("tokens only");
    expect(formatServerToolNote(fetch)).toBe("");
    expect(formatServerToolFee(create(ServerToolPriceSchema, { tool: "other", pricePerUse: 5n }))).toBe(
      "$0.000005 per use",
    );
  });

  it("describes the catalog source, the web-search cap and the iteration limit", () => {
    expect(
      formatCatalogSource({
        $typeName: "tollgate.billing.v1.CatalogSource",
        version: "2026-11-24.1",
        source: "https://example.test/pricing",
        effectiveDate: "2026-09-01",
      }),
    ).toBe("Catalog 2026-11-24.1, effective 2026-09-01; prices from https://example.test/pricing.");
    expect(formatCatalogSource(undefined)).toBe("Catalog version not reported by this gateway.");
    expect(webSearchCapText(5)).toContain("max_uses 5");
    expect(webSearchCapText(0)).toBe("");
    expect(iterationLimitText(10)).toContain("at most 10 sampling iterations");
  });
});

describe("charge lines", () => {
  it("shows a token line's description, its non-zero counts and its exact amount", () => {
    expect(chargeLineView(fastLine)).toEqual({
      label: "model-opus-4-8 · tokens · fast mode ×2 · US-only ×1.1",
      counts: "12,000 in · 800 out · 5,000 cache read",
      amount: "$0.1815",
      charged: true,
    });
    expect(formatChargeLine(searchLine)).toBe("3 web searches  $0.03");
  });

  it("marks a declined attempt as not charged", () => {
    expect(chargeLineView(declinedLine)).toMatchObject({
      label: "model-opus-5 · declined attempt (not charged)",
      counts: "2,000 in",
      amount: "$0.00",
      charged: false,
    });
  });

  it("builds a description from the fields when the core sent none", () => {
    const bare = (line: Parameters<typeof create<typeof ChargeLineSchema>>[1]) =>
      chargeLineView(create(ChargeLineSchema, { ...line, description: "" })).label;
    expect(bare({ kind: "web_search", quantity: 1n })).toBe("1 web search");
    expect(bare({ kind: "web_fetch", quantity: 1_200n })).toBe("1,200 web fetches");
    expect(bare({ kind: "tokens", pass: "compaction", model: "model-sonnet-5", multiplierBp: 10_000 })).toBe(
      "model-sonnet-5 · compaction pass",
    );
    expect(
      bare({ kind: "tokens", pass: "message", model: "model-opus-5", speed: "fast", multiplierBp: 11_000 }),
    ).toBe("model-opus-5 · tokens · fast mode · residency ×1.1");
    expect(bare({ kind: "tokens", pass: "declined", model: "model-opus-5" })).toBe(
      "model-opus-5 · declined attempt (not charged)",
    );
  });

  it("tells a plain pass from one that says more than the call's row", () => {
    const plain = create(ChargeLineSchema, {
      kind: "tokens",
      pass: "message",
      speed: "standard",
      multiplierBp: 10_000,
    });
    expect(isPlainTokenLine(plain)).toBe(true);
    expect(isPlainTokenLine(fastLine)).toBe(false);
    expect(isPlainTokenLine(searchLine)).toBe(false);
    expect(isPlainTokenLine(declinedLine)).toBe(false);
    expect(isPlainTokenLine(create(ChargeLineSchema, { ...plain, multiplierBp: 11_000 }))).toBe(false);
  });

  it("lists token counts only when there are any", () => {
    expect(formatTokenCounts(undefined)).toBe("");
    expect(formatTokenCounts(create(UsageSchema, {}))).toBe("");
    expect(
      formatTokenCounts(create(UsageSchema, { cacheWrite5mTokens: 1n, cacheWrite1hTokens: 2_000n })),
    ).toBe("1 cache write 5m · 2,000 cache write 1h");
  });

  it("aligns a call's lines, then warns about what was not priced", () => {
    const lines = formatChargeLines(
      [fastLine, searchLine, declinedLine],
      ["usage.server_tool_use.code_execution_requests"],
    );
    expect(lines).toEqual([
      "    model-opus-4-8 · tokens · fast mode ×2 · US-only ×1.1  12,000 in · 800 out · 5,000 cache read  $0.1815",
      "    3 web searches                                                                                   $0.03",
      "    model-opus-5 · declined attempt (not charged)          2,000 in                                  $0.00",
      "    ! Not priced: usage.server_tool_use.code_execution_requests. The call was charged for everything else, and the operator was told.",
    ]);
    // Amounts are right-aligned: every charge line ends in the same column.
    expect(new Set(lines.slice(0, 3).map((line) => line.length)).size).toBe(1);
    // Fee lines alone: no empty counts column.
    expect(formatChargeLines([searchLine], [], "  ")).toEqual(["  3 web searches  $0.03"]);
    expect(formatChargeLines([], [])).toEqual([]);
    expect(unpricedWarning([])).toBe("");
  });
});
