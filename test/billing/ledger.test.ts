import { Code, ConnectError } from "@connectrpc/connect";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Billing } from "../../src/core/billing/billing.js";
import { holdIdFor } from "../../src/core/billing/hold-ids.js";
import { createHoldSweeper } from "../../src/core/billing/hold-sweeper.js";
import { type DeliveredUsage, NO_USAGE, type TextCallSpec } from "../../src/core/billing/pricing.js";
import { errorInfo } from "../../src/core/errors.js";
import type { Db } from "../../src/store/sqlite/database.js";
import { LedgerRepository } from "../../src/store/sqlite/ledger.js";
import {
  eighteenDecimalChains,
  expectSoundLedger,
  type LedgerFixture,
  ledgerCounts,
  ledgerFixture,
  SMALL_TEXT_CALL,
} from "./fixtures.js";

const usage = (over: Partial<DeliveredUsage>): DeliveredUsage => ({ ...NO_USAGE, ...over });

/**
 * The ConnectError `fn` rejects with, asserting nothing in the ledger changed meanwhile (the
 * rejection arrives only after the write's group has committed or rolled back).
 */
async function failsWithoutWriting(db: Db, fn: () => Promise<unknown>): Promise<ConnectError> {
  const before = ledgerCounts(db);
  const balances = db.prepare("SELECT * FROM ledger_balances ORDER BY account, chain").all();
  try {
    await fn();
  } catch (error) {
    expect(ledgerCounts(db)).toEqual(before);
    expect(db.prepare("SELECT * FROM ledger_balances ORDER BY account, chain").all()).toEqual(balances);
    if (error instanceof ConnectError) return error;
    throw error;
  }
  throw new Error("expected a failure");
}

async function funded(f: LedgerFixture, chain = "base", amount = 1_000_000n): Promise<string> {
  const account = f.account();
  await f.billing.credit({ accountId: account, chain, amount, reason: "test funds", creditId: "" });
  return account;
}

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

describe("credits and balances", () => {
  it("a manual credit is a ledger entry with its reason, from the manual-credit account", async () => {
    const account = f.account();
    const { balance, entryId } = await billing.credit({
      accountId: account,
      chain: "solana",
      amount: 12_500_000n,
      reason: "promo",
      creditId: "",
    });
    expect(balance.row.creditsPosted).toBe(12_500_000n);
    const entry = f.db.prepare("SELECT * FROM ledger_entries WHERE id = ?").get(entryId);
    expect(entry).toMatchObject({
      debit_account: "system:manual-credit",
      credit_account: account,
      memo: "promo",
    });
    const { balances, defaultChain } = await billing.balances(account);
    expect(defaultChain).toBe("base");
    expect(balances.map((b) => [b.chain.id, b.row.creditsPosted])).toEqual([
      ["base", 0n],
      ["arbitrum", 0n],
      ["robinhood", 0n],
      ["solana", 12_500_000n],
    ]);
  });

  it("a credit id credits once", async () => {
    const account = f.account();
    const credit = { accountId: account, chain: "base", amount: 5n, reason: "r", creditId: "ticket-1" };
    const first = await billing.credit(credit);
    const again = await billing.credit(credit);
    expect(again.entryId).toBe(first.entryId);
    expect(again.balance.row.creditsPosted).toBe(5n);
    const error = await failsWithoutWriting(f.db, () => billing.credit({ ...credit, amount: 6n }));
    expect(error.code).toBe(Code.AlreadyExists);
  });

  it.each([
    ["zero", { amount: 0n }, "amount"],
    ["negative", { amount: -1n }, "amount"],
    ["no reason", { reason: " " }, "reason"],
    ["unknown chain", { chain: "ethereum" }, "chain"],
  ])("refuses a bad credit (%s)", async (_name, over, field) => {
    const account = f.account();
    const error = await failsWithoutWriting(f.db, () =>
      billing.credit({ accountId: account, chain: "base", amount: 1n, reason: "r", creditId: "", ...over }),
    );
    expect(errorInfo(error)?.metadata.field).toBe(field);
  });

  it("refuses an unknown account", async () => {
    const error = await failsWithoutWriting(f.db, () =>
      billing.credit({ accountId: "acct_nobody", chain: "base", amount: 1n, reason: "r", creditId: "" }),
    );
    expect(error.code).toBe(Code.NotFound);
  });

  it("the default chain can be changed to an enabled chain only", async () => {
    const account = f.account();
    expect(await billing.setDefaultChain(account, "solana")).toBe("solana");
    expect((await billing.balances(account)).defaultChain).toBe("solana");
    const error = await failsWithoutWriting(f.db, () => billing.setDefaultChain(account, "auto"));
    expect(errorInfo(error)?.reason).toBe("CHAIN_UNKNOWN");
  });
});

