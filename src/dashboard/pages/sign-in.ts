import type { SignInResponse } from "../../gen/tollgate/auth/v1/auth_pb.js";
import type { PageContext } from "../context.js";
import { h, messageOf, mount } from "../dom.js";
import { setCsrfToken } from "../rpc.js";
import { signInWithEthereum, signInWithSolana, signInWithTestWallet } from "../wallets.js";

/**
 * Sign-in with an Ethereum (SIWE) or a Solana wallet. The first sign-in creates the account. Under
 * `tollgate dev` (GetPricing's dev_mode) a built-in test wallet is offered too, for a newcomer
 * with no wallet extension.
 */
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
  const testWallet = ctx.pricing.devMode
    ? h(
        "section",
        { class: "panel test-wallet", id: "test-wallet", "aria-labelledby": "test-wallet-title" },
        h("h2", { id: "test-wallet-title" }, "Test wallet — dev mode only, not a real wallet"),
        h(
          "p",
          {},
          "No wallet extension? This gateway runs as ",
          h("code", {}, "tollgate dev"),
          ", so this page can make a throwaway Ethereum key for you, kept in this tab only " +
            "(sessionStorage). Sign in with it, then get test funds on the Wallet page. Never send " +
            "real funds to it.",
        ),
        option("sign-in-test-wallet", "Sign in with the test wallet", true, "", () =>
          signInWithTestWallet(ctx.pricing.chains),
        ),
      )
    : null;
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
    testWallet,
    status,
  );
}
