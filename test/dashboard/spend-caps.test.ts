import Anthropic from "@anthropic-ai/sdk";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTextGateway, type TextGateway } from "../helpers/text-gateway.js";
import { injectEvmWallet, launchChromium, screenshot } from "./browser.js";
import { evmWallet } from "./wallets.js";

// The Keys page's spend caps in a real browser, at 375 px: a key's daily cap set from the page
// refuses the key's next call with a 402 naming it; the list shows it; removing it lets calls through.

let t: TextGateway;
let browser: Browser;

beforeAll(async () => {
  t = await startTextGateway();
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  await t?.close();
});

describe("spend caps on the Keys page", () => {
  it("sets a key's daily cap, which refuses the key's next call, and removes it", async () => {
    const context = await browser.newContext({ viewport: { width: 375, height: 900 } });
    await injectEvmWallet(context, evmWallet(), { chainId: 8453 });
    const page = await context.newPage();
    await page.goto(`${t.baseUrl}/dashboard`);
    await page.getByRole("button", { name: "Sign in with Ethereum" }).click();
    await page.getByRole("heading", { name: "Wallet", exact: true }).waitFor();
    const accountId = await page.evaluate(async () => {
      const res = await fetch("/dashboard/rpc/tollgate.auth.v1.AuthService/GetSession", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: "{}",
      });
      return ((await res.json()) as { account: { id: string } }).account.id;
    });
    await t.credit(5_000_000n, "base", accountId);

    await page.goto(`${t.baseUrl}/dashboard#/keys`);
    await page.getByLabel("Key name").fill("capped key");
    await page.getByRole("button", { name: "Create key" }).click();
    const secret = (await page.locator("#new-key-secret").textContent()) ?? "";
    await page.getByText("No spend caps").waitFor();
    await page.locator("#cap-scope").selectOption({ label: "Key capped key" });
    await page.locator("#cap-chain").selectOption("base");
    await page.locator("#cap-period").selectOption({ label: "Daily" });
    await page.getByLabel("Cap in dollars").fill("0.001");
    await page.getByRole("button", { name: "Set cap" }).click();
    await page.locator("#cap-list table").waitFor();
    expect(await page.locator("#cap-list tbody tr").allTextContents()).toEqual([
      expect.stringMatching(/^capped keybaseDaily\$0\.001\$0\.00/),
    ]);
    expect(await page.evaluate<number>("document.documentElement.scrollWidth")).toBeLessThanOrEqual(375);
    await screenshot(page, "keys-spend-caps");

    // The key's call needs a larger hold than the cap: 402, not forwarded, nothing charged.
    const client = new Anthropic({ baseURL: t.baseUrl, apiKey: secret, maxRetries: 0 });
    const call = () =>
      client.messages.create({
        model: "model-haiku-4-5",
        max_tokens: 64,
        messages: [{ role: "user", content: "Hi" }],
      });
    const refused = await call().then(
      () => undefined,
      (e: unknown) => e as InstanceType<typeof Anthropic.APIError>,
    );
    expect(refused?.status).toBe(402);
    expect(refused?.message).toContain("daily cap of 0.001000 USDC has 0.001000 USDC left");
    expect(await t.usage(accountId)).toHaveLength(0);

    await page.getByRole("button", { name: "Remove" }).click();
    await page.getByText("No spend caps").waitFor();
    expect((await call()).content[0]?.type).toBe("text");
    t.expectSoundLedger();
    await context.close();
  });
});
