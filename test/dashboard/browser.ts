import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core";
import { type Hex, toHex } from "viem";
import type { PrivateKeyAccount } from "viem/accounts";
import type { SolanaTestWallet } from "./wallets.js";

/** Debian's chromium, installed by `make browser` (part of `make test`). */
export const CHROMIUM = "/usr/bin/chromium";
/** Screenshots of every page land here: a test artifact, ignored by git. */
export const SCREENSHOTS = join(process.cwd(), ".artifacts", "screenshots");

/** Launches headless chromium with no traffic of its own (no sync, updates or QUIC probing). */
export async function launchChromium(): Promise<Browser> {
  mkdirSync(SCREENSHOTS, { recursive: true });
  return await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
}

/** Saves a full-page screenshot named `name`.png. */
export async function screenshot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
}

/** What the injected EIP-1193 wallet does for methods beyond accounts, chain and signing. */
export interface EvmWalletOptions {
  readonly chainId: number;
  /** eth_sendTransaction: sends it from the account and returns the hash. */
  readonly sendTransaction?: (tx: { to: Hex; data?: Hex; value?: Hex }, chainId: number) => Promise<Hex>;
}

/**
 * Injects `window.ethereum`, an EIP-1193 provider whose requests are answered in the test by a
 * viem local account: the page talks to it exactly as to a browser wallet.
 */
export async function injectEvmWallet(
  context: BrowserContext,
  account: PrivateKeyAccount,
  options: EvmWalletOptions,
): Promise<{ requests: string[] }> {
  let chainId = options.chainId;
  const requests: string[] = [];
  await context.exposeFunction("__testEvmWallet", async (method: string, params: unknown[]) => {
    requests.push(method);
    switch (method) {
      case "eth_requestAccounts":
      case "eth_accounts":
        return [account.address];
      case "eth_chainId":
        return toHex(chainId);
      case "wallet_switchEthereumChain":
        chainId = Number((params[0] as { chainId: string }).chainId);
        return null;
      case "personal_sign":
        return await account.signMessage({ message: { raw: params[0] as Hex } });
      case "eth_sendTransaction":
        if (options.sendTransaction === undefined) throw new Error("this test wallet sends no transactions");
        return await options.sendTransaction(params[0] as { to: Hex; data?: Hex; value?: Hex }, chainId);
      default:
        throw new Error(`the test wallet does not support ${method}`);
    }
  });
  await context.addInitScript(() => {
    const call = (globalThis as unknown as { __testEvmWallet: (m: string, p: unknown[]) => Promise<unknown> })
      .__testEvmWallet;
    (globalThis as unknown as { ethereum: unknown }).ethereum = {
      request: ({ method, params }: { method: string; params?: unknown[] }) => call(method, params ?? []),
      on() {},
      removeListener() {},
    };
  });
  return { requests };
}

/**
 * Injects `window.solana` (connect, signMessage, signAndSendTransaction) backed by a key held by
 * the test; `send` broadcasts what the wallet signed and returns the signature.
 */
export async function injectSolanaWallet(
  context: BrowserContext,
  wallet: SolanaTestWallet,
  send: (signed: Uint8Array) => Promise<string> = async () => {
    throw new Error("this test wallet sends no transactions");
  },
): Promise<void> {
  await context.exposeFunction("__testSolanaSign", async (bytes: number[]) =>
    Array.from(wallet.signMessage(Uint8Array.from(bytes))),
  );
  await context.exposeFunction("__testSolanaSend", async (bytes: number[]) =>
    send(wallet.signTransaction(Uint8Array.from(bytes))),
  );
  await context.addInitScript((address: string) => {
    const page = globalThis as unknown as {
      __testSolanaSign: (b: number[]) => Promise<number[]>;
      __testSolanaSend: (b: number[]) => Promise<string>;
      solana: unknown;
    };
    const publicKey = { toString: () => address, toBase58: () => address };
    page.solana = {
      publicKey,
      connect: async () => ({ publicKey }),
      signMessage: async (message: Uint8Array) => ({
        signature: Uint8Array.from(await page.__testSolanaSign(Array.from(message))),
      }),
      signAndSendTransaction: async (transaction: {
        serialize(options: { requireAllSignatures: boolean; verifySignatures: boolean }): Uint8Array;
      }) => ({
        signature: await page.__testSolanaSend(
          Array.from(transaction.serialize({ requireAllSignatures: false, verifySignatures: false })),
        ),
      }),
    };
  }, wallet.address);
}

/** What sticks out of the viewport sideways: the page's own scroll width and each element. */
export interface Overflow {
  readonly viewport: number;
  readonly scrollWidth: number;
  /** The outermost elements reaching past the viewport's right edge, as `tag#id.class (left–right)`. */
  readonly elements: string[];
}

/**
 * Measures horizontal overflow: the document's scroll width, and each outermost rendered element
 * whose box ends right of the viewport (a table scrolled inside its own box counts too: the dashboard's
 * tables must fit, not scroll). Text in `pre` blocks, which scroll on purpose, is the one
 * exception; the skip link hides off the left edge on purpose, so only the right edge counts.
 */
export async function measureOverflow(page: Page): Promise<Overflow> {
  return await page.evaluate(() => {
    // Runs in the page; the test project has no DOM types, so the few used are named here.
    interface Box {
      readonly left: number;
      readonly right: number;
      readonly width: number;
      readonly height: number;
    }
    interface El {
      readonly id: string;
      readonly className: unknown;
      readonly tagName: string;
      readonly parentElement: El | null;
      closest(selector: string): El | null;
      getBoundingClientRect(): Box;
    }
    const page = globalThis as unknown as {
      innerWidth: number;
      document: {
        body: { querySelectorAll(selector: string): Iterable<El> };
        documentElement: { scrollWidth: number };
      };
    };
    const viewport = page.innerWidth;
    const elements: string[] = [];
    for (const element of page.document.body.querySelectorAll("*")) {
      if (element.closest("pre") !== null) continue;
      const box = element.getBoundingClientRect();
      if (box.width === 0 && box.height === 0) continue;
      // Only the outermost culprit: its parent still fits.
      const parent = element.parentElement?.getBoundingClientRect();
      if (box.right > viewport + 0.5 && (parent === undefined || parent.right <= viewport + 0.5)) {
        const id = element.id === "" ? "" : `#${element.id}`;
        const cls =
          typeof element.className === "string" && element.className !== ""
            ? `.${element.className.split(" ").join(".")}`
            : "";
        elements.push(
          `${element.tagName.toLowerCase()}${id}${cls} (${Math.round(box.left)}–${Math.round(box.right)})`,
        );
      }
    }
    return { viewport, scrollWidth: page.document.documentElement.scrollWidth, elements };
  });
}
