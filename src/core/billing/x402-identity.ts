import { createHash } from "node:crypto";

/**
 * An x402 payment's identity: what its payer signed, not the bytes it was sent as. x402's
 * facilitator ignores keys it does not know and normalises what it reads (`BigInt()` on numbers,
 * `getAddress()` on addresses), so the same signed authorisation can be re-encoded many ways and
 * still verify: an extra key, a hex nonce, a lower-case address. The identity is therefore built
 * from the signed fields, normalised the way the facilitator reads them, and a payload with a key
 * the scheme does not define is refused outright.
 *
 * - EVM `upto` and `exact` over Permit2: network, scheme, payer, token and the Permit2 nonce
 *   (Permit2's nonces are the payer's, whatever the token; a nonce pays once onchain).
 * - EVM `exact` over EIP-3009: network, scheme, payer, token and the authorisation's nonce.
 * - Solana `exact`: network, scheme and the transaction's message — what every signature of it
 *   signs (its blockhash and transfer included); the signatures themselves are left out, so a
 *   fee payer's slot filled in or left empty changes nothing.
 */

/** A payment's identity, or why the payload is not one the scheme defines. */
export type X402IdentityResult =
  | {
      readonly ok: true;
      /** The payment id: SHA-256 over {@link text}, hex, 40 digits (the store's primary key). */
      readonly id: string;
      /** The identity as text: network, scheme, method, then the signed fields, normalised. */
      readonly text: string;
      /** The payer the payload names (EVM: lower-case address), when the payload names one. */
      readonly payer: string | undefined;
    }
  | { readonly ok: false; readonly problem: string };

/**
 * The identity of `payload` (the payment's `payload` member) offered on `network` with `scheme`
 * for `asset` (the offer's token: what an EIP-3009 authorisation is signed for).
 */
export function x402Identity(
  network: string,
  scheme: string,
  payload: unknown,
  asset: string,
): X402IdentityResult {
  try {
    const fields = network.startsWith("solana:")
      ? svmFields(scheme, payload)
      : evmFields(scheme, payload, asset);
    const text = [network, scheme, ...fields.signed].join("\u0000");
    const id = createHash("sha256").update(text).digest("hex").slice(0, 40);
    return { ok: true, id, text, payer: fields.payer };
  } catch (error) {
    if (error instanceof ShapeError) return { ok: false, problem: error.message };
    throw error;
  }
}

class ShapeError extends Error {}

interface SignedFields {
  readonly signed: readonly string[];
  readonly payer: string | undefined;
}

function evmFields(scheme: string, payload: unknown, asset: string): SignedFields {
  const p = record(payload, "payload");
  if ("permit2Authorization" in p) {
    only(p, "payload", ["signature", "permit2Authorization"]);
    hex(p.signature, "payload.signature");
    const auth = record(p.permit2Authorization, "permit2Authorization");
    only(auth, "permit2Authorization", ["from", "permitted", "spender", "nonce", "deadline", "witness"]);
    const permitted = record(auth.permitted, "permit2Authorization.permitted");
    only(permitted, "permit2Authorization.permitted", ["token", "amount"]);
    integer(permitted.amount, "permit2Authorization.permitted.amount");
    address(auth.spender, "permit2Authorization.spender");
    integer(auth.deadline, "permit2Authorization.deadline");
    const witness = record(auth.witness, "permit2Authorization.witness");
    only(
      witness,
      "permit2Authorization.witness",
      scheme === "upto" ? ["to", "facilitator", "validAfter"] : ["to", "validAfter"],
    );
    address(witness.to, "permit2Authorization.witness.to");
    if (scheme === "upto") address(witness.facilitator, "permit2Authorization.witness.facilitator");
    integer(witness.validAfter, "permit2Authorization.witness.validAfter");
    const payer = address(auth.from, "permit2Authorization.from");
    const token = address(permitted.token, "permit2Authorization.permitted.token");
    const nonce = integer(auth.nonce, "permit2Authorization.nonce");
    return { signed: ["permit2", payer, token, `${nonce}`], payer };
  }
  if (scheme !== "exact") throw new ShapeError(`an "${scheme}" payment carries a permit2Authorization`);
  only(p, "payload", ["signature", "authorization"]);
  if (p.signature !== undefined) hex(p.signature, "payload.signature");
  const auth = record(p.authorization, "authorization");
  only(auth, "authorization", ["from", "to", "value", "validAfter", "validBefore", "nonce"]);
  address(auth.to, "authorization.to");
  integer(auth.value, "authorization.value");
  integer(auth.validAfter, "authorization.validAfter");
  integer(auth.validBefore, "authorization.validBefore");
  const payer = address(auth.from, "authorization.from");
  // EIP-3009's nonce is a bytes32, read by the contract as a number of 256 bits.
  const nonce = integer(auth.nonce, "authorization.nonce");
  if (nonce >= 1n << 256n) throw new ShapeError("authorization.nonce is wider than 32 bytes");
  return { signed: ["eip3009", payer, asset.toLowerCase(), `${nonce}`], payer };
}