describe("hold → settle", () => {
  it("holds the worst case, posts the actual charge and releases the rest in one step", async () => {
    const account = await funded(f);
    const state = await billing.hold({
      accountId: account,
      requestId: "req-1",
      keyId: "key_1",
      chain: "auto",
      call: SMALL_TEXT_CALL,
    });
    expect(state.hold.id).toBe(holdIdFor(account, "req-1"));
    expect(state.hold.amount).toBe(7000n); // 1000 in × $2/MTok + 1000 out × $5/MTok
    expect(await billing.available(account, "base")).toBe(1_000_000n - 7000n);
    // 100 input + 10 output + 800 cache read: 100 + 50 + 80 = 230 µ$... in pico: 1e8 + 5e7 + 8e7.
    const settled = await billing.settle(
      state.hold.id,
      usage({ inputTokens: 100n, outputTokens: 10n, cacheReadTokens: 800n }),
    );
    expect(settled.resolution).toMatchObject({ status: "settled", amount: 230n });
    expect(await billing.available(account, "base")).toBe(1_000_000n - 230n);
    const balance = (await f.billing.balances(account)).balances[0]!.row;
    expect(balance).toMatchObject({ debitsPending: 0n, debitsPosted: 230n, creditsPosted: 1_000_000n });
  });

  it("returns from hold, settle and release exactly the state a fresh read gives back", async () => {
    const account = await funded(f);
    const read = new LedgerRepository(f.db);
    const text = await billing.hold({
      accountId: account,
      requestId: "t",
      keyId: "key_1",
      chain: "base",
      call: SMALL_TEXT_CALL,
    });
    expect(text).toEqual(read.getHold(text.hold.id));
    const image = await billing.hold({
      accountId: account,
      requestId: "i",
      keyId: "",
      chain: "base",
      call: { kind: "image", model: "image-pro", size: "2K", count: 1 },
    });
    expect(image).toEqual(read.getHold(image.hold.id));
    const settled = await billing.settle(
      text.hold.id,
      usage({
        inputTokens: 10n,
        outputTokens: 3n,
        cacheWrite5mTokens: 2n,
        cacheWrite1hTokens: 1n,
        cacheReadTokens: 5n,
      }),
    );
    expect(settled).toEqual(read.getHold(text.hold.id));
    const released = await billing.release(image.hold.id);
    expect(released).toEqual(read.getHold(image.hold.id));
  });

  it("rounds a fraction of a unit up, once per call", async () => {
    const account = await funded(f);
    const { hold } = await billing.hold({
      accountId: account,
      requestId: "r",
      keyId: "",
      chain: "base",
      call: SMALL_TEXT_CALL,
    });
    // One haiku input token is $0.000001 exactly; one cache-read token is a tenth of a unit.
    const settled = await billing.settle(hold.id, usage({ cacheReadTokens: 1n }));
    expect(settled.resolution?.amount).toBe(1n);
  });

  it("settling with no usage charges nothing; releasing charges nothing", async () => {
    const account = await funded(f);
    const a = await billing.hold({
      accountId: account,
      requestId: "a",
      keyId: "",
      chain: "base",
      call: SMALL_TEXT_CALL,
    });
    const b = await billing.hold({
      accountId: account,
      requestId: "b",
      keyId: "",
      chain: "base",
      call: SMALL_TEXT_CALL,
    });
    expect((await billing.settle(a.hold.id, NO_USAGE)).resolution).toMatchObject({
      status: "settled",
      amount: 0n,
    });
    expect((await billing.release(b.hold.id)).resolution).toMatchObject({ status: "released", amount: 0n });
    expect(await billing.available(account, "base")).toBe(1_000_000n);
  });

  it("a retried Hold with the same request id returns the same hold, and holds once", async () => {
    const account = await funded(f);
    const input = { accountId: account, requestId: "same", keyId: "", chain: "base", call: SMALL_TEXT_CALL };
    const first = await billing.hold(input);
    const second = await billing.hold(input);
    expect(second.hold).toEqual(first.hold);
    expect(await billing.available(account, "base")).toBe(1_000_000n - 7000n);
    await billing.settle(first.hold.id, NO_USAGE);
    expect((await billing.hold(input)).resolution?.status).toBe("settled");
    // The same request id for a different call is refused.
    const error = await failsWithoutWriting(f.db, () =>
      billing.hold({
        ...input,
        call: { kind: "text", model: "model-haiku-4-5", inputTokens: 1000n, maxTokens: 2000n },
      }),
    );
    expect(errorInfo(error)?.reason).toBe("HOLD_CONFLICT");
  });

  it("request ids of different accounts never collide", async () => {
    const a = await funded(f);
    const b = await funded(f);
    const ha = await billing.hold({
      accountId: a,
      requestId: "r",
      keyId: "",
      chain: "base",
      call: SMALL_TEXT_CALL,
    });
    const hb = await billing.hold({
      accountId: b,
      requestId: "r",
      keyId: "",
      chain: "base",
      call: SMALL_TEXT_CALL,
    });
    expect(ha.hold.id).not.toBe(hb.hold.id);
  });

  it("double settle is a deterministic error that changes nothing", async () => {
    const account = await funded(f);
    const { hold } = await billing.hold({
      accountId: account,
      requestId: "r",
      keyId: "",
      chain: "base",
      call: SMALL_TEXT_CALL,
    });
    await billing.settle(hold.id, usage({ outputTokens: 10n }));
    for (let i = 0; i < 2; i++) {
      const error = await failsWithoutWriting(f.db, () =>
        billing.settle(hold.id, usage({ outputTokens: 20n })),
      );
      expect(error.code).toBe(Code.FailedPrecondition);
      expect(errorInfo(error)).toMatchObject({
        reason: "HOLD_ALREADY_RESOLVED",
        metadata: { hold_id: hold.id, status: "settled", chain: "base" },
      });
    }
  });

  it("a call settling the hold it placed, after the sweeper expired it, is refused and changes nothing", async () => {
    const account = await funded(f);
    const placed = await billing.holdNewCall({
      accountId: account,
      requestId: "swept",
      keyId: "",
      chain: "base",
      call: SMALL_TEXT_CALL,
    });
    clock += 20 * 60_000;
    expect(await billing.expireHolds(15 * 60_000)).toBe(1);
    // The call settles from the hold it was given (no read): the write itself refuses it.
    const error = await failsWithoutWriting(f.db, () =>
      billing.settleDelivered(placed.hold, usage({ outputTokens: 10n })),
    );
    expect(errorInfo(error)).toMatchObject({
      reason: "HOLD_ALREADY_RESOLVED",
      metadata: { hold_id: placed.hold.id, status: "expired", chain: "base" },
    });
    expect(await billing.available(account, "base")).toBe(1_000_000n);
  });

  it("settle after release, and release after settle, are deterministic errors that change nothing", async () => {
    const account = await funded(f);
    const a = await billing.hold({
      accountId: account,
      requestId: "a",
      keyId: "",
      chain: "base",
      call: SMALL_TEXT_CALL,
    });
    await billing.release(a.hold.id);
    const e1 = await failsWithoutWriting(f.db, () => billing.settle(a.hold.id, NO_USAGE));
    expect(errorInfo(e1)?.metadata.status).toBe("released");
    const e2 = await failsWithoutWriting(f.db, () => billing.release(a.hold.id));
    expect(errorInfo(e2)?.metadata.status).toBe("released");
    const b = await billing.hold({
      accountId: account,
      requestId: "b",
      keyId: "",
      chain: "base",
      call: SMALL_TEXT_CALL,
    });
    await billing.settle(b.hold.id, NO_USAGE);
    const e3 = await failsWithoutWriting(f.db, () => billing.release(b.hold.id));
    expect(errorInfo(e3)?.reason).toBe("HOLD_ALREADY_RESOLVED");
  });

  it("a charge above the hold is a deterministic error that changes nothing", async () => {
    const account = await funded(f);
    const { hold } = await billing.hold({
      accountId: account,
      requestId: "r",
      keyId: "",
      chain: "base",
      call: SMALL_TEXT_CALL,
    });
    for (let i = 0; i < 2; i++) {
      // More output than max_tokens allowed: 1001 × $5/MTok + ... exceeds the 7000-unit hold.
      const error = await failsWithoutWriting(f.db, () =>
        billing.settle(
          hold.id,
          usage({ inputTokens: 1000n, cacheWrite1hTokens: 1000n, outputTokens: 1000n }),
        ),
      );
      expect(errorInfo(error)).toMatchObject({
        reason: "SETTLE_EXCEEDS_HOLD",
        metadata: { hold_id: hold.id, chain: "base", held: "7000", charge: "8000" },
      });
    }
    expect((await billing.settle(hold.id, usage({ outputTokens: 1000n }))).resolution?.amount).toBe(5000n);
  });

  it("an unknown hold is NotFound", async () => {
    const error = await failsWithoutWriting(f.db, () => billing.settle("hold_nope", NO_USAGE));
    expect(error.code).toBe(Code.NotFound);
  });

  it("an unknown chain is InvalidArgument naming the allowed values, nothing written", async () => {
    const account = await funded(f);
    const error = await failsWithoutWriting(f.db, () =>
      billing.hold({
        accountId: account,
        requestId: "r",
        keyId: "",
        chain: "ethereum",
        call: SMALL_TEXT_CALL,
      }),
    );
    expect(error.code).toBe(Code.InvalidArgument);
    expect(errorInfo(error)?.metadata).toMatchObject({
      field: "x-gateway-billing-chain",
      allowed: "auto,base,arbitrum,robinhood,solana",
    });
  });

  it("an explicit chain with no funds fails INSUFFICIENT_FUNDS naming that chain, nothing written", async () => {
    const account = await funded(f, "base");
    for (let i = 0; i < 2; i++) {
      const error = await failsWithoutWriting(f.db, () =>
        billing.hold({
          accountId: account,
          requestId: "r",
          keyId: "",
          chain: "solana",
          call: SMALL_TEXT_CALL,
        }),
      );
      expect(error.code).toBe(Code.FailedPrecondition);
      expect(errorInfo(error)).toMatchObject({
        reason: "INSUFFICIENT_FUNDS",
        metadata: { chain: "solana", needed: "7000", available: "0" },
      });
      expect(error.rawMessage).toContain("solana");
      expect(error.rawMessage).toContain("0.007000 USDC");
    }
    expect(await billing.available(account, "base")).toBe(1_000_000n);
  });

  it("holdOrFit answers a text call it cannot cover with its refusal and the largest max_tokens that fits, nothing written", async () => {
    const account = await funded(f, "base", 5000n);
    const input = { accountId: account, requestId: "r", keyId: "", chain: "base", call: SMALL_TEXT_CALL };
    const thrown = await failsWithoutWriting(f.db, () => billing.holdNewCall(input));
    const before = ledgerCounts(f.db);
    const held = await billing.holdOrFit(input);
    expect(ledgerCounts(f.db)).toEqual(before);
    if (held.kind !== "insufficient") throw new Error("expected a refusal");
    expect(held.refusal.rawMessage).toBe(thrown.rawMessage);
    expect(errorInfo(held.refusal)).toEqual(errorInfo(thrown));
    const fit = held.maxTokensThatFit!;
    const chain = billing.chainConfig("base")!;
    const text = SMALL_TEXT_CALL as TextCallSpec;
    expect(fit).toBeGreaterThan(0n);
    expect(fit).toBeLessThan(text.maxTokens);
    expect(billing.quoteOn(chain, { ...text, maxTokens: fit })).toBeLessThanOrEqual(5000n);
    expect(billing.quoteOn(chain, { ...text, maxTokens: fit + 1n })).toBeGreaterThan(5000n);
    const poor = await funded(f, "base", 1n);
    const none = await billing.holdOrFit({ ...input, accountId: poor });
    expect(none).toMatchObject({ kind: "insufficient", maxTokensThatFit: 0n });
    const image = await billing.holdOrFit({
      ...input,
      accountId: poor,
      call: { kind: "image", model: "image-pro", size: "2K", count: 1 },
    });
    expect(image).toMatchObject({ kind: "insufficient", maxTokensThatFit: undefined });
    const rich = await funded(f, "base");
    expect(await billing.holdOrFit({ ...input, accountId: rich })).toMatchObject({ kind: "held" });
  });

  it("auto follows the account's default chain", async () => {
    const account = await funded(f, "solana");
    await billing.setDefaultChain(account, "solana");
    const { hold } = await billing.hold({
      accountId: account,
      requestId: "r",
      keyId: "",
      chain: undefined,
      call: SMALL_TEXT_CALL,
    });
    expect(hold.chain).toBe("solana");
  });

  it("holds exactly as many calls as the balance covers", async () => {
    const account = await funded(f, "base", 7000n * 5n + 6999n);
    const results: (string | undefined)[] = [];
    for (let i = 0; i < 8; i++) {
      try {
        await billing.hold({
          accountId: account,
          requestId: `r${i}`,
          keyId: "",
          chain: "base",
          call: SMALL_TEXT_CALL,
        });
        results.push("held");
      } catch (error) {
        results.push(errorInfo(error as ConnectError)?.reason);
      }
    }
    expect(results).toEqual([
      "held",
      "held",
      "held",
      "held",
      "held",
      "INSUFFICIENT_FUNDS",
      "INSUFFICIENT_FUNDS",
      "INSUFFICIENT_FUNDS",
    ]);
    expect(await billing.available(account, "base")).toBe(6999n);
  });

  it("bills images per delivered image at the requested size", async () => {
    const account = await funded(f);
    const { hold } = await billing.hold({
      accountId: account,
      requestId: "img",
      keyId: "",
      chain: "base",
      call: { kind: "image", model: "image-pro", size: "4K", count: 3 },
    });
    expect(hold.amount).toBe(720_000n);
    expect((await billing.settle(hold.id, usage({ images: 2 }))).resolution?.amount).toBe(480_000n);
  });
});

