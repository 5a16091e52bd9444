import Anthropic from "@anthropic-ai/sdk";
import { Connection } from "@solana/web3.js";
import type { Browser } from "playwright-core";
import { createTestClient, createWalletClient, getAddress, http, parseEther, publicActions } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readDevChainsFile, requestFaucet } from "../../src/dev/chains/dev-chains-file.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { type GatewayProcess, startGateway, tempDir } from "../helpers/process.js";
import { injectEvmWallet, injectSolanaWallet, launchChromium, screenshot } from "./browser.js";
import { evmWallet, solanaWallet } from "./wallets.js";

// The new user's whole path in a real browser, against `tollgate serve` in dev mode (anvil dev
// chains, the faucet, the deposit watcher and the settlement worker all real): sign in, get test
// funds, fund from the browser wallet, create a key, call, and watch the charge settle onchain;
// then withdraw, seeing the chain's minimum and network fee before confirming.

let dir: { path: string; cleanup: () => void };
let gateway: GatewayProcess;
let browser: Browser;

beforeAll(async () => {
  dir = tempDir();
  gateway = await startGateway(
    {
      TOLLGATE_DATA_DIR: dir.path,
      TOLLGATE_DEV_CHAINS: "on",
      TOLLGATE_SETTLEMENT_MODE: "per-call",
      TOLLGATE_CHAIN_POLL_MS: "100",
      TOLLGATE_WITHDRAWALS_PER_HOUR: "2",
    },
    60_000,
  );
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  await gateway?.stop("SIGTERM");
  dir?.cleanup();
});