function svmFields(scheme: string, payload: unknown): SignedFields {
  if (scheme !== "exact") throw new ShapeError(`no "${scheme}" payments are taken on Solana`);
  const p = record(payload, "payload");
  only(p, "payload", ["transaction"]);
  if (typeof p.transaction !== "string" || !/^[A-Za-z0-9+/]+={0,2}$/.test(p.transaction)) {
    throw new ShapeError("payload.transaction is not a base64 transaction");
  }
  const message = transactionMessage(Buffer.from(p.transaction, "base64"));
  return { signed: ["svm", createHash("sha256").update(message).digest("hex")], payer: undefined };
}

/**
 * The message of a Solana wire transaction: after a compact-u16 count of signatures and that
 * many 64-byte signatures. What each signer signed, so what identifies the payment.
 */
function transactionMessage(wire: Buffer): Buffer {
  let count = 0;
  let offset = 0;
  for (let shift = 0; ; shift += 7) {
    const byte = wire[offset++];
    if (byte === undefined || shift > 14) throw new ShapeError("payload.transaction is not a transaction");
    count |= (byte & 0x7f) << shift;
    if ((byte & 0x80) === 0) break;
  }
  const start = offset + count * 64;
  if (count === 0 || start >= wire.length) throw new ShapeError("payload.transaction is not a transaction");
  return wire.subarray(start);
}

function record(value: unknown, name: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new ShapeError(`${name} is not an object`);
  }
  return value as Record<string, unknown>;
}

/** Refuses a key `allowed` does not list: the facilitator would ignore it, so it could only re-encode. */
function only(value: Record<string, unknown>, name: string, allowed: readonly string[]): void {
  for (const key of Object.keys(value)) {
    if (!allowed.includes(key))
      throw new ShapeError(`${name} has a key x402 does not define: ${JSON.stringify(key)}`);
  }
}

/** An EVM address, in lower case (the facilitator reads any case through getAddress). */
function address(value: unknown, name: string): string {
  if (typeof value !== "string" || !/^0x[0-9a-fA-F]{40}$/.test(value)) {
    throw new ShapeError(`${name} is not an address`);
  }
  return value.toLowerCase();
}

/** A non-negative integer written as the facilitator's BigInt() reads it (decimal or 0x hex). */
function integer(value: unknown, name: string): bigint {
  if (typeof value !== "string" || !/^(?:\d+|0x[0-9a-fA-F]+)$/.test(value)) {
    throw new ShapeError(`${name} is not a whole number`);
  }
  return BigInt(value);
}

function hex(value: unknown, name: string): void {
  if (typeof value !== "string" || !/^0x[0-9a-fA-F]*$/.test(value))
    throw new ShapeError(`${name} is not hex`);
}
