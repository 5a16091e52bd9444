import { Code, ConnectError } from "@connectrpc/connect";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Billing } from "../../src/core/billing/billing.js";
import { defaultPriceCatalog } from "../../src/core/billing/default-catalog.js";
import { picoToUnits } from "../../src/core/billing/money.js";
import { firstPassPico, nextPassPico, type PricedTextCall } from "../../src/core/billing/pass-pricing.js";
import { NO_USAGE, priceCall, type TextCallSpec } from "../../src/core/billing/pricing.js";
import { errorInfo } from "../../src/core/errors.js";
import { type HoldRow, heldOf } from "../../src/core/ports/ledger.js";
import {
  expectSoundLedger,
  type LedgerFixture,
  ledgerCounts,
  ledgerFixture,
  SMALL_TEXT_CALL,
} from "./fixtures.js";

// Billing.raise: the ledger's raise outcomes as the core names them — raised, or declined with
// the refusal a call would have got (nothing written), or a named failure — and a settlement
// after raises charging up to the raised total. Every test ends with the ledger audit.

let f: LedgerFixture;
let billing: Billing;
let clock: number;

beforeEach(() => {
  clock = 1_700_000_000_000;
  f = ledgerFixture({ now: () => clock });
  billing = f.billing;
});

afterEach(() => {
  expectSoundLedger(f.db);
  f.db.close();
});

/** A funded account and a held call on it (SMALL_TEXT_CALL holds 7,000 units on base). */
async function heldCall(funds = 20_000n): Promise<{ account: string; placed: HoldRow }> {
  const account = f.account();
  await billing.credit({ accountId: account, chain: "base", amount: funds, reason: "test", creditId: "" });
  const state = await billing.holdNewCall({
    accountId: account,
    requestId: `req_${account}`,
    keyId: "",
    chain: "base",
    call: SMALL_TEXT_CALL,
  });
  expect(state.hold.amount).toBe(7_000n);
  return { account, placed: state.hold };
}

/** The ConnectError `fn` rejects with, asserting nothing in the ledger changed meanwhile. */
async function failsWithoutWriting(fn: () => Promise<unknown>): Promise<ConnectError> {
  const before = { counts: ledgerCounts(f.db), rows: snapshot() };
  const error = await fn().then(
    () => undefined,
    (e: unknown) => e,
  );
  expect({ counts: ledgerCounts(f.db), rows: snapshot() }).toEqual(before);
  if (error instanceof ConnectError) return error;
  throw new Error(`expected a ConnectError, got ${String(error)}`);
}

function snapshot(): unknown {
  return {
    balances: f.db.prepare("SELECT * FROM ledger_balances ORDER BY account, chain").all(),
    open: f.db.prepare("SELECT * FROM open_holds ORDER BY hold_id").all(),
    days: f.db.prepare("SELECT * FROM spend_days ORDER BY account_id, key_id, day").all(),
  };
}

