import { createPublicKey, verify } from "node:crypto";
import Anthropic from "@anthropic-ai/sdk";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTextGateway, type TextGateway } from "../helpers/text-gateway.js";
import { injectEvmWallet, injectSolanaWallet, launchChromium, screenshot } from "./browser.js";
import { evmWallet, solanaWallet } from "./wallets.js";

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

/** The signed-in account's id, read through the page's own session. */
async function accountIdOf(page: Page): Promise<string> {
  return await page.evaluate(async () => {
    const res = await fetch("/dashboard/rpc/tollgate.auth.v1.AuthService/GetSession", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    return ((await res.json()) as { account: { id: string } }).account.id;
  });
}

async function open(context: BrowserContext, route = ""): Promise<Page> {
  const page = await context.newPage();
  const errors: string[] = [];
  page.on("pageerror", (error) => errors.push(error.message));
  await page.goto(`${t.baseUrl}/dashboard${route}`);
  return page;
}

describe("the dashboard in a real browser", () => {
  it("signs in with an EVM wallet, funds, creates a key, sees the call and its price, switches chain and revokes", async () => {
    const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
    const wallet = evmWallet();
    const injected = await injectEvmWallet(context, wallet, { chainId: 8453 });
    const page = await open(context);

    // Signed out, the dashboard opens on sign-in; the wallet signs a SIWE message.
    await page.getByRole("heading", { name: "Sign in" }).waitFor();
    await screenshot(page, "sign-in");
    await page.getByRole("button", { name: "Sign in with Ethereum" }).click();
    await page.getByRole("heading", { name: "Wallet", exact: true }).waitFor();
    expect(injected.requests).toEqual(expect.arrayContaining(["eth_requestAccounts", "personal_sign"]));
    const accountId = await accountIdOf(page);

    // Funds arrive (operator credit on base: 5 dollars) and the balance shows them.
    await t.credit(5_000_000n, "base", accountId);
    await page.reload();
    await expect.poll(() => page.locator('[data-available="base"]').textContent()).toBe("$5.00");
    await screenshot(page, "wallet");

    // A key is created and its secret shown once.
    await page.getByRole("link", { name: "Keys" }).click();
    await page.getByLabel("Key name").fill("browser key");
    await page.getByRole("button", { name: "Create key" }).click();
    const secret = (await page.locator("#new-key-secret").textContent()) ?? "";
    expect(secret).toMatch(/^tg_/);
    await expect.poll(() => page.getByText("It will not be shown again", { exact: false }).count()).toBe(1);
    await screenshot(page, "keys-created");
    await page.getByRole("button", { name: "I have stored it" }).click();
    expect(await page.locator("#new-key-secret").count()).toBe(0);
    await page.reload();
    await page.locator("#key-list table").waitFor();
    expect(await page.content()).not.toContain(secret);

    // The key makes a real call through the gateway.
    const client = new Anthropic({ baseURL: t.baseUrl, apiKey: secret, maxRetries: 0 });
    const reply = await client.messages.create({
      model: "model-haiku-4-5",
      max_tokens: 64,
      messages: [{ role: "user", content: "Hello from the dashboard test" }],
    });
    expect(reply.content[0]?.type).toBe("text");
    const [row] = await t.usage(accountId);
    expect(row?.amount).toBeGreaterThan(0n);

    // Usage shows the call with its exact price.
    await page.getByRole("link", { name: "Usage" }).click();
    const price = page.locator(`[data-price="${row!.requestId}"]`);
    await price.waitFor();
    expect(await price.textContent()).toBe(dollarsOf(row!.amount));
    expect(await page.locator("#usage table").textContent()).toContain("model-haiku-4-5");
    expect(await page.locator("#usage-chart rect").count()).toBe(1);
    const download = page.waitForEvent("download");
    await page.getByRole("button", { name: "Export CSV" }).click();
    const csv = await (await (await download).createReadStream()).toArray();
    expect(Buffer.concat(csv).toString()).toContain(`${row!.requestId},browser key,model-haiku-4-5`);
    // Its signed receipt downloads from the row, and verifies against the published key.
    const receiptDownload = page.waitForEvent("download");
    await page.locator(`[data-receipt="${row!.requestId}"]`).click();
    const file = await receiptDownload;
    expect(file.suggestedFilename()).toBe(`receipt-${row!.requestId}.json`);
    const receipt = JSON.parse(Buffer.concat(await (await file.createReadStream()).toArray()).toString()) as {
      format: string;
      signature: string;
    };
    expect(receipt.format).toBe("jws");
    const [header, payload, signature] = receipt.signature.split(".");
    const { keys } = (await (await fetch(`${t.baseUrl}/.well-known/jwks.json`)).json()) as {
      keys: { kty: string; crv: string; x: string }[];
    };
    const publicKey = createPublicKey({ key: keys[0]!, format: "jwk" });
    expect(
      verify(null, Buffer.from(`${header}.${payload}`), publicKey, Buffer.from(signature!, "base64url")),
    ).toBe(true);
    expect(JSON.parse(Buffer.from(payload!, "base64url").toString())).toMatchObject({
      requestId: row!.requestId,
      resourceUrl: `${t.baseUrl}/v1/messages`,
      charge: { amount: `${row!.amount}` },
    });
    await screenshot(page, "usage");

    // A call with web search in fast mode: the Usage page says what it was charged for. (A
    // server-tool loop holds ten context windows, so the wallet gets more first.)
    await t.credit(300_000_000n, "base", accountId);
    await client.messages.create({
      model: "model-opus-4-8",
      max_tokens: 200,
      speed: "fast",
      messages: [{ role: "user", content: "What is new in gateways this week?" }],
      tools: [{ type: "web_search_20250305", name: "web_search", max_uses: 5 }],
    } as unknown as Anthropic.MessageCreateParamsNonStreaming);
    const [searched] = await t.usage(accountId);
    await page.reload();
    const charges = page.locator(`[data-charges="${searched!.requestId}"]`);
    await charges.waitFor();
    const shown = (await charges.textContent()) ?? "";
    expect(shown).toContain("3 web searches");
    expect(shown).toContain("$0.03");
    expect(shown).toContain("fast mode ×2");
    await screenshot(page, "usage-charges");

    // Switching the default chain bills the next call there.
    await t.credit(2_000_000n, "arbitrum", accountId);
    await page.getByRole("link", { name: "Wallet" }).click();
    await page.locator("#default-chain-select").selectOption("arbitrum");
    await page.getByRole("button", { name: "Save" }).click();
    await expect.poll(() => page.locator("#default-chain-status").textContent()).toContain("arbitrum");
    await client.messages.create({
      model: "model-haiku-4-5",
      max_tokens: 64,
      messages: [{ role: "user", content: "On arbitrum" }],
    });
    expect((await t.usage(accountId))[0]?.chain).toBe("arbitrum");

    // Revoking the key refuses its next call.
    await page.getByRole("link", { name: "Keys" }).click();
    await page.getByRole("button", { name: "Revoke" }).click();
    await page.getByRole("button", { name: "Confirm revoke" }).click();
    await expect.poll(() => page.locator("[data-key-status]").first().textContent()).toBe("revoked");
    await expect(
      client.messages.create({
        model: "model-haiku-4-5",
        max_tokens: 8,
        messages: [{ role: "user", content: "x" }],
      }),
    ).rejects.toMatchObject({ status: 403 });
    t.expectSoundLedger();

    // Sign out returns to sign-in, and the private pages are gone.
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByRole("heading", { name: "Sign in" }).waitFor();
    await page.goto(`${t.baseUrl}/dashboard#/keys`);
    await page.getByRole("heading", { name: "Sign in" }).waitFor();
    await context.close();
  });

  it("shows the live catalog on the public Pricing page and the base URL on Getting started", async () => {
    const context = await browser.newContext();
    const page = await open(context, "#/pricing");
    await page.locator("#text-prices table").waitFor();
    const { textModels, imageModels } = await t.billing.getPricing({});
    const rows = await page.locator("#text-prices tbody tr").allTextContents();
    expect(rows).toHaveLength(textModels.length);
    for (const [i, model] of textModels.entries()) {
      expect(rows[i]).toBe(
        [
          model.model,
          dollarsOf(model.inputPerMtok),
          dollarsOf(model.outputPerMtok),
          dollarsOf(model.cacheWrite5mPerMtok),
          dollarsOf(model.cacheWrite1hPerMtok),
          dollarsOf(model.cacheReadPerMtok),
        ].join(""),
      );
    }
    const imageRows = await page.locator("#image-prices tbody tr").allTextContents();
    expect(imageRows).toEqual(
      imageModels.flatMap((m) => m.sizes.map((s) => `${m.model}${s.size}${dollarsOf(s.pricePerImage)}`)),
    );
    await screenshot(page, "pricing");
    await page.getByRole("link", { name: "Getting started" }).click();
    await page.locator("#claude-code pre").waitFor();
    expect(await page.locator("#claude-code pre").textContent()).toContain(
      `ANTHROPIC_BASE_URL=${t.baseUrl}\n`,
    );
    // The keyless x402 example pays this gateway's own messages route with x402's client.
    const x402Example = await page.locator("#x402-fetch pre").textContent();
    expect(x402Example).toContain(`paidFetch("${t.baseUrl}/x402/v1/messages"`);
    expect(x402Example).toContain("wrapFetchWithPayment(fetch, client)");
    await screenshot(page, "getting-started");
    await context.close();
  });

  it("works at 375 px and from the keyboard, and says when no wallet is installed", async () => {
    const context = await browser.newContext({ viewport: { width: 375, height: 740 } });
    const page = await open(context);
    await page.getByRole("heading", { name: "Sign in" }).waitFor();
    expect(await page.getByText("No Ethereum wallet found").count()).toBe(1);
    expect(await page.getByText("No Solana wallet found").count()).toBe(1);
    for (const route of ["#/pricing", "#/start", "#/sign-in"]) {
      await page.goto(`${t.baseUrl}/dashboard${route}`);
      await page.locator("main h1").waitFor();
      expect(await page.evaluate<number>("document.documentElement.scrollWidth")).toBeLessThanOrEqual(375);
      await screenshot(page, `narrow-${route.slice(2)}`);
    }
    // The skip link and the nav are reachable with Tab.
    await page.keyboard.press("Tab");
    expect(await page.evaluate<string>("document.activeElement?.textContent")).toBe("Skip to content");
    await context.close();
  });

  it("signs in with a Solana wallet, links an EVM wallet, and keeps one account for both", async () => {
    const context = await browser.newContext();
    const sol = solanaWallet();
    const evm = evmWallet();
    await injectSolanaWallet(context, sol);
    await injectEvmWallet(context, evm, { chainId: 42161 });
    const page = await open(context);
    await page.getByRole("button", { name: "Sign in with Solana" }).click();
    await page.getByRole("heading", { name: "Wallet", exact: true }).waitFor();
    const accountId = await accountIdOf(page);
    await page.getByRole("button", { name: "Link an Ethereum wallet" }).click();
    await expect.poll(() => page.locator("#identities").textContent()).toContain(evm.address);
    expect(await page.locator("#identities").textContent()).toContain(sol.address);
    await screenshot(page, "wallet-linked");
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByRole("button", { name: "Sign in with Ethereum" }).click();
    await page.getByRole("heading", { name: "Wallet", exact: true }).waitFor();
    expect(await accountIdOf(page)).toBe(accountId);
    await context.close();
  });
});

/** Ledger units of a 6-decimal chain (or µ$ prices) as the page prints them. */
function dollarsOf(units: bigint): string {
  const whole = units / 1_000_000n;
  let fraction = (units % 1_000_000n).toString().padStart(6, "0").replace(/0+$/, "");
  if (fraction.length < 2) fraction = fraction.padEnd(2, "0");
  return `$${whole.toLocaleString("en-US")}.${fraction}`;
}
