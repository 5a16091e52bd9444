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
} from "../../core/billing/charge-format.js";
import type { PageContext } from "../context.js";
import { h, mount, table } from "../dom.js";

/** Columns 1–5 of a rate table are amounts. */
const RATE_COLUMNS = new Set([1, 2, 3, 4, 5]);

/**
 * The live catalog, public: where it comes from, text prices per million tokens (standard and
 * fast mode), what each model allows, server-tool fees, image prices per size, and the chains.
 */
export async function pricingPage(ctx: PageContext): Promise<void> {
  const { textModels, imageModels, chains, serverTools } = ctx.pricing;
  const fast = textModels.filter((m) => m.fast !== undefined);
  const toolNotes = [
    webSearchCapText(ctx.pricing.webSearchDefaultMaxUses),
    iterationLimitText(ctx.pricing.serverToolIterationLimit),
    CODE_EXECUTION_REFUSED,
  ].filter((line) => line !== "");
  mount(
    ctx.main,
    h("h1", {}, "Pricing"),
    h(
      "p",
      {},
      "Pay per call from a stablecoin wallet. Only what a call delivers is charged, at these prices.",
    ),
    h("p", { id: "catalog-source", class: "muted breakable" }, formatCatalogSource(ctx.pricing.catalog)),
    h("h2", {}, "Text models (per million tokens)"),
    h(
      "div",
      { id: "text-prices" },
      table(
        ["Model", ...RATE_HEADERS],
        textModels.map((m) => [h("code", {}, m.model), ...formatRates(m)]),
        RATE_COLUMNS,
      ),
    ),
    h("h2", {}, "Model limits and options"),
    h(
      "div",
      { id: "text-options" },
      table(
        ["Model", "Max output", "Context window", "Fast mode", "Data residency"],
        textModels.map((m) => [
          h("code", {}, m.model),
          formatCount(m.maxOutputTokens),
          m.contextWindow === 0 ? "—" : formatCount(m.contextWindow),
          m.fast === undefined ? "—" : "offered",
          formatResidency(m.residency) || "global only",
        ]),
        new Set([1, 2]),
      ),
      h(
        "p",
        { class: "muted" },
        'Data residency: a request\'s inference_geo multiplies every token rate of the call (e.g. "us ×1.1"). ' +
          "A model with none takes no inference_geo.",
      ),
    ),
    h("h2", {}, "Fast mode (per million tokens)"),
    h(
      "div",
      { id: "fast-prices" },
      fast.length === 0
        ? h("p", { class: "muted" }, 'No model offers fast mode: speed: "fast" is refused.')
        : [
            table(
              ["Model", ...RATE_HEADERS],
              fast.map((m) => [h("code", {}, m.model), ...formatRates(m.fast!)]),
              RATE_COLUMNS,
            ),
            h(
              "p",
              { class: "muted" },
              'With speed: "fast" these rates replace the standard ones; data residency applies on top. ' +
                'Other models refuse speed: "fast".',
            ),
          ],
    ),
    h("h2", {}, "Server tools (on top of tokens)"),
    h(
      "div",
      { id: "server-tools" },
      serverTools.length === 0
        ? h("p", { class: "muted" }, "This gateway reports no server-tool fees.")
        : table(
            ["Tool", "Fee", "Note"],
            serverTools.map((t) => [h("code", {}, t.tool), formatServerToolFee(t), formatServerToolNote(t)]),
          ),
      h(
        "ul",
        { class: "notes" },
        toolNotes.map((note) => h("li", {}, note)),
      ),
    ),
    h("h2", {}, "Images (per delivered image)"),
    h(
      "div",
      { id: "image-prices" },
      table(
        ["Model", "Size", "Price"],
        imageModels.flatMap((m) =>
          m.sizes.map((s) => [h("code", {}, m.model), s.size, formatMicroDollars(s.pricePerImage)]),
        ),
        new Set([2]),
      ),
    ),
    h("h2", {}, "Chains"),
    h(
      "p",
      {},
      `Pay on ${chains
        .filter((c) => c.enabled)
        .map((c) => `${c.id} (${c.asset?.symbol ?? ""})`)
        .join(", ")}. The default is ${ctx.pricing.defaultChain}.`,
    ),
  );
}
