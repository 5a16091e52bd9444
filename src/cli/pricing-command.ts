import { toJson } from "@bufbuild/protobuf";
import {
  CODE_EXECUTION_REFUSED,
  formatCatalogSource,
  formatCount,
  formatMicroDollars,
  formatRates,
  formatResidency,
  formatServerToolFee,
  formatServerToolNote,
  iterationLimitText,
  RATE_HEADERS,
  webSearchCapText,
} from "../core/billing/charge-format.js";
import {
  ChainFamily,
  type GetPricingResponse,
  GetPricingResponseSchema,
} from "../gen/tollgate/billing/v1/billing_pb.js";
import { type Command, table } from "./command.js";

const upper = (headers: readonly string[]) => headers.map((h) => h.toUpperCase());

const FAMILY: Record<ChainFamily, string> = {
  [ChainFamily.UNSPECIFIED]: "?",
  [ChainFamily.EVM]: "evm",
  [ChainFamily.SOLANA]: "solana",
};

/** The whole catalog as human text: source, text models, fast mode, server tools, images, chains. */
export function formatPricing(pricing: GetPricingResponse): string {
  const sections: string[] = [formatCatalogSource(pricing.catalog)];

  sections.push(
    "Text models (dollars per million tokens)\n" +
      table(
        ["MODEL", ...upper(RATE_HEADERS), "MAX OUTPUT", "CONTEXT", "RESIDENCY"],
        pricing.textModels.map((m) => [
          m.model,
          ...formatRates(m),
          formatCount(m.maxOutputTokens),
          m.contextWindow === 0 ? "-" : formatCount(m.contextWindow),
          formatResidency(m.residency) || "-",
        ]),
      ),
  );

  const fast = pricing.textModels.filter((m) => m.fast !== undefined);
  sections.push(
    fast.length === 0
      ? 'Fast mode: no model offers it (speed: "fast" is refused).'
      : 'Fast mode (speed: "fast"; dollars per million tokens; residency applies on top)\n' +
          table(
            ["MODEL", ...upper(RATE_HEADERS)],
            fast.map((m) => [m.model, ...formatRates(m.fast!)]),
          ),
  );

  const tools =
    pricing.serverTools.length === 0
      ? "Server tools: none reported by this gateway."
      : "Server tools (fee on top of tokens)\n" +
        table(
          ["TOOL", "FEE", "NOTE"],
          pricing.serverTools.map((t) => [t.tool, formatServerToolFee(t), formatServerToolNote(t)]),
        );
  const notes = [
    webSearchCapText(pricing.webSearchDefaultMaxUses),
    iterationLimitText(pricing.serverToolIterationLimit),
    CODE_EXECUTION_REFUSED,
  ].filter((line) => line !== "");
  sections.push([tools, ...notes].join("\n"));

  // One column per size any model offers: a size a model lacks is refused, shown as "-".
  const sizes = [...new Set(pricing.imageModels.flatMap((m) => m.sizes.map((s) => s.size)))];
  sections.push(
    "Images (dollars per delivered image)\n" +
      table(
        ["MODEL", ...sizes],
        pricing.imageModels.map((m) => [
          m.model,
          ...sizes.map((size) => {
            const price = m.sizes.find((s) => s.size === size);
            return price === undefined ? "-" : formatMicroDollars(price.pricePerImage);
          }),
        ]),
      ),
  );

  sections.push(
    `Chains (default: ${pricing.defaultChain})\n` +
      table(
        ["CHAIN", "FAMILY", "ASSET", "DECIMALS", "STATE"],
        pricing.chains.map((c) => [
          c.id,
          FAMILY[c.family],
          c.asset?.symbol ?? "",
          `${c.asset?.decimals ?? ""}`,
          c.enabled ? "enabled" : "disabled",
        ]),
      ),
  );
  return sections.join("\n\n");
}

/** `tollgate pricing`: the price catalog the gateway bills by. */
export const pricingCommand: Command = {
  options: {},
  positionals: 0,
  database: "catalog",
  async run(_args, context) {
    const response = await context.billing.getPricing({});
    if (context.json) return context.out(JSON.stringify(toJson(GetPricingResponseSchema, response)));
    context.out(formatPricing(response));
  },
};