describe("the append-only ledger", () => {
  it("refuses UPDATE and DELETE of entries, holds and resolutions", async () => {
    const account = await funded(f);
    const { hold } = await billing.hold({
      accountId: account,
      requestId: "r",
      keyId: "",
      chain: "base",
      call: SMALL_TEXT_CALL,
    });
    await billing.settle(hold.id, usage({ outputTokens: 1n }));
    for (const table of ["ledger_entries", "holds", "hold_resolutions"]) {
      expect(() =>
        f.db.exec(
          `UPDATE ${table} SET created_at = 0`.replace(
            "created_at",
            table === "hold_resolutions" ? "resolved_at" : "created_at",
          ),
        ),
      ).toThrow(/append-only/);
      expect(() => f.db.exec(`DELETE FROM ${table}`)).toThrow(/append-only/);
    }
  });

  it("refuses an overdraft even from raw SQL", async () => {
    const account = await funded(f, "base", 10n);
    expect(() =>
      f.db
        .prepare("UPDATE ledger_balances SET debits_posted = 11 WHERE account = ? AND chain = 'base'")
        .run(account),
    ).toThrow(/CHECK constraint failed/);
  });
});

describe("the sweeper", () => {
  it("voids holds older than the longest call, and only those", async () => {
    const account = await funded(f);
    const old = await billing.hold({
      accountId: account,
      requestId: "old",
      keyId: "",
      chain: "base",
      call: SMALL_TEXT_CALL,
    });
    clock += 10 * 60_000;
    const young = await billing.hold({
      accountId: account,
      requestId: "young",
      keyId: "",
      chain: "base",
      call: SMALL_TEXT_CALL,
    });
    clock += 5 * 60_000 + 1;
    const sweeper = createHoldSweeper(billing, { maxCallMs: 15 * 60_000, intervalMs: 60_000 });
    expect(await sweeper.start()).toBe(1);
    sweeper.stop();
    expect(
      (await f.billing.usage(account, 2n ** 62n, 10)).map((s) => [s.hold.id, s.resolution?.status]),
    ).toEqual([
      [young.hold.id, undefined],
      [old.hold.id, "expired"],
    ]);
    expect(await billing.available(account, "base")).toBe(1_000_000n - 7000n);
    const late = await failsWithoutWriting(f.db, () => billing.settle(old.hold.id, NO_USAGE));
    expect(errorInfo(late)?.metadata.status).toBe("expired");
  });

  it("sweeps in batches until every expired hold is voided", async () => {
    const account = await funded(f, "base", 10_000_000n);
    for (let i = 0; i < 1200; i++) {
      await billing.hold({
        accountId: account,
        requestId: `r${i}`,
        keyId: "",
        chain: "base",
        call: SMALL_TEXT_CALL,
      });
    }
    clock += 60 * 60_000;
    expect(await billing.expireHolds(15 * 60_000)).toBe(1200);
    expect(await billing.available(account, "base")).toBe(10_000_000n);
  });
});

