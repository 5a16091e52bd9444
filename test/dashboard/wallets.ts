import { generateKeyPairSync, sign } from "node:crypto";
import { PublicKey } from "@solana/web3.js";
import { generatePrivateKey, type PrivateKeyAccount, privateKeyToAccount } from "viem/accounts";
import { createSiweMessage } from "viem/siwe";

/** A test EVM wallet: a viem local account with a fresh key. */
export function evmWallet(): PrivateKeyAccount {
  return privateKeyToAccount(generatePrivateKey());
}

/** A test Solana wallet: a fresh ed25519 key pair, its base58 address, and a signer. */
export interface SolanaTestWallet {
  readonly address: string;
  signMessage(message: Uint8Array): Uint8Array;
}

/** Generates a Solana wallet with Node's ed25519. */
export function solanaWallet(): SolanaTestWallet {
  const { publicKey, privateKey } = generateKeyPairSync("ed25519");
  const raw = publicKey.export({ format: "der", type: "spki" }).subarray(-32);
  return {
    address: new PublicKey(raw).toBase58(),
    signMessage: (message) => new Uint8Array(sign(null, message, privateKey)),
  };
}

/** Fields of a sign-in message a test may change. */
export interface MessageFields {
  readonly domain: string;
  readonly origin: string;
  readonly nonce: string;
  readonly chainId?: number | string;
  readonly issuedAt?: Date;
  readonly expirationTime?: Date;
}

/** An EIP-4361 message, as the dashboard builds it. */
export function siweMessage(address: `0x${string}`, f: MessageFields): string {
  return createSiweMessage({
    address,
    chainId: Number(f.chainId ?? 8453),
    domain: f.domain,
    nonce: f.nonce,
    uri: `${f.origin}/dashboard`,
    version: "1",
    statement: "Sign in to the Tollgate dashboard.",
    issuedAt: f.issuedAt ?? new Date(),
    expirationTime: f.expirationTime,
  });
}

/** The Solana sign-in message, as the dashboard builds it. */
export function solanaMessage(address: string, f: MessageFields): string {
  return [
    `${f.domain} wants you to sign in with your Solana account:`,
    address,
    "",
    "Sign in to the Tollgate dashboard.",
    "",
    `URI: ${f.origin}/dashboard`,
    "Version: 1",
    `Chain ID: ${f.chainId ?? "solana"}`,
    `Nonce: ${f.nonce}`,
    `Issued At: ${(f.issuedAt ?? new Date()).toISOString()}`,
    ...(f.expirationTime === undefined ? [] : [`Expiration Time: ${f.expirationTime.toISOString()}`]),
  ].join("\n");
}
