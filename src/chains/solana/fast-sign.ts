import { createPrivateKey, type KeyObject, sign } from "node:crypto";
import type { Keypair, Transaction } from "@solana/web3.js";

/** PKCS#8 DER prefix of an Ed25519 private key; the 32-byte seed follows it. */
const ED25519_PKCS8_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");
const keyObjects = new WeakMap<Keypair, KeyObject>();

/** A signed transaction in wire format, and its first signature (its id). */
export interface SignedWire {
  readonly wire: Buffer;
  readonly signature: Buffer;
}

/**
 * Signs a legacy transaction with every required signer and serialises it — the bytes
 * `Transaction.sign` + `serialize` produce (Ed25519 is deterministic), ~40× faster: Node's
 * native Ed25519 instead of web3.js's pure-JS one, the message compiled once instead of once
 * per step, and no JS re-verification of signatures just made (every node verifies them).
 * Signing is most of a transfer's CPU cost. Throws when a required signer is missing.
 */
export function signAndSerialize(tx: Transaction, signers: readonly Keypair[]): SignedWire {
  const message = tx.compileMessage();
  const bytes = message.serialize();
  const required = message.accountKeys.slice(0, message.header.numRequiredSignatures);
  const signatures = required.map((key) => {
    const signer = signers.find((s) => s.publicKey.equals(key));
    if (signer === undefined) throw new Error(`missing signature of ${key.toBase58()}`);
    return sign(null, bytes, keyObject(signer));
  });
  // Wire format: compact-u16 signature count (one byte below 128), the signatures, the message.
  if (signatures.length >= 0x80) throw new Error("too many signatures");
  const wire = Buffer.concat([Buffer.from([signatures.length]), ...signatures, bytes]);
  return { wire, signature: signatures[0]! };
}

function keyObject(signer: Keypair): KeyObject {
  let key = keyObjects.get(signer);
  if (key === undefined) {
    key = createPrivateKey({
      key: Buffer.concat([ED25519_PKCS8_PREFIX, signer.secretKey.subarray(0, 32)]),
      format: "der",
      type: "pkcs8",
    });
    keyObjects.set(signer, key);
  }
  return key;
}
