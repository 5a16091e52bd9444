import type { PageContext } from "../context.js";
import { h, mount, table } from "../dom.js";
import { microDollars } from "../money.js";

/** The live catalog, public: text prices per million tokens, image prices per resolution. */
export async function pricingPage(ctx: PageContext): Promise<void> {
  const { textModels, imageModels, chains } = ctx.pricing;
  const perMtok = (value: bigint) => microDollars(value);
  mount(
    ctx.main,
    h("h1", {}, "Pricing"),
    h(
      "p",
      {},
      "Pay per call from a stablecoin wallet. Only what a call delivers is charged, at these prices.",
    ),
    h("h2", {}, "Text models (per million tokens)"),
    h(
      "div",
      { id: "text-prices" },
      table(
        ["Model", "Input", "Output", "Cache write 5 min", "Cache write 1 h", "Cache read"],
        textModels.map((m) => [
          h("code", {}, m.model),
          perMtok(m.inputPerMtok),
          perMtok(m.outputPerMtok),
          perMtok(m.cacheWrite5mPerMtok),
          perMtok(m.cacheWrite1hPerMtok),
          perMtok(m.cacheReadPerMtok),
        ]),
        new Set([1, 2, 3, 4, 5]),
      ),
    ),
    h("h2", {}, "Images (per delivered image)"),
    h(
      "div",
      { id: "image-prices" },
      table(
        ["Model", "Size", "Price"],
        imageModels.flatMap((m) =>
          m.sizes.map((s) => [h("code", {}, m.model), s.size, microDollars(s.pricePerImage)]),
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
