import { createHmac } from "node:crypto";
import { Keypair } from "@solana/web3.js";

/**
 * The 32-byte seed of a derived key: HMAC-SHA256(master secret, label). The labels are the
 * contract shared by both chain families (`tollgate/<family>/deposit/<accountId>`,
 * `tollgate/<family>/treasury`), so keys can always be re-derived and are never stored.
 */
export function derivedSeed(masterSecret: Uint8Array, label: string): Buffer {
  return createHmac("sha256", masterSecret).update(label, "utf8").digest();
}

/** An account's Solana deposit key: `Keypair.fromSeed` of its derived seed. */
export function solanaDepositKeypair(masterSecret: Uint8Array, accountId: string): Keypair {
  return Keypair.fromSeed(derivedSeed(masterSecret, `tollgate/solana/deposit/${accountId}`));
}

/** The Solana treasury key: it receives settlements and pays every fee. */
export function solanaTreasuryKeypair(masterSecret: Uint8Array): Keypair {
  return Keypair.fromSeed(derivedSeed(masterSecret, "tollgate/solana/treasury"));
}
