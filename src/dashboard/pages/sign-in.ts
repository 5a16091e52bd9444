import type { SignInResponse } from "../../gen/tollgate/auth/v1/auth_pb.js";
import type { PageContext } from "../context.js";
import { h, messageOf, mount } from "../dom.js";
import { setCsrfToken } from "../rpc.js";
import { signInWithEthereum, signInWithSolana } from "../wallets.js";

/** Sign-in with an Ethereum (SIWE) or a Solana wallet. The first sign-in creates the account. */
export async function signInPage(ctx: PageContext): Promise<void> {
  const status = h("p", { role: "status", id: "sign-in-status" });
  const option = (
    id: string,
    label: string,
    present: boolean,
    missing: string,
    run: () => Promise<SignInResponse>,
  ) => {
    const button = h("button", { type: "button", id }, label);
    if (!present) button.disabled = true;
    button.addEventListener("click", async () => {
      button.disabled = true;
      status.className = "";
      status.textContent = "Waiting for your wallet to sign…";
      try {
        const res = await run();
        setCsrfToken(res.csrfToken);
        location.hash = "#/wallet";
        await ctx.refresh();
      } catch (error) {
        status.className = "error";
        status.textContent = `Sign-in failed: ${messageOf(error)}`;
        button.disabled = false;
      }
    });
    return h("div", { class: "panel-option" }, button, present ? null : h("p", { class: "error" }, missing));
  };
  mount(
    ctx.main,
    h("h1", {}, "Sign in"),
    h(
      "p",
      {},
      "Sign in with a wallet: your wallet signs a one-time message (no transaction, no gas). " +
        "Your first sign-in creates your account; you can link the other kind of wallet later.",
    ),
    h(
      "section",
      { class: "panel row" },
      option(
        "sign-in-evm",
        "Sign in with Ethereum",
        window.ethereum !== undefined,
        "No Ethereum wallet found in this browser: install one (for example MetaMask or Rabby) and reload.",
        () => signInWithEthereum(ctx.pricing.chains),
      ),
      option(
        "sign-in-solana",
        "Sign in with Solana",
        window.solana !== undefined,
        "No Solana wallet found in this browser: install one (for example Phantom or Solflare) and reload.",
        () => signInWithSolana(ctx.pricing.chains),
      ),
    ),
    status,
  );
}
