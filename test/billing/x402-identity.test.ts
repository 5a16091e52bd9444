import { describe, expect, it } from "vitest";
import { x402Identity } from "../../src/core/billing/x402-identity.js";

// An x402 payment's identity (src/core/billing/x402-identity.ts; issue 29, item 2) is what its
// payer signed, normalised as x402's facilitator reads it (BigInt() on numbers, getAddress() on
// addresses), so no re-encoding of one signed authorisation makes a second payment. The e2e test
// (test/e2e/x402-attacks.test.ts) attacks `upto` over a real chain; this one covers every kind of
// payment the gateway takes — `upto`, `exact` over EIP-3009 and over Permit2, Solana's `exact` —
// and the keys x402 does not define, which are refused.

const BASE = "eip155:8453";
const ARBITRUM = "eip155:42161";
const SOLANA = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";
const PAYER = "0x8ba1f109551bD432803012645Ac136ddd64DBA72";
const TOKEN = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
const SPENDER = "0x4020615294c913F045dc10f0a5cdEbd86c280001";
const TREASURY = "0x1f9090aaE28b8a3dCeaDf281B0F12828e676c326";
const FACILITATOR = "0x71C7656EC7ab88b098defB751B7401B5f6d8976F";
const NONCE = "41538936416813462937432914329423422031287371632943727386429378456";

const idOf = (network: string, scheme: string, payload: unknown, asset = TOKEN): string => {
  const result = x402Identity(network, scheme, payload, asset);
  if (!result.ok) throw new Error(`refused: ${result.problem}`);
  return result.id;
};
const problemOf = (network: string, scheme: string, payload: unknown, asset = TOKEN): string => {
  const result = x402Identity(network, scheme, payload, asset);
  if (result.ok) throw new Error("taken");
  return result.problem;
};

/** A signed Permit2 payload as x402's `upto` (witness with a facilitator) or `exact` client writes it. */
function permit2(scheme: "upto" | "exact") {
  return {
    signature: `0x${"ab".repeat(65)}`,
    permit2Authorization: {
      from: PAYER,
      permitted: { token: TOKEN, amount: "250000" },
      spender: SPENDER,
      nonce: NONCE,
      deadline: "1900000000",
      witness:
        scheme === "upto"
          ? { to: TREASURY, facilitator: FACILITATOR, validAfter: "0" }
          : { to: TREASURY, validAfter: "0" },
    },
  };
}

/** A signed EIP-3009 payload as x402's `exact` client writes it (nonce: bytes32 hex). */
function eip3009(nonce = `0x${"0f".repeat(32)}`) {
  return {
    signature: `0x${"cd".repeat(65)}`,
    authorization: {
      from: PAYER,
      to: TREASURY,
      value: "39000",
      validAfter: "0",
      validBefore: "1900000000",
      nonce,
    },
  };
}

/** A Solana wire transaction: compact-u16 signature count, the 64-byte signatures, the message. */
function solanaWire(signatures: Buffer[], message: Buffer): Buffer {
  return Buffer.concat([Buffer.from([signatures.length]), ...signatures, message]);
}
const MESSAGE = Buffer.from(`80010002${"11".repeat(32)}${"22".repeat(32)}${"33".repeat(32)}01020304`, "hex");

