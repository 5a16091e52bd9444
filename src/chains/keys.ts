import { createHmac } from "node:crypto";
import type { ChainFamily } from "../core/billing/chain-registry.js";

/**
 * The 32-byte seed of an account's deposit key on a chain family:
 * HMAC-SHA256(master secret, `tollgate/<family>/deposit/<accountId>`). EVM uses it as the
 * secp256k1 private key; Solana as `Keypair.fromSeed`. Re-derived on demand, never stored.
 */
export function depositSeed(masterSecret: Uint8Array, family: ChainFamily, accountId: string): Uint8Array {
  return hmac(masterSecret, `tollgate/${family}/deposit/${accountId}`);
}

/** The 32-byte seed of the treasury key on a chain family: HMAC-SHA256(master, `tollgate/<family>/treasury`). */
export function treasurySeed(masterSecret: Uint8Array, family: ChainFamily): Uint8Array {
  return hmac(masterSecret, `tollgate/${family}/treasury`);
}

/**
 * The 32-byte seed of the x402 facilitator's key on a chain family: HMAC-SHA256(master,
 * `tollgate/<family>/x402-facilitator`). It sends the transactions that collect x402 payments
 * (on Solana: pays their fees as fee payer); a key apart from the treasury's keeps its nonces
 * and fees out of the settlement worker's way.
 */
export function x402FacilitatorSeed(masterSecret: Uint8Array, family: ChainFamily): Uint8Array {
  return hmac(masterSecret, `tollgate/${family}/x402-facilitator`);
}

function hmac(key: Uint8Array, message: string): Uint8Array {
  return new Uint8Array(createHmac("sha256", key).update(message, "utf8").digest());
}
