import type { ConnectError } from "@connectrpc/connect";
import { afterEach, describe, expect, it, vi } from "vitest";
import {
  type ChainConfig,
  chainRegistry,
  defaultWithdrawalTerms,
} from "../../src/core/billing/chain-registry.js";
import { type X402Authorisation, X402Payments } from "../../src/core/billing/x402.js";
import { ZERO_USAGE } from "../../src/core/ports/ledger.js";
import type { Log } from "../../src/core/ports/log.js";
import type {
  X402Gateway,
  X402Offer,
  X402OnchainState,
  X402PaymentPayload,
  X402Settlement,
} from "../../src/core/ports/x402.js";
import { AuthRepository } from "../../src/store/sqlite/accounts.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { openSqliteLedger, type SqliteLedger } from "../../src/store/sqlite/ledger-store.js";
import { tempDir } from "../helpers/process.js";

// An x402 collection that may have reached the chain is never ended without the chain's word
// (src/core/billing/x402.ts; docs/x402.md, "After a crash"). The facilitator and the chain are
// fakes that answer as the test says; the store is the real SQLite ledger, audited after each
// test. What the real chains answer is test/chains/x402-onchain.test.ts's; the same through a
// kill -9, test/e2e/x402-crash.test.ts's.

const CHAIN: ChainConfig = {
  id: "base",
  family: "evm",
  chainId: 8453,
  network: "eip155:8453",
  asset: { symbol: "USDC", decimals: 6, address: "0x00000000000000000000000000000000000000aa" },
  rpcUrl: "http://127.0.0.1:1",
  finality: { confirmations: 1 },
  enabled: true,
  withdrawal: defaultWithdrawalTerms("evm", 6),
};
const PAY_TO = "0x00000000000000000000000000000000000000bb";
const MAX_CALL_MS = 3_000;
const ACCOUNT = "acct_x402_0xpayer";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** What the fakes answer, set by each test. */
interface Script {
  settle: X402Settlement;
  onchain: X402OnchainState | Error;
}

