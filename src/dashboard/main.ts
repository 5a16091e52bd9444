import { Code, ConnectError } from "@connectrpc/connect";
import type { GetSessionResponse } from "../gen/tollgate/auth/v1/auth_pb.js";
import type { GetPricingResponse } from "../gen/tollgate/billing/v1/billing_pb.js";
import type { Page, PageContext } from "./context.js";
import { errorLine, h, loading, messageOf, mount } from "./dom.js";
import { keysPage } from "./pages/keys.js";
import { pricingPage } from "./pages/pricing.js";
import { signInPage } from "./pages/sign-in.js";
import { startPage } from "./pages/start.js";
import { usagePage } from "./pages/usage.js";
import { walletPage } from "./pages/wallet.js";
import { auth, billing, setCsrfToken } from "./rpc.js";

interface Route {
  readonly title: string;
  readonly page: Page;
  /** Shown only to a signed-in user; others are sent to sign in. */
  readonly private: boolean;
}

const ROUTES: Record<string, Route> = {
  wallet: { title: "Wallet", page: walletPage, private: true },
  keys: { title: "Keys", page: keysPage, private: true },
  usage: { title: "Usage", page: usagePage, private: true },
  pricing: { title: "Pricing", page: pricingPage, private: false },
  start: { title: "Getting started", page: startPage, private: false },
  "sign-in": { title: "Sign in", page: signInPage, private: false },
};

const main = document.getElementById("main")!;
const nav = document.getElementById("nav")!;
const who = document.getElementById("who")!;
let session: GetSessionResponse | undefined;
let pricing: GetPricingResponse | undefined;

async function readSession(): Promise<GetSessionResponse | undefined> {
  try {
    const found = await auth.getSession({});
    setCsrfToken(found.csrfToken);
    return found;
  } catch (error) {
    if (error instanceof ConnectError && error.code === Code.Unauthenticated) {
      setCsrfToken("");
      return undefined;
    }
    throw error;
  }
}

function currentRoute(): string {
  const name = location.hash.replace(/^#\/?/, "");
  if (name in ROUTES) return name;
  return session === undefined ? "sign-in" : "wallet";
}

function drawChrome(active: string): void {
  const links = Object.entries(ROUTES)
    .filter(([name, route]) => name !== "sign-in" && (!route.private || session !== undefined))
    .map(([name, route]) =>
      h("a", { href: `#/${name}`, "aria-current": name === active ? "page" : undefined }, route.title),
    );
  mount(nav, links);
  if (session === undefined) {
    mount(who, h("a", { href: "#/sign-in" }, "Sign in"));
    return;
  }
  const signOut = h("button", { type: "button", class: "secondary", id: "sign-out" }, "Sign out");
  signOut.addEventListener("click", async () => {
    signOut.disabled = true;
    try {
      await auth.signOut({});
    } finally {
      location.hash = "#/sign-in";
      await render();
    }
  });
  const identities = session.identities.map((identity) => identity.address);
  mount(
    who,
    h(
      "span",
      { class: "mono", id: "signed-in-as", title: identities.join("\n") },
      session.account?.name ?? "",
    ),
    signOut,
  );
}

async function render(): Promise<void> {
  mount(main, loading("the dashboard"));
  try {
    [session, pricing] = await Promise.all([readSession(), pricing ?? billing.getPricing({})]);
  } catch (error) {
    mount(main, h("h1", {}, "Tollgate"), errorLine(error), retryButton());
    return;
  }
  let name = currentRoute();
  const route = ROUTES[name]!;
  if (route.private && session === undefined) name = "sign-in";
  if (name === "sign-in" && session !== undefined) name = "wallet";
  drawChrome(name);
  document.title = `${ROUTES[name]!.title} · Tollgate`;
  const ctx: PageContext = { main, session, pricing: pricing!, refresh: render };
  try {
    await ROUTES[name]!.page(ctx);
  } catch (error) {
    mount(main, h("h1", {}, ROUTES[name]!.title), errorLine(error), retryButton());
  }
}

function retryButton(): HTMLElement {
  return h("button", { type: "button", onclick: () => void render() }, "Try again");
}

window.addEventListener("hashchange", () => {
  void render().then(() => main.focus());
});
window.addEventListener("unhandledrejection", (event) => {
  main.prepend(h("p", { class: "error", role: "alert" }, messageOf(event.reason)));
});
void render();
