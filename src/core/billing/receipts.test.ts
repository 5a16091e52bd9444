import { createPublicKey, generateKeyPairSync, verify } from "node:crypto";
import { ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { errorInfo } from "../errors.js";
import type { HoldState, SettlementView } from "../ports/ledger.js";
import { defaultChainRegistry } from "./default-chains.js";
import { ReceiptSigner, Receipts, receiptKeyFromMasterSecret } from "./receipts.js";

const chains = defaultChainRegistry();
const HOLD = {
  id: "hold_1",
  seq: 1,
  accountId: "acct_a",
  requestId: "req_1",
  keyId: "key_1",
  chain: "solana",
  amount: 2_500n,
  raised: 0n,
  callKind: "text" as const,
  model: "model-haiku-4-5",
  inputTokens: 12n,
  maxTokens: 64n,
  imageSize: "",
  imageCount: 0,
  createdAt: 1_700_000_000_000,
};
const SETTLED: HoldState = {
  hold: HOLD,
  resolution: {
    holdId: "hold_1",
    status: "settled",
    amount: 162n,
    usage: {
      inputTokens: 12n,
      outputTokens: 30n,
      cacheWrite5mTokens: 0n,
      cacheWrite1hTokens: 0n,
      cacheReadTokens: 0n,
      images: 0,
    },
    charges: "",
    resolvedAt: 1_700_000_001_900,
  },
};

function receipts(state: HoldState | undefined, settlement?: SettlementView, publicOrigin?: string) {
  const signer = new ReceiptSigner(generateKeyPairSync("ed25519").privateKey);
  return {
    signer,
    receipts: new Receipts(
      signer,
      {
        call: async (accountId, requestId) =>
          state?.hold.accountId === accountId && state.hold.requestId === requestId ? state : undefined,
        chainConfig: (id) => chains.byId.get(id),
        settlements: async () => new Map(settlement === undefined ? [] : [["hold_1", settlement]]),
        x402Payments: async () => new Map(),
        raises: async () => [],
      },
      publicOrigin,
    ),
  };
}

function parts(jws: string) {
  const [header, payload, signature] = jws.split(".") as [string, string, string];
  return {
    header: JSON.parse(Buffer.from(header, "base64url").toString()) as Record<string, string>,
    payload: JSON.parse(Buffer.from(payload, "base64url").toString()) as Record<string, unknown>,
    signed: Buffer.from(`${header}.${payload}`),
    signature: Buffer.from(signature, "base64url"),
  };
}

async function reason(promise: Promise<unknown>): Promise<string | undefined> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  return error instanceof ConnectError ? errorInfo(error)?.reason : undefined;
}

describe("receipts", () => {
  it("sign a settled call with its confirmed transaction, verifiable by the published key", async () => {
    const settlement: SettlementView = {
      holdId: "hold_1",
      status: "confirmed",
      onchainAmount: 100n,
      offchainAmount: 62n,
      transferId: "tr_1",
      txHash: "5sig",
    };
    const { signer, receipts: r } = receipts(SETTLED, settlement);
    const jws = await r.forCall("acct_a", "req_1", "http://127.0.0.1:8787");
    const { header, payload, signed, signature } = parts(jws);
    expect(header).toEqual({
      alg: "EdDSA",
      kid: `did:web:127.0.0.1%3A8787#${signer.jwk.kid}`,
      typ: "x402-receipt+jws",
    });
    const key = createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: signer.jwk.x }, format: "jwk" });
    expect(verify(null, signed, key, signature)).toBe(true);
    expect(payload).toEqual({
      network: "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp",
      resourceUrl: "http://127.0.0.1:8787/v1/messages",
      payer: "acct_a",
      issuedAt: 1_700_000_001,
      transaction: "5sig",
      requestId: "req_1",
      accountId: "acct_a",
      keyId: "key_1",
      model: "model-haiku-4-5",
      chain: "solana",
      status: "settled",
      charge: {
        amount: "162",
        decimal: "0.000162",
        asset: { symbol: "USDC", decimals: 6, address: "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v" },
      },
      held: "2500",
      usage: {
        inputTokens: "12",
        outputTokens: "30",
        cacheWrite5mTokens: "0",
        cacheWrite1hTokens: "0",
        cacheReadTokens: "0",
        images: "0",
      },
      settlement: { status: "confirmed", onchainAmount: "100", offchainAmount: "62", transaction: "5sig" },
    });
    // Deterministic: the same state signs to the same receipt.
    expect(await r.forCall("acct_a", "req_1", "http://127.0.0.1:8787")).toBe(jws);
  });

  it("name no transaction before the settlement confirmed, and the configured origin over the facade's", async () => {
    const queued: SettlementView = {
      holdId: "hold_1",
      status: "submitted",
      onchainAmount: 162n,
      offchainAmount: 0n,
      transferId: "tr_1",
      txHash: "5pending",
    };
    const { receipts: r } = receipts(SETTLED, queued, "https://gw.example");
    const { header, payload } = parts(await r.forCall("acct_a", "req_1", "http://evil.example"));
    expect(header.kid).toMatch(/^did:web:gw\.example#/);
    expect(payload.resourceUrl).toBe("https://gw.example/v1/messages");
    expect(payload).not.toHaveProperty("transaction");
    expect(payload.settlement).toEqual({
      status: "submitted",
      onchainAmount: "162",
      offchainAmount: "0",
      transaction: "5pending",
    });
  });

  it("refuse a call of another account, an unknown one, and one still running", async () => {
    expect(await reason(receipts(SETTLED).receipts.forCall("acct_b", "req_1", undefined))).toBe(
      "RECEIPT_NOT_FOUND",
    );
    expect(await reason(receipts(SETTLED).receipts.forCall("acct_a", "req_2", undefined))).toBe(
      "RECEIPT_NOT_FOUND",
    );
    const running = { hold: HOLD, resolution: undefined };
    expect(await reason(receipts(running).receipts.forCall("acct_a", "req_1", undefined))).toBe(
      "RECEIPT_PENDING",
    );
  });

  it("derive one key from a master secret, and a different one from another", () => {
    const jwk = (secret: number) =>
      new ReceiptSigner(receiptKeyFromMasterSecret(new Uint8Array(32).fill(secret))).jwk;
    expect(jwk(7)).toEqual(jwk(7));
    expect(jwk(7).x).not.toBe(jwk(8).x);
    // RFC 7638 thumbprint: base64url of a SHA-256.
    expect(jwk(7).kid).toMatch(/^[\w-]{43}$/);
  });
});