async function rig() {
  const dir = tempDir();
  const db = openDatabase(dir.path);
  const store: SqliteLedger = await openSqliteLedger(db, dir.path, { thread: false });
  cleanups.push(async () => {
    await store.close();
    db.close();
    dir.cleanup();
  });
  const accounts = new AuthRepository(db);
  await accounts.insertAccount(ACCOUNT, "x402 payer", 1);
  let now = 1_000_000;
  const script: Script = {
    settle: { success: true, transaction: "0xcollected", network: CHAIN.network },
    onchain: { kind: "usable" },
  };
  const settle = vi.fn(async () => script.settle);
  const lookUp = vi.fn(async () => {
    if (script.onchain instanceof Error) throw script.onchain;
    return script.onchain;
  });
  const gateway: X402Gateway = {
    initialize: async () => {},
    offer: async (request) => ({ ...request, amount: "1" }),
    paymentRequiredHeader: () => "required",
    decodePayment: () => {
      throw new Error("not used here");
    },
    matches: () => true,
    verify: async () => ({ isValid: true }),
    settle,
    paymentResponseHeader: (settlement) => JSON.stringify(settlement),
  };
  const logged: string[] = [];
  const log: Log = {
    error: (_f, message) => logged.push(message),
    warn: (_f, message) => logged.push(message),
    info: () => {},
  };
  const payments = await X402Payments.create({
    store,
    ledger: store,
    accounts,
    registry: chainRegistry([CHAIN], "base"),
    gateway,
    onchain: { collection: lookUp },
    chains: [{ chain: "base", payTo: PAY_TO, extra: {}, schemes: ["exact", "upto"] }],
    maxTimeoutSeconds: 303,
    maxCallMs: MAX_CALL_MS,
    publicOrigin: undefined,
    now: () => now,
    log,
  });
  let n = 0;
  /** A payment of `authorised`, credited, its call held for `held`, as the call's path leaves it. */
  const paid = async (
    scheme: "exact" | "upto",
    authorised: bigint,
    held: bigint,
  ): Promise<X402Authorisation> => {
    const id = `pay_${++n}`;
    const requirements: X402Offer = {
      scheme,
      network: CHAIN.network,
      asset: CHAIN.asset.address,
      amount: `${authorised}`,
      payTo: PAY_TO,
      maxTimeoutSeconds: 303,
      extra: {},
    };
    const payload: X402PaymentPayload = { x402Version: 2, accepted: requirements, payload: { n } };
    const holdId = `hold_${n}`;
    expect(
      await store.authoriseX402({
        id,
        holdId,
        accountId: ACCOUNT,
        chain: "base",
        scheme,
        payer: "0xpayer",
        authorised,
        payload: JSON.stringify(payload),
        createdAt: now,
      }),
    ).toBe("authorised");
    const placed = await store.placeHold({
      id: holdId,
      accountId: ACCOUNT,
      requestId: `req_${n}`,
      keyId: "",
      chain: "base",
      amount: held,
      callKind: scheme === "exact" ? "image" : "text",
      model: "m",
      inputTokens: 1n,
      maxTokens: 1n,
      imageSize: "",
      imageCount: scheme === "exact" ? 1 : 0,
      createdAt: now,
    });
    expect(placed.kind).toBe("placed");
    return {
      id,
      accountId: ACCOUNT,
      chain: CHAIN,
      scheme,
      payer: "0xpayer",
      authorised,
      createdAt: now,
      payload,
      requirements,
    };
  };
  return {
    store,
    payments,
    script,
    settle,
    lookUp,
    logged,
    paid,
    /** The gateway's clock. */
    now: () => now,
    /** The clock moves on by `ms`. */
    later: (ms: number) => {
      now += ms;
    },
    release: (holdId: string) => store.void(holdId, "released", now),
    audit: () => auditLedger(db),
  };
}

/** A crash: the collection was begun (marked) and nothing after it was written. */
async function crashedWhileCollecting(r: Awaited<ReturnType<typeof rig>>, payment: X402Authorisation) {
  expect(await r.store.markX402Collecting(payment.id, r.now())).toBe("marked");
}