describe("an 18-decimal asset (ledger scale L = 9)", () => {
  /** One whole token in ledger units: 10^9 (L = min(18, 9)). */
  const TOKEN = 10n ** 9n;

  function eighteenDecimalAccount(): string {
    f.db.close();
    f = ledgerFixture({ chains: eighteenDecimalChains(), now: () => clock });
    billing = f.billing;
    return f.account();
  }

  it("holds 1,000,000,000 whole tokens in one balance", async () => {
    const account = eighteenDecimalAccount();
    const { balance } = await billing.credit({
      accountId: account,
      chain: "robinhood",
      amount: 1_000_000_000n * TOKEN,
      reason: "r",
      creditId: "",
    });
    expect(balance.row.creditsPosted).toBe(10n ** 18n);
    expect(await billing.available(account, "robinhood")).toBe(1_000_000_000n * TOKEN);
    // Another billion on top still fits: the cap is ~9.22 × 10^9 whole tokens.
    await billing.credit({
      accountId: account,
      chain: "robinhood",
      amount: 1_000_000_000n * TOKEN,
      reason: "r",
      creditId: "",
    });
    expect(await billing.available(account, "robinhood")).toBe(2_000_000_000n * TOKEN);
  });

  it("credits, holds and settles exactly in 10^-9 ledger units", async () => {
    const account = eighteenDecimalAccount();
    await billing.credit({
      accountId: account,
      chain: "robinhood",
      amount: 1_000_000_000n * TOKEN + 1n, // one billion tokens and one ledger unit
      reason: "r",
      creditId: "",
    });
    const { hold } = await billing.hold({
      accountId: account,
      requestId: "r",
      keyId: "",
      chain: "robinhood",
      call: SMALL_TEXT_CALL,
    });
    // 7000 µ$ = 7 × 10^9 pico-dollars = 7 × 10^6 units of 10^-9.
    expect(hold.amount).toBe(7_000_000n);
    expect(await billing.available(account, "robinhood")).toBe(1_000_000_000n * TOKEN + 1n - 7_000_000n);
    // One cache-read token of haiku is $0.0000001 = 100 units of 10^-9: exact, nothing to round.
    expect((await billing.settle(hold.id, usage({ cacheReadTokens: 1n }))).resolution?.amount).toBe(100n);
    expect(await billing.available(account, "robinhood")).toBe(1_000_000_000n * TOKEN + 1n - 100n);
    const robinhood = (await billing.balances(account)).balances.find((b) => b.chain.id === "robinhood");
    expect(robinhood?.row).toMatchObject({
      creditsPosted: 1_000_000_000n * TOKEN + 1n,
      debitsPosted: 100n,
      debitsPending: 0n,
    });
  });

  it("charges mixed token kinds exactly (every catalog price is whole 10^-9 units)", async () => {
    const account = eighteenDecimalAccount();
    await billing.credit({
      accountId: account,
      chain: "robinhood",
      amount: TOKEN,
      reason: "r",
      creditId: "",
    });
    const { hold } = await billing.hold({
      accountId: account,
      requestId: "r",
      keyId: "",
      chain: "robinhood",
      call: SMALL_TEXT_CALL,
    });
    // 3 haiku cache-read tokens + 1 input + 1 output: 3 × 10^5 + 10^6 + 5 × 10^6 pico = 6300 units.
    const settled = await billing.settle(
      hold.id,
      usage({ cacheReadTokens: 3n, inputTokens: 1n, outputTokens: 1n }),
    );
    expect(settled.resolution?.amount).toBe(6300n);
    expect(await billing.available(account, "robinhood")).toBe(TOKEN - 6300n);
  });

  it("refuses a balance beyond int64 in ledger units by name, writing nothing", async () => {
    const account = eighteenDecimalAccount();
    await billing.credit({
      accountId: account,
      chain: "robinhood",
      amount: 9_000_000_000n * TOKEN,
      reason: "r",
      creditId: "",
    });
    const error = await failsWithoutWriting(f.db, () =>
      billing.credit({
        accountId: account,
        chain: "robinhood",
        amount: 1_000_000_000n * TOKEN,
        reason: "r",
        creditId: "",
      }),
    );
    expect(errorInfo(error)?.reason).toBe("AMOUNT_OUT_OF_RANGE");
    const other = f.account();
    const tooBig = await failsWithoutWriting(f.db, () =>
      billing.credit({
        accountId: other,
        chain: "robinhood",
        amount: 2n ** 63n,
        reason: "r",
        creditId: "",
      }),
    );
    expect(errorInfo(tooBig)?.reason).toBe("AMOUNT_OUT_OF_RANGE");
  });
});