describe("x402Identity: one signed authorisation is one payment, however it is encoded", () => {
  it("upto over Permit2: every re-encoding the facilitator reads alike has the payment's id", () => {
    const signed = permit2("upto");
    const auth = signed.permit2Authorization;
    const id = idOf(BASE, "upto", signed);
    const withAuth = (changed: Partial<typeof auth>) => ({
      ...signed,
      permit2Authorization: { ...auth, ...changed },
    });
    const reEncodings = [
      withAuth({ from: PAYER.toLowerCase() }),
      withAuth({ from: `0x${PAYER.slice(2).toUpperCase()}` }),
      withAuth({ nonce: `0x${BigInt(NONCE).toString(16)}` }),
      withAuth({ nonce: `000${NONCE}` }),
      withAuth({ nonce: `0x000${BigInt(NONCE).toString(16).toUpperCase()}` }),
      withAuth({ permitted: { token: TOKEN.toLowerCase(), amount: "0x3d090" } }),
      withAuth({ deadline: "0x713fb300", spender: SPENDER.toLowerCase() }),
      withAuth({ witness: { to: TREASURY.toLowerCase(), facilitator: FACILITATOR, validAfter: "0x0" } }),
      // Another signature or amount over the same nonce is still that nonce: it pays once.
      { ...withAuth({ permitted: { token: TOKEN, amount: "999999" } }), signature: `0x${"ef".repeat(65)}` },
    ];
    for (const encoded of reEncodings) expect(idOf(BASE, "upto", encoded)).toBe(id);
    expect(x402Identity(BASE, "upto", signed, TOKEN)).toMatchObject({ payer: PAYER.toLowerCase() });
    // Another nonce, another payer, token, network or scheme is another payment.
    expect(idOf(BASE, "upto", withAuth({ nonce: `${BigInt(NONCE) + 1n}` }))).not.toBe(id);
    expect(idOf(BASE, "upto", withAuth({ from: TREASURY }))).not.toBe(id);
    expect(idOf(BASE, "upto", withAuth({ permitted: { token: SPENDER, amount: "250000" } }))).not.toBe(id);
    expect(idOf(ARBITRUM, "upto", signed)).not.toBe(id);
    expect(idOf(BASE, "exact", permit2("exact"))).not.toBe(id);
  });

  it("exact over EIP-3009: the payer, the offer's token and the authorisation's nonce, however written", () => {
    const signed = eip3009();
    const id = idOf(BASE, "exact", signed);
    const nonce = BigInt(signed.authorization.nonce);
    const withAuth = (changed: Partial<typeof signed.authorization>) => ({
      ...signed,
      authorization: { ...signed.authorization, ...changed },
    });
    for (const encoded of [
      withAuth({ from: PAYER.toLowerCase() }),
      withAuth({ nonce: `0x${nonce.toString(16)}` }),
      withAuth({ nonce: `0x${nonce.toString(16).toUpperCase().padStart(64, "0")}` }),
      withAuth({ nonce: `${nonce}` }),
      withAuth({ to: TREASURY.toLowerCase(), value: "0x9858", validBefore: "0x713fb300" }),
      { ...signed, signature: `0x${"ef".repeat(65)}` },
    ]) {
      expect(idOf(BASE, "exact", encoded)).toBe(id);
    }
    // The offer's token is the one an EIP-3009 authorisation is signed for, in any case.
    expect(idOf(BASE, "exact", signed, TOKEN.toLowerCase())).toBe(id);
    expect(idOf(BASE, "exact", signed, SPENDER)).not.toBe(id);
    expect(idOf(BASE, "exact", withAuth({ nonce: `0x${"0e".repeat(32)}` }))).not.toBe(id);
    expect(problemOf(BASE, "exact", withAuth({ nonce: `0x1${"00".repeat(32)}` }))).toMatch(
      /wider than 32 bytes/,
    );
  });

  it("Solana exact: the transaction's message, whatever fills its signature slots or pads its base64", () => {
    const payerSignature = Buffer.alloc(64, 7);
    const unsigned = solanaWire([Buffer.alloc(64), payerSignature], MESSAGE).toString("base64");
    const id = idOf(SOLANA, "exact", { transaction: unsigned });
    // The facilitator fills the fee payer's slot: the same payment.
    const feePaid = solanaWire([Buffer.alloc(64, 9), payerSignature], MESSAGE).toString("base64");
    expect(idOf(SOLANA, "exact", { transaction: feePaid })).toBe(id);
    expect(idOf(SOLANA, "exact", { transaction: unsigned.replace(/=+$/, "") })).toBe(id);
    // Another blockhash or transfer (any byte of the message) is another payment.
    const other = Buffer.from(MESSAGE);
    other.writeUInt8(other.readUInt8(other.length - 1) ^ 1, other.length - 1);
    expect(
      idOf(SOLANA, "exact", { transaction: solanaWire([payerSignature], other).toString("base64") }),
    ).not.toBe(id);
    expect(problemOf(SOLANA, "exact", { transaction: Buffer.from([0]).toString("base64") })).toMatch(
      /not a transaction/,
    );
    expect(problemOf(SOLANA, "upto", { transaction: unsigned })).toMatch(/no "upto" payments/);
  });
});

describe("x402Identity: a key x402 does not define is refused (402 X402_PAYMENT_INVALID)", () => {
  it.each([
    ["upto payload", BASE, "upto", { ...permit2("upto"), x: 1 }],
    [
      "upto permit2Authorization",
      BASE,
      "upto",
      { ...permit2("upto"), permit2Authorization: { ...permit2("upto").permit2Authorization, extra: "1" } },
    ],
    [
      "upto permitted",
      BASE,
      "upto",
      {
        ...permit2("upto"),
        permit2Authorization: {
          ...permit2("upto").permit2Authorization,
          permitted: { token: TOKEN, amount: "1", decimals: 6 },
        },
      },
    ],
    [
      "exact witness (no facilitator in exact's witness)",
      BASE,
      "exact",
      {
        ...permit2("exact"),
        permit2Authorization: {
          ...permit2("exact").permit2Authorization,
          witness: { to: TREASURY, facilitator: FACILITATOR, validAfter: "0" },
        },
      },
    ],
    ["EIP-3009 payload", BASE, "exact", { ...eip3009(), memo: "hi" }],
    [
      "EIP-3009 authorization",
      BASE,
      "exact",
      { ...eip3009(), authorization: { ...eip3009().authorization, chainId: "8453" } },
    ],
    [
      "Solana payload",
      SOLANA,
      "exact",
      { transaction: solanaWire([Buffer.alloc(64)], MESSAGE).toString("base64"), x: 1 },
    ],
  ])("in the %s", (_where, network, scheme, payload) => {
    expect(problemOf(network, scheme, payload)).toMatch(/has a key x402 does not define/);
  });

  it.each([
    ["a decimal point", "1.0"],
    ["a sign", "-1"],
    ["spaces (BigInt would trim them)", ` ${NONCE} `],
    ["an octal prefix (BigInt would read it)", "0o17"],
    ["an exponent", "1e3"],
  ])("refuses a nonce written with %s: only a plain decimal or 0x-hex integer is one", (_what, nonce) => {
    const signed = permit2("upto");
    expect(
      problemOf(BASE, "upto", { ...signed, permit2Authorization: { ...signed.permit2Authorization, nonce } }),
    ).toMatch(/not a whole number/);
  });
});
