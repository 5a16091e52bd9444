/**
 * What signing a receipt costs (docs/receipts.md): a settled text call's receipt payload built and
 * signed (JWS, Ed25519 with node:crypto) `N` times on this thread, after a warm-up; the mean in µs.
 * Every non-streaming call pays it once.
 *
 * Usage: node dist/bench/receipt-sign.js [N]
 */
import { generateKeyPairSync } from "node:crypto";
import { defaultChainRegistry } from "../src/core/billing/default-chains.js";
import { ReceiptSigner, receiptPayload } from "../src/core/billing/receipts.js";

const signer = new ReceiptSigner(generateKeyPairSync("ed25519").privateKey);
const chain = defaultChainRegistry().byId.get("base")!;
const now = Date.now();
const state = {
  hold: {
    id: "hold_1",
    seq: 1,
    accountId: "acct_bench",
    requestId: "req_bench",
    keyId: "key_bench",
    chain: "base",
    amount: 2_500n,
    raised: 0n,
    callKind: "text" as const,
    model: "model-haiku-4-5",
    inputTokens: 12n,
    maxTokens: 64n,
    imageSize: "",
    imageCount: 0,
    createdAt: now,
  },
  resolution: {
    holdId: "hold_1",
    status: "settled" as const,
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
    resolvedAt: now,
  },
};
const origin = "https://gw.example";
const once = () => signer.sign(receiptPayload(state, chain, undefined, origin), origin);
const n = Number(process.argv[2] ?? 20_000);
for (let i = 0; i < 1_000; i++) once();
const started = performance.now();
for (let i = 0; i < n; i++) once();
const us = ((performance.now() - started) / n) * 1000;
console.log(JSON.stringify({ receipts: n, meanMicroseconds: Math.round(us * 10) / 10 }));