describe("Billing.raise", () => {
  it("raises a running call's hold; the same pass again holds nothing more; the hold's history lists each raise", async () => {
    const { account, placed } = await heldCall();
    clock += 5;
    const raised = await billing.raise(placed, 2, 4_000n);
    expect(raised).toMatchObject({ kind: "raised", state: { hold: { id: placed.id, raised: 4_000n } } });
    expect(await billing.available(account, "base")).toBe(9_000n);
    expect(await billing.raise(placed, 2, 4_000n)).toEqual(raised);
    expect(await billing.available(account, "base")).toBe(9_000n);
    clock += 5;
    expect(await billing.raise(placed, 3, 9_000n)).toMatchObject({ state: { hold: { raised: 13_000n } } });
    expect(await billing.raises(placed.id)).toEqual([
      { holdId: placed.id, pass: 2, amount: 4_000n, createdAt: 1_700_000_000_005 },
      { holdId: placed.id, pass: 3, amount: 9_000n, createdAt: 1_700_000_000_010 },
    ]);
    // The usage rows and the call read the raised total.
    const [row] = await billing.usage(account, 2n ** 62n, 10);
    expect(heldOf(row!.hold)).toBe(20_000n);
    expect((await billing.call(account, `req_${account}`))?.hold.raised).toBe(13_000n);
  });

  it("declines a raise the wallet does not cover with INSUFFICIENT_FUNDS, and one past a spend cap with SPEND_CAP_REACHED, writing nothing", async () => {
    const { account, placed } = await heldCall();
    const before = snapshot();
    const short = await billing.raise(placed, 2, 13_001n);
    expect(short.kind).toBe("declined");
    const refusal = (short as { refusal: ConnectError }).refusal;
    expect(refusal.code).toBe(Code.FailedPrecondition);
    expect(errorInfo(refusal)).toMatchObject({
      reason: "INSUFFICIENT_FUNDS",
      metadata: { chain: "base", needed: "13001", available: "13000" },
    });
    expect(snapshot()).toEqual(before);

    await billing.setSpendCap({ accountId: account, keyId: "", chain: "base", period: "day" }, 10_000n);
    const capped = await billing.raise(placed, 2, 3_001n);
    expect(capped.kind).toBe("declined");
    expect(errorInfo((capped as { refusal: ConnectError }).refusal)).toMatchObject({
      reason: "SPEND_CAP_REACHED",
      metadata: { cap_period: "day", remaining: "3000", needed: "3001" },
    });
    expect(snapshot()).toEqual(before);
    expect((await billing.raise(placed, 2, 3_000n)).kind).toBe("raised");
  });

  it("fails RAISE_CONFLICT for a pass raised by another amount, HOLD_NOT_FOUND, HOLD_ALREADY_RESOLVED and INVALID_FIELD, writing nothing", async () => {
    const { placed } = await heldCall();
    await billing.raise(placed, 2, 1_000n);
    const conflict = await failsWithoutWriting(() => billing.raise(placed, 2, 1_001n));
    expect(conflict.code).toBe(Code.AlreadyExists);
    expect(errorInfo(conflict)).toMatchObject({
      reason: "RAISE_CONFLICT",
      metadata: { hold_id: placed.id, pass: "2" },
    });
    const missing = await failsWithoutWriting(() => billing.raise({ ...placed, id: "hold_missing" }, 2, 1n));
    expect(errorInfo(missing)?.reason).toBe("HOLD_NOT_FOUND");
    for (const [pass, amount, field] of [
      [1, 1n, "pass"],
      [2.5, 1n, "pass"],
      [10_001, 1n, "pass"],
      [3, 0n, "amount"],
      [3, -1n, "amount"],
      [3, 2n ** 63n, "amount"],
    ] as const) {
      const invalid = await failsWithoutWriting(() => billing.raise(placed, pass, amount));
      expect(errorInfo(invalid)).toMatchObject({ reason: "INVALID_FIELD", metadata: { field } });
    }
    await billing.release(placed.id);
    const resolved = await failsWithoutWriting(() => billing.raise(placed, 3, 1n));
    expect(errorInfo(resolved)).toMatchObject({
      reason: "HOLD_ALREADY_RESOLVED",
      metadata: { status: "released" },
    });
  });

  it("settles a raised call for all it delivered up to the raised total (not capped at the hold as placed), releasing the rest", async () => {
    const { account, placed } = await heldCall();
    // 3,000 output tokens on Haiku 4.5: 15,000 units, above the 7,000 placed.
    const usage = { ...NO_USAGE, inputTokens: 0n, outputTokens: 3_000n };
    const raised = await billing.raise(placed, 2, 10_000n);
    const { hold } = (raised as { state: { hold: HoldRow } }).state;
    const settled = await billing.settleDelivered(hold, usage);
    expect(settled.capped).toBe(false);
    expect(settled.state.resolution).toMatchObject({ status: "settled", amount: 15_000n });
    expect(await billing.available(account, "base")).toBe(5_000n);
  });

  it("caps a charge at the raised total, never above it", async () => {
    const { placed } = await heldCall();
    const raised = await billing.raise(placed, 2, 1_000n);
    const { hold } = (raised as { state: { hold: HoldRow } }).state;
    const settled = await billing.settleDelivered(hold, { ...NO_USAGE, outputTokens: 3_000n });
    expect(settled.capped).toBe(true);
    expect(settled.state.resolution?.amount).toBe(8_000n);
  });
});

describe("Billing's pass-by-pass quotes", () => {
  const catalog = defaultPriceCatalog();
  const search: TextCallSpec = {
    kind: "text",
    model: "model-sonnet-4-6",
    inputTokens: 20_000n,
    maxTokens: 32_000n,
    serverToolLoop: true,
    webSearchMaxUses: 8n,
  };

  it("are the pure functions' worst cases in the chain's ledger units, rounded up", () => {
    const chain = billing.chainConfig("base")!;
    const priced = priceCall(catalog, search) as PricedTextCall;
    expect(billing.firstPassQuoteOn(chain, search)).toBe(picoToUnits(firstPassPico(catalog, priced), 6));
    const boundary = { kind: "tool", attempt: 0, contextTokens: 60_000n, resultTokens: 30_000n } as const;
    expect(billing.nextPassQuoteOn(chain, search, boundary)).toBe(
      picoToUnits(nextPassPico(catalog, priced, boundary), 6),
    );
    // ((20,000 × $6) + 32,000 × $15) / 1M × 1.1 + 8 × $0.01 = $0.74; the whole loop: $64.89.
    expect(billing.firstPassQuoteOn(chain, search)).toBe(740_000n);
    expect(billing.quoteOn(chain, search)).toBe(64_892_000n);
  });

  it("refuse a call the catalog refuses, as quoteOn does", () => {
    const chain = billing.chainConfig("base")!;
    expect(() => billing.firstPassQuoteOn(chain, { ...search, model: "nope" })).toThrow(/Unknown model/);
  });
});
