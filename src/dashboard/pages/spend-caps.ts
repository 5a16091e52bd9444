import { type ApiKey, KeyStatus } from "../../gen/tollgate/auth/v1/auth_pb.js";
import { type SpendCap, SpendCapPeriod } from "../../gen/tollgate/billing/v1/billing_pb.js";
import { chainLedgerDecimals, type PageContext } from "../context.js";
import { errorLine, h, loading, messageOf, mount, table } from "../dom.js";
import { dollars, parseDollars } from "../money.js";
import { auth, billing } from "../rpc.js";

const PERIODS: readonly [SpendCapPeriod, string][] = [
  [SpendCapPeriod.DAY, "Daily"],
  [SpendCapPeriod.MONTH, "Monthly"],
  [SpendCapPeriod.LIFETIME, "Lifetime"],
];

/**
 * The Keys page's spend caps: the most the account, or one key, may spend on a chain per UTC
 * day, UTC month or ever. The gateway checks them with the funds when a call's hold is placed,
 * so a call over a cap gets a 402 naming it; this section sets, lists and clears them.
 */
export function spendCapsSection(ctx: PageContext): { element: HTMLElement; draw(): Promise<void> } {
  const list = h("div", { id: "cap-list" }, loading("spend caps"));
  const scope = h("select", { id: "cap-scope", name: "scope" });
  const chain = h(
    "select",
    { id: "cap-chain", name: "chain" },
    ctx.pricing.chains.filter((c) => c.enabled).map((c) => h("option", { value: c.id }, c.id)),
  );
  const period = h(
    "select",
    { id: "cap-period", name: "period" },
    PERIODS.map(([value, label]) => h("option", { value: `${value}` }, label)),
  );
  const amount = h("input", {
    id: "cap-amount",
    name: "amount",
    inputmode: "decimal",
    placeholder: "e.g. 5.00",
    required: true,
  });
  const save = h("button", { type: "submit" }, "Set cap");
  const status = h("p", { id: "cap-status", role: "status" });
  const form = h(
    "form",
    { class: "row", id: "set-cap" },
    h("label", {}, "Applies to", scope),
    h("label", {}, "Chain", chain),
    h("label", {}, "Period", period),
    h("label", {}, "Cap in dollars", amount),
    save,
  );

  const setCap = async (request: {
    keyId: string;
    chain: string;
    period: SpendCapPeriod;
    amount?: bigint;
  }) => {
    status.textContent = "";
    try {
      await billing.setSpendCap(request);
      await draw();
    } catch (error) {
      status.textContent = messageOf(error);
    }
  };

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const decimals = chainLedgerDecimals(ctx, chain.value);
    const units = parseDollars(amount.value, decimals);
    if (units === undefined) {
      status.textContent = `Enter an amount in dollars, with at most ${decimals} decimals.`;
      return;
    }
    save.disabled = true;
    await setCap({ keyId: scope.value, chain: chain.value, period: Number(period.value), amount: units });
    save.disabled = false;
    if (status.textContent === "") amount.value = "";
  });

  const row = (cap: SpendCap, keys: readonly ApiKey[]) => {
    const decimals = chainLedgerDecimals(ctx, cap.chain);
    const key = keys.find((k) => k.id === cap.keyId);
    const clear = h(
      "button",
      { type: "button", class: "secondary", "data-clear-cap": `${cap.keyId}/${cap.period}` },
      "Remove",
    );
    clear.addEventListener("click", () => setCap({ keyId: cap.keyId, chain: cap.chain, period: cap.period }));
    return [
      cap.keyId === "" ? "Whole account" : key?.name || key?.prefix || cap.keyId,
      cap.chain,
      PERIODS.find(([p]) => p === cap.period)?.[1] ?? "",
      h("span", { "data-cap-amount": `${cap.keyId}/${cap.period}` }, dollars(cap.amount, decimals)),
      h("span", { "data-cap-spent": `${cap.keyId}/${cap.period}` }, dollars(cap.spent, decimals)),
      cap.resetsAtMs === 0n ? "never" : new Date(Number(cap.resetsAtMs)).toLocaleString(),
      clear,
    ];
  };

  async function draw(): Promise<void> {
    try {
      const [{ keys }, { caps }] = await Promise.all([auth.listKeys({}), billing.listSpendCaps({})]);
      const active = keys.filter((k) => k.status === KeyStatus.ACTIVE);
      const chosen = scope.value;
      mount(
        scope,
        h("option", { value: "" }, "Whole account"),
        active.map((k) => h("option", { value: k.id }, `Key ${k.name || k.prefix}`)),
      );
      if (active.some((k) => k.id === chosen)) scope.value = chosen;
      if (caps.length === 0) {
        mount(list, h("p", { class: "muted" }, "No spend caps: calls may spend whatever the wallet holds."));
        return;
      }
      mount(
        list,
        table(
          ["Applies to", "Chain", "Period", "Cap", "Spent", "Resets", ""],
          caps.map((cap) => row(cap, keys)),
          new Set([3, 4]),
        ),
      );
    } catch (error) {
      mount(list, errorLine(error));
    }
  }

  const element = h(
    "section",
    { id: "spend-caps" },
    h("h2", {}, "Spend caps"),
    h(
      "p",
      { class: "muted" },
      "The most the account, or one key, may spend on a chain per UTC day, per UTC month or ever. " +
        "A call that would go past a cap is refused (402) before it reaches the model.",
    ),
    form,
    status,
    list,
  );
  return { element, draw };
}
