import { WalletFamily } from "../../gen/tollgate/auth/v1/auth_pb.js";
import type { PageContext } from "../context.js";
import { errorLine, h, loading, messageOf, mount, table } from "../dom.js";
import { dollars, ledgerDecimals } from "../money.js";
import { billing, setCsrfToken } from "../rpc.js";
import { signInWithEthereum, signInWithSolana, storedTestWallet } from "../wallets.js";
import { fundingSection } from "./funding.js";

/** Balances per chain, the default billing chain, and the wallets that sign in to the account. */
export async function walletPage(ctx: PageContext): Promise<void> {
  const balances = h("div", { id: "balances" }, loading("balances"));
  const chooser = h("div", { id: "default-chain" });
  const funding = h("div", {}, loading("funding"));
  mount(
    ctx.main,
    h("h1", {}, "Wallet"),
    h("h2", {}, "Balances"),
    balances,
    h("h2", {}, "Default billing chain"),
    chooser,
    funding,
    h("h2", {}, "Wallets that sign in"),
    identities(ctx),
  );
  const drawBalances = async () => {
    const res = await billing.getBalances({});
    mount(
      balances,
      table(
        ["Chain", "Asset", "Available", "Held by running calls"],
        res.balances.map((b) => {
          const decimals = ledgerDecimals(b.chain?.asset?.decimals ?? 6);
          return [
            b.chain?.id ?? "",
            b.chain?.asset?.symbol ?? "",
            h("span", { "data-available": b.chain?.id ?? "" }, dollars(b.available, decimals)),
            dollars(b.debitsPending, decimals),
          ];
        }),
        new Set([2, 3]),
      ),
    );
    return res.defaultChain;
  };
  try {
    mount(chooser, defaultChainForm(ctx, await drawBalances()));
  } catch (error) {
    mount(balances, errorLine(error));
    return;
  }
  funding.replaceWith(
    await fundingSection(ctx, async () => {
      await drawBalances().catch((error) => mount(balances, errorLine(error)));
    }),
  );
}

function defaultChainForm(ctx: PageContext, current: string): HTMLElement {
  const select = h(
    "select",
    { id: "default-chain-select", name: "chain" },
    ctx.pricing.chains
      .filter((c) => c.enabled)
      .map((c) =>
        h("option", { value: c.id, selected: c.id === current }, `${c.id} (${c.asset?.symbol ?? ""})`),
      ),
  );
  const save = h("button", { type: "submit" }, "Save");
  const status = h("p", { role: "status", id: "default-chain-status" });
  const form = h(
    "form",
    { class: "row" },
    h("label", {}, "Calls bill this chain unless they name another", select),
    save,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    save.disabled = true;
    status.className = "";
    status.textContent = "Saving…";
    try {
      const res = await billing.setDefaultChain({ chain: select.value });
      status.className = "ok";
      status.textContent = `Calls now bill ${res.defaultChain} by default.`;
    } catch (error) {
      status.className = "error";
      status.textContent = messageOf(error);
    } finally {
      save.disabled = false;
    }
  });
  return h("div", {}, form, status);
}

function identities(ctx: PageContext): HTMLElement {
  const linked = ctx.session?.identities ?? [];
  const has = (family: WalletFamily) => linked.some((identity) => identity.family === family);
  const status = h("p", { role: "status" });
  const testAddress = storedTestWallet()?.address.toLowerCase();
  const link = (label: string, run: () => Promise<{ csrfToken: string }>) => {
    const button = h("button", { type: "button", class: "secondary" }, label);
    button.addEventListener("click", async () => {
      button.disabled = true;
      status.className = "";
      status.textContent = "Waiting for your wallet to sign…";
      try {
        const res = await run();
        if (res.csrfToken !== "") setCsrfToken(res.csrfToken);
        await ctx.refresh();
      } catch (error) {
        status.className = "error";
        status.textContent = messageOf(error);
        button.disabled = false;
      }
    });
    return button;
  };
  return h(
    "div",
    { id: "identities" },
    table(
      ["Kind", "Address"],
      linked.map((identity) => [
        identity.family === WalletFamily.SOLANA
          ? "Solana"
          : identity.address.toLowerCase() === testAddress
            ? "Ethereum (dev test wallet, not a real wallet)"
            : "Ethereum",
        h("span", { class: "mono address" }, identity.address),
      ]),
    ),
    h(
      "div",
      { class: "row" },
      has(WalletFamily.EVM)
        ? null
        : link("Link an Ethereum wallet", () => signInWithEthereum(ctx.pricing.chains, true)),
      has(WalletFamily.SOLANA)
        ? null
        : link("Link a Solana wallet", () => signInWithSolana(ctx.pricing.chains, true)),
    ),
    status,
  );
}
