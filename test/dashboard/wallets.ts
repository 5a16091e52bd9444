import { createPrivateKey, sign } from "node:crypto";
import { Keypair, Transaction } from "@solana/web3.js";
import { generatePrivateKey, type PrivateKeyAccount, privateKeyToAccount } from "viem/accounts";
import { createSiweMessage } from "viem/siwe";

/** A test EVM wallet: a viem local account with a fresh key. */
export function evmWallet(): PrivateKeyAccount {
  return privateKeyToAccount(generatePrivateKey());
}

/** A test Solana wallet: a fresh key pair, its base58 address, a message signer and a transaction signer. */
export interface SolanaTestWallet {
  readonly address: string;
  signMessage(message: Uint8Array): Uint8Array;
  /** Signs a serialized transaction (as the page hands it over) and returns it serialized. */
  signTransaction(serialized: Uint8Array): Uint8Array;
}

// DER prefix of an Ed25519 PKCS#8 private key; the 32-byte seed follows it.
const ED25519_PKCS8_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");

/** Generates a Solana wallet (web3.js Keypair), signing messages with Node's ed25519. */
export function solanaWallet(): SolanaTestWallet {
  const keypair = Keypair.generate();
  const privateKey = createPrivateKey({
    key: Buffer.concat([ED25519_PKCS8_PREFIX, keypair.secretKey.subarray(0, 32)]),
    format: "der",
    type: "pkcs8",
  });
  return {
    address: keypair.publicKey.toBase58(),
    signMessage: (message) => new Uint8Array(sign(null, message, privateKey)),
    signTransaction: (serialized) => {
      const transaction = Transaction.from(serialized);
      transaction.partialSign(keypair);
      return transaction.serialize();
    },
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
