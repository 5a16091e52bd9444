import { join } from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import type { Browser, Page } from "playwright-core";
import { privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type EvmDevChain, startEvmDevChain } from "../../src/dev/chains/evm/dev-chain.js";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { writeChainsFile } from "../helpers/evm.js";
import { type GatewayProcess, startGateway, tempDir } from "../helpers/process.js";
import { launchChromium, measureOverflow, screenshot } from "./browser.js";
import { evmWallet } from "./wallets.js";

// A newcomer's first minute against `tollgate dev` (what `make run` runs), in a real browser with
// no wallet extension: the built-in test wallet signs in, the faucet funds it, a key is made and
// its call shows in Usage. Every page is measured at 375 and 1280 px, signed out and signed in.
// `tollgate serve` (a configured chain, a provider URL, a master secret) never offers it.

const TEST_WALLET_TITLE = "Test wallet — dev mode only, not a real wallet";
const WIDTHS = [375, 1280] as const;
const PUBLIC_PAGES = ["#/sign-in", "#/pricing", "#/start"];
const PRIVATE_PAGES = ["#/wallet", "#/keys", "#/usage", "#/pricing", "#/start"];

let dir: { path: string; cleanup: () => void };
let gateway: GatewayProcess;
let browser: Browser;

beforeAll(async () => {
  dir = tempDir();
  gateway = await startGateway(
    { TOLLGATE_DATA_DIR: dir.path, TOLLGATE_DEV_CHAINS: "on", TOLLGATE_CHAIN_POLL_MS: "100" },
    60_000,
  );
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  await gateway?.stop("SIGTERM");
  dir?.cleanup();
});

/** Opens each route at each width and expects nothing to stick out sideways on any of them. */
async function expectEveryPageFits(page: Page, routes: readonly string[], label: string): Promise<void> {
  const overflowing: object[] = [];
  for (const width of WIDTHS) {
    await page.setViewportSize({ width, height: 900 });
    for (const route of routes) {
      await page.goto(`${gateway.facadeUrl}/dashboard${route}`);
      await page.locator("main h1").waitFor();
      await expect.poll(() => page.locator("main .loading").count()).toBe(0);
      const { viewport, scrollWidth, elements } = await measureOverflow(page);
      expect(viewport).toBe(width);
      if (scrollWidth > viewport || elements.length > 0) {
        overflowing.push({ route, width, scrollWidth, elements });
      }
      await screenshot(page, `${label}-${route.slice(2)}-${width}`);
    }
  }
  expect(overflowing).toEqual([]);
}