describe("an x402 collection that may have reached the chain", () => {
  it("is marked begun before the facilitator is asked; a payment that cannot be marked is not collected", async () => {
    const r = await rig();
    const image = await r.paid("exact", 39_000n, 39_000n);
    r.settle.mockImplementationOnce(async () => {
      // The mark is durable before the chain is asked.
      expect((await r.store.x402Payment(image.id))?.collectingAt).toBeDefined();
      return r.script.settle;
    });
    await r.payments.collectBeforeDelivery(image, 39_000n, () => r.release("hold_1"));
    expect(await r.store.x402Payment(image.id)).toMatchObject({ status: "collected", txHash: "0xcollected" });
    // Closed meanwhile (a recovery pass on another host, say): nothing is sent.
    const other = await r.paid("exact", 39_000n, 39_000n);
    await r.release("hold_2");
    await r.payments.close(other, 0n, undefined);
    await expect(r.payments.collectBeforeDelivery(other, 39_000n, async () => {})).rejects.toThrow(
      /cannot begin \(not-authorised\)/,
    );
    expect(r.settle).toHaveBeenCalledTimes(1);
    expect((await r.store.settle("hold_1", 39_000n, ZERO_USAGE, 2, "")).kind).toBe("resolved");
    await r.payments.close(image, 39_000n, r.script.settle);
    expect(r.audit()).toEqual([]);
  });

  it("left by a crash and found onchain, is recorded with its transaction and charged once", async () => {
    const r = await rig();
    const text = await r.paid("upto", 500_000n, 400_000n);
    await crashedWhileCollecting(r, text);
    r.later(MAX_CALL_MS + 1);
    // The sweeper leaves its hold: the chain may have taken it.
    expect(await r.store.expireHolds(Number.MAX_SAFE_INTEGER, 2, 10)).toBe(0);
    r.script.onchain = { kind: "used", transaction: "0xfound", collected: 123_456n };
    expect(await r.payments.recover()).toBe(1);
    expect(await r.store.x402Payment(text.id)).toMatchObject({
      status: "settled",
      settled: 123_456n,
      txHash: "0xfound",
    });
    expect((await r.store.getHold("hold_1"))?.resolution).toMatchObject({
      status: "settled",
      amount: 123_456n,
    });
    expect(r.settle).not.toHaveBeenCalled();
    expect(r.audit()).toEqual([]);
  });

  it("is not asked about while it may still be running, nor ended while the chain could still take it, nor when the chain cannot say", async () => {
    const r = await rig();
    const image = await r.paid("exact", 39_000n, 39_000n);
    r.later(MAX_CALL_MS + 1);
    // Begun just now: the collection may still be running in this process.
    expect(await r.store.markX402Collecting(image.id, 1_000_000 + MAX_CALL_MS)).toBe("marked");
    expect(await r.payments.recover()).toBe(0);
    expect(r.lookUp).not.toHaveBeenCalled();
    r.later(MAX_CALL_MS + 1);
    for (const answer of [
      { kind: "usable" } as const,
      {
        kind: "unknown",
        reason: "its authorisation is spent, but no AuthorizationUsed log was found",
      } as const,
      new Error("connect ECONNREFUSED"),
    ]) {
      r.script.onchain = answer;
      expect(await r.payments.recover()).toBe(0);
      expect(await r.store.x402Payment(image.id)).toMatchObject({ status: "authorised" });
      expect((await r.store.getHold("hold_1"))?.resolution).toBeUndefined();
    }
    expect(r.logged.filter((m) => /cannot be told collected or not/.test(m))).toHaveLength(2);
    // Unused for good (its authorisation expired): the hold expires, the payment closes unused.
    r.script.onchain = { kind: "unused", reason: "its authorisation expired unused" };
    expect(await r.payments.recover()).toBe(1);
    expect(await r.store.x402Payment(image.id)).toMatchObject({ status: "unused", settled: 0n });
    expect((await r.store.getHold("hold_1"))?.resolution).toMatchObject({ status: "expired", amount: 0n });
    expect(r.settle).not.toHaveBeenCalled();
    expect(r.audit()).toEqual([]);
  });

  it("a stream's collection retried after a crash, its permit spent by the first: settled with the first's transaction, not failed", async () => {
    const r = await rig();
    const stream = await r.paid("upto", 500_000n, 400_000n);
    expect((await r.store.settle("hold_1", 77_000n, ZERO_USAGE, 2, "")).kind).toBe("resolved");
    await crashedWhileCollecting(r, stream);
    r.later(MAX_CALL_MS + 1);
    // The chain still could take it, so the pass collects the charge again; the chain refuses
    // (the first collection spent the permit meanwhile) and then shows the first.
    r.script.onchain = { kind: "usable" };
    r.settle.mockImplementationOnce(async () => {
      r.script.onchain = { kind: "used", transaction: "0xfirst", collected: 77_000n };
      return {
        success: false,
        transaction: "",
        network: CHAIN.network,
        errorReason: "permit2_invalid_nonce",
      };
    });
    expect(await r.payments.recover()).toBe(1);
    expect(await r.store.x402Payment(stream.id)).toMatchObject({
      status: "settled",
      settled: 77_000n,
      txHash: "0xfirst",
    });
    expect(await r.store.failedX402Payments("0xpayer", 10)).toEqual([]);
    expect(r.audit()).toEqual([]);
  });

  it("a stream whose collection the chain refuses, its authorisation unused, is failed and its payer owes (as before)", async () => {
    const r = await rig();
    const stream = await r.paid("upto", 500_000n, 400_000n);
    expect((await r.store.settle("hold_1", 77_000n, ZERO_USAGE, 2, "")).kind).toBe("resolved");
    r.script.settle = {
      success: false,
      transaction: "",
      network: CHAIN.network,
      errorReason: "insufficient_funds",
    };
    r.script.onchain = { kind: "usable" };
    expect(await r.payments.collect(stream, 77_000n)).toMatchObject({ success: false });
    expect(await r.store.x402Payment(stream.id)).toMatchObject({ status: "failed" });
    expect(await r.store.failedX402Payments("0xpayer", 10)).toHaveLength(1);
    expect(r.audit()).toEqual([]);
  });

  it("before delivery: found onchain after the facilitator failed, it is delivered; sent and unconfirmed, nothing is delivered and it stays open; refused before sending, it closes unused", async () => {
    const r = await rig();
    // The facilitator lost the chain's answer, but the chain took it.
    const found = await r.paid("exact", 39_000n, 39_000n);
    r.script.settle = {
      success: false,
      transaction: "",
      network: CHAIN.network,
      errorReason: "settle_failed",
      errorMessage: "fetch failed",
    };
    r.script.onchain = { kind: "used", transaction: "0xtaken", collected: 39_000n };
    expect(await r.payments.collectBeforeDelivery(found, 39_000n, () => r.release("hold_1"))).toMatchObject({
      success: true,
      transaction: "0xtaken",
    });
    expect(await r.store.x402Payment(found.id)).toMatchObject({ status: "collected", txHash: "0xtaken" });

    // Sent, not confirmed, and it could still land: not delivered, not closed, hold kept.
    const pending = await r.paid("exact", 39_000n, 39_000n);
    r.script.settle = {
      success: false,
      transaction: "0xpending",
      network: CHAIN.network,
      errorReason: "settlement_pending",
    };
    r.script.onchain = { kind: "usable" };
    const released = vi.fn(async () => {});
    const error = (await r.payments
      .collectBeforeDelivery(pending, 39_000n, released)
      .catch((e) => e)) as ConnectError;
    expect(error.message).toMatch(/sent but not confirmed/);
    expect(released).not.toHaveBeenCalled();
    expect(await r.store.x402Payment(pending.id)).toMatchObject({ status: "authorised" });
    expect((await r.store.getHold("hold_2"))?.resolution).toBeUndefined();
    expect(await r.store.expireHolds(Number.MAX_SAFE_INTEGER, 2, 10)).toBe(0);

    // Refused before anything was sent (a failed check: a reason alone): closed, nothing charged.
    const refused = await r.paid("exact", 39_000n, 39_000n);
    r.script.settle = {
      success: false,
      transaction: "",
      network: CHAIN.network,
      errorReason: "insufficient_funds",
    };
    const refusal = (await r.payments
      .collectBeforeDelivery(refused, 39_000n, () => r.release("hold_3"))
      .catch((e) => e)) as ConnectError;
    expect(refusal.message).toMatch(/nothing was charged/);
    expect(await r.store.x402Payment(refused.id)).toMatchObject({ status: "unused" });
    expect((await r.store.getHold("hold_3"))?.resolution).toMatchObject({ status: "released" });

    // The pending one lands: the recovery pass records it, once the call could be over.
    r.later(MAX_CALL_MS + 1);
    r.script.onchain = { kind: "used", transaction: "0xpending", collected: 39_000n };
    expect((await r.store.settle("hold_1", 39_000n, ZERO_USAGE, 2, "")).kind).toBe("resolved");
    await r.payments.close(found, 39_000n, { success: true, transaction: "0xtaken", network: CHAIN.network });
    expect(await r.payments.recover()).toBe(1);
    expect(await r.store.x402Payment(pending.id)).toMatchObject({ status: "settled", txHash: "0xpending" });
    expect(r.audit()).toEqual([]);
  });
});
