import type { Transaction } from "@solana/web3.js";
import { getAddress, type Hex, stringToHex } from "viem";
import { generatePrivateKey, type PrivateKeyAccount, privateKeyToAccount } from "viem/accounts";
import { createSiweMessage } from "viem/siwe";
import { type SignInResponse, WalletFamily } from "../gen/tollgate/auth/v1/auth_pb.js";
import { type Chain, ChainFamily } from "../gen/tollgate/billing/v1/billing_pb.js";
import { auth } from "./rpc.js";

/** An EIP-1193 provider, as browser wallets inject it. */
export interface Eip1193Provider {
  request(args: { method: string; params?: unknown[] }): Promise<unknown>;
}

/** The Solana wallet standard's injected shape (Phantom and compatible wallets). */
export interface SolanaProvider {
  connect(): Promise<{ publicKey: { toString(): string } }>;
  signMessage(message: Uint8Array, encoding?: string): Promise<{ signature: Uint8Array }>;
  signAndSendTransaction(transaction: Transaction): Promise<{ signature: string }>;
}

declare global {
  interface Window {
    ethereum?: Eip1193Provider;
    solana?: SolanaProvider;
  }
}

const STATEMENT = "Sign in to the Tollgate dashboard.";
/** A signed message is good for this long; the nonce expires after five minutes anyway. */
const MESSAGE_LIFETIME_MS = 5 * 60_000;

/** The injected Ethereum wallet, or an error that says how to get one. */
export function ethereumWallet(): Eip1193Provider {
  if (window.ethereum === undefined) {
    throw new Error(
      "No Ethereum wallet found in this browser. Install a browser wallet (for example MetaMask or Rabby) and reload.",
    );
  }
  return window.ethereum;
}

/** The injected Solana wallet, or an error that says how to get one. */
export function solanaWallet(): SolanaProvider {
  if (window.solana === undefined) {
    throw new Error(
      "No Solana wallet found in this browser. Install one (for example Phantom or Solflare) and reload.",
    );
  }
  return window.solana;
}

/** The connected account of the Ethereum wallet, asking the user to connect if needed. */
export async function ethereumAccount(): Promise<`0x${string}`> {
  const accounts = (await ethereumWallet().request({ method: "eth_requestAccounts" })) as string[];
  if (accounts[0] === undefined) throw new Error("The wallet shared no account.");
  return getAddress(accounts[0]);
}

/**
 * Signs in (or, with `link`, links this wallet to the signed-in account) with Sign-In with
 * Ethereum: a fresh nonce from the core, an EIP-4361 message for this origin, personal_sign.
 */
export async function signInWithEthereum(chains: readonly Chain[], link = false): Promise<SignInResponse> {
  const wallet = ethereumWallet();
  const address = await ethereumAccount();
  const current = Number(BigInt((await wallet.request({ method: "eth_chainId" })) as string));
  return await signInWithSiwe(chains, address, current, link, async (message) => {
    return (await wallet.request({
      method: "personal_sign",
      params: [stringToHex(message), address],
    })) as string;
  });
}

/** Where the dev-mode test wallet keeps its key: this tab only, gone when it closes. */
const TEST_WALLET_KEY = "tollgate.dev-test-wallet.private-key";

/**
 * The dev-mode test wallet: a private key generated in this page and kept in sessionStorage, so
 * it lasts as long as the tab. Anyone who can run script on the page can read it: it signs in to
 * a `tollgate dev` gateway, nothing else, and is never offered by `serve`.
 */
export function testWallet(): PrivateKeyAccount {
  const stored = storedTestWallet();
  if (stored !== undefined) return stored;
  const key = generatePrivateKey();
  sessionStorage.setItem(TEST_WALLET_KEY, key);
  return privateKeyToAccount(key);
}

/** The test wallet this tab already made, if any (the Wallet page labels its address). */
export function storedTestWallet(): PrivateKeyAccount | undefined {
  const key = sessionStorage.getItem(TEST_WALLET_KEY);
  if (key === null || !/^0x[0-9a-f]{64}$/i.test(key)) return undefined;
  return privateKeyToAccount(key as Hex);
}

/** Signs in with the test wallet: the same SIWE message and personal_sign as a browser wallet's. */
export async function signInWithTestWallet(chains: readonly Chain[]): Promise<SignInResponse> {
  const account = testWallet();
  return await signInWithSiwe(chains, account.address, 0, false, (message) =>
    account.signMessage({ message }),
  );
}

/**
 * The EIP-4361 exchange itself: a fresh nonce from the core, a message for this origin on the
 * wallet's chain when the gateway knows it (else its first EVM chain), signed by `sign`.
 */
async function signInWithSiwe(
  chains: readonly Chain[],
  address: `0x${string}`,
  walletChainId: number,
  link: boolean,
  sign: (message: string) => Promise<string>,
): Promise<SignInResponse> {
  const known = chains
    .filter((c) => c.family === ChainFamily.EVM && c.enabled)
    .map((c) => Number(c.evmChainId));
  if (known.length === 0) throw new Error("This gateway has no EVM chain enabled.");
  const chainId = known.includes(walletChainId) ? walletChainId : known[0]!;
  const { nonce } = await auth.createSignInNonce({});
  const now = Date.now();
  const message = createSiweMessage({
    address,
    chainId,
    domain: location.host,
    nonce,
    uri: `${location.origin}/dashboard`,
    version: "1",
    statement: STATEMENT,
    issuedAt: new Date(now),
    expirationTime: new Date(now + MESSAGE_LIFETIME_MS),
  });
  const signature = await sign(message);
  return await auth.signIn({ family: WalletFamily.EVM, message, signature, link });
}

/** The same with a Solana wallet: the EIP-4361 layout for a Solana account, signed as ed25519. */
export async function signInWithSolana(chains: readonly Chain[], link = false): Promise<SignInResponse> {
  const wallet = solanaWallet();
  const chain = chains.find((c) => c.family === ChainFamily.SOLANA && c.enabled);
  if (chain === undefined) throw new Error("This gateway has no Solana chain enabled.");
  const { publicKey } = await wallet.connect();
  const { nonce } = await auth.createSignInNonce({});
  const now = Date.now();
  const message = [
    `${location.host} wants you to sign in with your Solana account:`,
    publicKey.toString(),
    "",
    STATEMENT,
    "",
    `URI: ${location.origin}/dashboard`,
    "Version: 1",
    `Chain ID: ${chain.id}`,
    `Nonce: ${nonce}`,
    `Issued At: ${new Date(now).toISOString()}`,
    `Expiration Time: ${new Date(now + MESSAGE_LIFETIME_MS).toISOString()}`,
  ].join("\n");
  const { signature } = await wallet.signMessage(new TextEncoder().encode(message), "utf8");
  return await auth.signIn({
    family: WalletFamily.SOLANA,
    message,
    signature: btoa(String.fromCharCode(...signature)),
    link,
  });
}