describe("the dashboard under tollgate dev, with no wallet extension", () => {
  it("signs in with the test wallet, gets test funds, makes a key and sees its call in Usage", async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    await page.goto(`${gateway.facadeUrl}/dashboard`);

    // No extension: the browser wallets say so, and the labelled test wallet is offered.
    await page.getByRole("heading", { name: "Sign in" }).waitFor();
    expect(await page.getByText("No Ethereum wallet found").count()).toBe(1);
    expect(await page.getByRole("heading", { name: TEST_WALLET_TITLE }).count()).toBe(1);
    await screenshot(page, "first-minute-sign-in");
    await expectEveryPageFits(page, PUBLIC_PAGES, "signed-out");

    await page.goto(`${gateway.facadeUrl}/dashboard#/sign-in`);
    await page.getByRole("button", { name: "Sign in with the test wallet" }).click();
    await page.getByRole("heading", { name: "Wallet", exact: true }).waitFor();
    // The key lives in this tab's sessionStorage, and its address is the account's identity.
    const key = await page.evaluate<string | null>(
      'sessionStorage.getItem("tollgate.dev-test-wallet.private-key")',
    );
    expect(key).toMatch(/^0x[0-9a-f]{64}$/);
    const address = privateKeyToAccount(key as `0x${string}`).address;
    await expect.poll(() => page.locator("#identities").textContent()).toContain(address);
    expect(await page.locator("#identities").textContent()).toContain("dev test wallet, not a real wallet");

    // Test funds from the dev faucet, followed to a credited balance.
    await page.locator("#faucet").waitFor();
    await page.getByRole("button", { name: "Get test funds" }).click();
    await expect
      .poll(() => page.locator("#faucet-status").textContent(), { timeout: 30_000 })
      .toContain("credited");
    await expect.poll(() => page.locator('[data-available="base"]').textContent()).toBe("$25.00");

    // A withdrawal request, so the Wallet page is measured with its withdrawals table too.
    await page.locator("#withdraw-chain").selectOption("base");
    await page.locator("#withdraw-amount").fill("5");
    await page.locator("#withdraw-to").fill(evmWallet().address);
    await page.getByRole("button", { name: "Withdraw", exact: true }).click();
    await page.getByRole("button", { name: "Confirm withdrawal" }).click();
    await expect.poll(() => page.locator("#withdraw-status").textContent()).toContain("queued");

    // A key, and a call with it through the official SDK.
    await page.getByRole("link", { name: "Keys" }).click();
    await page.getByLabel("Key name").fill("first minute");
    await page.getByRole("button", { name: "Create key" }).click();
    const secret = (await page.locator("#new-key-secret").textContent()) ?? "";
    expect(secret).toMatch(/^tg_/);
    const client = new Anthropic({ baseURL: gateway.facadeUrl, apiKey: secret, maxRetries: 0 });
    const reply = await client.messages.create({
      model: "model-haiku-4-5",
      max_tokens: 64,
      messages: [{ role: "user", content: "My first call" }],
    });
    expect(reply.content[0]?.type).toBe("text");
    await page.getByRole("button", { name: "I have stored it" }).click();

    // Usage shows it, and every column of the table is in view at 1280 px.
    await page.getByRole("link", { name: "Usage" }).click();
    const price = page.locator("[data-price]");
    await price.waitFor();
    expect(await price.count()).toBe(1);
    expect(await page.locator("#usage table").textContent()).toContain("model-haiku-4-5");
    expect(await price.textContent()).toMatch(/^\$0\.\d+$/);
    const calls = page.locator("#usage .table-wrap");
    expect(await calls.evaluate((wrap) => wrap.scrollWidth <= wrap.clientWidth)).toBe(true);
    expect(await page.locator("#usage th").allTextContents()).toEqual([
      "Time",
      "Key",
      "Model",
      "Usage",
      "Price",
      "Chain",
      "Status",
      "Settlement",
    ]);
    await screenshot(page, "first-minute-usage");

    await expectEveryPageFits(page, PRIVATE_PAGES, "signed-in");

    // Signing out and in again in the same tab is the same wallet, so the same account.
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByRole("button", { name: "Sign in with the test wallet" }).click();
    await page.getByRole("heading", { name: "Wallet", exact: true }).waitFor();
    await expect.poll(() => page.locator('[data-available="base"]').textContent()).not.toBe("$0.00");
    expect(await page.locator("#identities").textContent()).toContain(address);
    await context.close();

    const db = openDatabase(dir.path);
    try {
      expect(auditLedger(db)).toEqual([]);
    } finally {
      db.close();
    }
  });
});

describe("the dashboard under tollgate serve", () => {
  let chain: EvmDevChain;
  let upstream: DevUpstream;
  let served: GatewayProcess;
  let servedDir: { path: string; cleanup: () => void };

  beforeAll(async () => {
    servedDir = tempDir();
    [chain, upstream] = await Promise.all([
      startEvmDevChain({ id: "base", chainId: 8453 }),
      startDevUpstream({ host: "127.0.0.1", port: 0 }),
    ]);
    const chainsFile = join(servedDir.path, "chains.json");
    writeChainsFile(chainsFile, chain);
    served = await startGateway(
      {
        TOLLGATE_DATA_DIR: servedDir.path,
        TOLLGATE_ANTHROPIC_URL: upstream.url,
        TOLLGATE_CHAINS: chainsFile,
        TOLLGATE_DEV_CHAINS: "auto",
        TOLLGATE_MASTER_SECRET: "5c".repeat(32),
      },
      30_000,
      "serve",
    );
  }, 60_000);
  afterAll(async () => {
    await served?.stop("SIGTERM");
    await Promise.all([chain?.close(), upstream?.close()]);
    servedDir?.cleanup();
  });

  it("offers no test wallet: GetPricing says it is not dev mode", async () => {
    const context = await browser.newContext({ viewport: { width: 375, height: 900 } });
    const page = await context.newPage();
    await page.goto(`${served.facadeUrl}/dashboard`);
    await page.getByRole("heading", { name: "Sign in" }).waitFor();
    await page.getByRole("button", { name: "Sign in with Ethereum" }).waitFor();
    expect(await page.getByText("Test wallet", { exact: false }).count()).toBe(0);
    expect(await page.locator("#test-wallet").count()).toBe(0);
    const pricing = await page.evaluate(async () => {
      const res = await fetch("/dashboard/rpc/tollgate.billing.v1.BillingService/GetPricing", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: "{}",
      });
      return (await res.json()) as { devMode?: boolean; chains: unknown[] };
    });
    expect(pricing.chains.length).toBe(1);
    expect(pricing.devMode ?? false).toBe(false);
    await screenshot(page, "serve-sign-in-375");
    await context.close();
  });
});
