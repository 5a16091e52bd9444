/**
 * The ledger's input shapes as the store suites write them, on either store (SQLite, PostgreSQL):
 * a text call's hold, a raise, and usage counts. One home for what ledger-contract,
 * spend-caps-contract, resolution-spool and the PostgreSQL suites (test/helpers/pg-ledger.ts)
 * each used to spell out.
 */
import { type NewHold, type NewRaise, type UsageCounts, ZERO_USAGE } from "../../src/core/ports/ledger.js";

/** The chain every hold here is on unless a test names another. */
export const CHAIN = "base";

/** Usage counts: zero for every count not given. */
export function usage(counts: Partial<UsageCounts> = {}): UsageCounts {
  return { ...ZERO_USAGE, ...counts };
}

/** One input and one output token. */
export const ONE_TOKEN_EACH: UsageCounts = usage({ inputTokens: 1n, outputTokens: 1n });

/** Every token count set, each to a different value: a round trip that swaps or drops one shows. */
export const EVERY_COUNT: UsageCounts = usage({
  inputTokens: 1200n,
  outputTokens: 345n,
  cacheWrite5mTokens: 6n,
  cacheWrite1hTokens: 7n,
  cacheReadTokens: 89n,
});

/** What a hold may change from the usual: its account, time, key, chain and the call's sizes. */
export interface HoldShape {
  readonly accountId?: string;
  readonly createdAt?: number;
  readonly keyId?: string;
  readonly chain?: string;
  readonly inputTokens?: bigint;
  readonly maxTokens?: bigint;
}

/** A text call's hold of `amount`: by key_1 of acct_a on {@link CHAIN} at 10, unless told. */
export function testHold(
  id: string,
  amount: bigint,
  {
    accountId = "acct_a",
    createdAt = 10,
    keyId = "key_1",
    chain = CHAIN,
    inputTokens = 12n,
    maxTokens = 1024n,
  }: HoldShape = {},
): NewHold {
  return {
    id,
    accountId,
    requestId: `req_${id}`,
    keyId,
    chain,
    amount,
    callKind: "text",
    model: "claude-test",
    inputTokens,
    maxTokens,
    imageSize: "",
    imageCount: 0,
    createdAt,
  };
}

/** A raise of hold `holdId` for pass `pass`. */
export function testRaise(holdId: string, pass: number, amount: bigint, createdAt: number): NewRaise {
  return { holdId, pass, amount, createdAt };
}