describe("funding from the dashboard on the dev chains", () => {
  it("faucet, fund from the wallet, key, call, and the call's settlement, all in the page", async () => {
    const devChains = readDevChainsFile(dir.path)!;
    const arbitrum = devChains.registry.byId.get("arbitrum")!;
    const wallet = evmWallet();
    // The user's own wallet holds gas and some test stablecoin on arbitrum before it visits.
    const chain = {
      id: arbitrum.chainId!,
      name: "arbitrum (dev)",
      nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
      rpcUrls: { default: { http: [arbitrum.rpcUrl] } },
    };
    const test = createTestClient({ mode: "anvil", transport: http(arbitrum.rpcUrl) }).extend(publicActions);
    await test.setBalance({ address: wallet.address, value: parseEther("1") });
    await requestFaucet(devChains.faucetUrl, "arbitrum", wallet.address, 10_000_000n);
    const signer = createWalletClient({ account: wallet, chain, transport: http(arbitrum.rpcUrl) });

    const context = await browser.newContext();
    const injected = await injectEvmWallet(context, wallet, {
      chainId: 8453,
      sendTransaction: async (tx, chainId) => {
        expect(chainId).toBe(arbitrum.chainId);
        return await signer.sendTransaction({ to: getAddress(tx.to), data: tx.data });
      },
    });
    const page = await context.newPage();
    await page.goto(`${gateway.facadeUrl}/dashboard`);
    await page.getByRole("button", { name: "Sign in with Ethereum" }).click();
    await page.getByRole("heading", { name: "Wallet", exact: true }).waitFor();

    // The faucet button mints to the deposit address; the balance arrives at finality.
    await page.locator("#faucet").waitFor();
    await page.getByRole("button", { name: "Get test funds" }).click();
    await expect
      .poll(() => page.locator("#faucet-status").textContent(), { timeout: 30_000 })
      .toContain("credited");
    await expect.poll(() => page.locator('[data-available="base"]').textContent()).toBe("$25.00");

    // Fund from the browser wallet: an ERC-20 transfer through EIP-1193 on arbitrum.
    await page.locator("#fund-chain").selectOption("arbitrum");
    await page.locator("#fund-amount").fill("3.5");
    await page.getByRole("button", { name: "Fund from my wallet" }).click();
    await expect
      .poll(() => page.locator("#fund-status").textContent(), { timeout: 30_000 })
      .toBe("$3.50 credited on arbitrum.");
    expect(injected.requests).toEqual(
      expect.arrayContaining(["wallet_switchEthereumChain", "eth_sendTransaction"]),
    );
    await expect.poll(() => page.locator('[data-available="arbitrum"]').textContent()).toBe("$3.50");
    // The deposits table re-renders after the balances: wait for it too (on a loaded machine that
    // can take longer than expect.poll's default second).
    await expect.poll(() => page.locator("#deposits tbody tr").count(), { timeout: 10_000 }).toBe(2);
    expect(await page.locator("img.qr").count()).toBeGreaterThanOrEqual(3);
    await screenshot(page, "wallet-funded");

    // A key, a call with it, and the call's charge and onchain settlement in Usage.
    await page.getByRole("link", { name: "Keys" }).click();
    await page.getByLabel("Key name").fill("funded");
    await page.getByRole("button", { name: "Create key" }).click();
    const secret = (await page.locator("#new-key-secret").textContent()) ?? "";
    const client = new Anthropic({ baseURL: gateway.facadeUrl, apiKey: secret, maxRetries: 0 });
    await client.messages.create({
      model: "model-haiku-4-5",
      max_tokens: 64,
      messages: [{ role: "user", content: "Paid from a funded wallet" }],
    });
    await page.getByRole("link", { name: "Usage" }).click();
    const settlement = page.locator("[data-settlement]").first();
    await settlement.waitFor();
    await expect
      .poll(
        async () => {
          await page.reload();
          await page.locator("[data-settlement]").first().waitFor();
          return await page.locator("[data-settlement]").first().textContent();
        },
        { timeout: 30_000, interval: 500 },
      )
      .toMatch(/^settled onchain 0x[0-9a-f]{8}…$/);
    await screenshot(page, "usage-settled");

    // Withdraw part of the deposit to the user's wallet: the form names the chain's minimum and
    // network fee, quotes what arrives and what leaves the balance, and asks for confirmation.
    await page.getByRole("link", { name: "Wallet" }).click();
    await page.locator("#withdraw-chain").selectOption("arbitrum");
    await expect
      .poll(() => page.locator("#withdraw-terms").textContent())
      .toContain("Minimum $1.00 · network fee $0.05");
    const withdrawButton = page.getByRole("button", { name: "Withdraw", exact: true });
    const status = page.locator("#withdraw-status");
    await page.locator("#withdraw-to").fill(wallet.address);
    // Below the minimum: said in the page, nothing sent.
    await page.locator("#withdraw-amount").fill("0.5");
    await withdrawButton.click();
    await expect.poll(() => status.textContent()).toBe("Withdrawals on arbitrum are at least $1.00.");
    expect(await page.locator("#withdraw-review").isVisible()).toBe(false);
    // More than may leave once the fee is added: the gateway's refusal, in its words.
    await page.locator("#withdraw-amount").fill("3.48");
    expect(await page.locator("#withdraw-quote").textContent()).toBe(
      "You receive $3.48, network fee $0.05: $3.53 leaves your balance.",
    );
    await withdrawButton.click();
    await page.getByRole("button", { name: "Confirm withdrawal" }).click();
    await expect
      .poll(() => status.textContent())
      .toContain("Not enough to withdraw 3.480000 USDC on arbitrum");
    // One dollar: confirmed with the fee in view, then queued.
    await page.locator("#withdraw-amount").fill("1");
    await withdrawButton.click();
    expect(await page.locator("#withdraw-confirm-text").textContent()).toBe(
      `You receive $1.00, network fee $0.05: $1.05 leaves your balance. To ${wallet.address} on arbitrum.`,
    );
    await screenshot(page, "withdraw-confirm");
    await page.getByRole("button", { name: "Confirm withdrawal" }).click();
    await expect
      .poll(() => status.textContent())
      .toBe("Withdrawal of $1.00 on arbitrum queued (network fee $0.05).");
    await expect.poll(() => page.locator('[data-available="arbitrum"]').textContent()).toBe("$2.45");
    // TOLLGATE_WITHDRAWALS_PER_HOUR=2, and the refused attempt counted: the next one waits.
    await page.locator("#withdraw-amount").fill("1");
    await withdrawButton.click();
    await page.getByRole("button", { name: "Confirm withdrawal" }).click();
    await expect
      .poll(() => status.textContent())
      .toMatch(
        /^This account may make at most 2 withdrawals per hour and has made them; the next one may be made in \d+ s\.$/,
      );
    await expect
      .poll(
        async () => {
          await page.reload();
          await page.locator("#withdrawals tbody tr").first().waitFor();
          return await page.locator("[data-withdrawal-status]").first().textContent();
        },
        { timeout: 30_000, interval: 500 },
      )
      .toBe("confirmed");
    await context.close();

    const db = openDatabase(dir.path);
    try {
      expect(auditLedger(db)).toEqual([]);
    } finally {
      db.close();
    }
  });

  it("funds from a Solana wallet: the gateway assembles the SPL transfer, the wallet signs and sends it", async () => {
    const devChains = readDevChainsFile(dir.path)!;
    const solana = devChains.registry.byId.get("solana")!;
    const wallet = solanaWallet();
    await requestFaucet(devChains.faucetUrl, "solana", wallet.address, 5_000_000n);
    const connection = new Connection(solana.rpcUrl, "confirmed");
    const context = await browser.newContext();
    const sent: string[] = [];
    await injectSolanaWallet(context, wallet, async (signed) => {
      const signature = await connection.sendRawTransaction(signed);
      sent.push(signature);
      return signature;
    });
    const page = await context.newPage();
    await page.goto(`${gateway.facadeUrl}/dashboard`);
    await page.getByRole("button", { name: "Sign in with Solana" }).click();
    await page.getByRole("heading", { name: "Wallet", exact: true }).waitFor();
    await page.locator("#fund-chain").selectOption("solana");
    await page.locator("#fund-amount").fill("2");
    await page.getByRole("button", { name: "Fund from my wallet" }).click();
    await expect
      .poll(() => page.locator("#fund-status").textContent(), { timeout: 60_000 })
      .toBe("$2.00 credited on solana.");
    expect(sent).toHaveLength(1);
    await expect.poll(() => page.locator('[data-available="solana"]').textContent()).toBe("$2.00");
    await screenshot(page, "wallet-funded-solana");
    await context.close();
  });
});
