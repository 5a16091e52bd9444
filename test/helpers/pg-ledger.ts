/**
 * What the PostgreSQL ledger suites under test/store share: a server per suite, a hold of the
 * usual shape, usage of one token each way, and accounts funded by a manual credit.
 */
import type pg from "pg";
import { afterAll, beforeAll, expect } from "vitest";
import { type NewHold, SYSTEM_MANUAL_CREDIT, type UsageCounts } from "../../src/core/ports/ledger.js";
import { PgAccountStore } from "../../src/store/postgres/accounts.js";
import type { PgLedger } from "../../src/store/postgres/ledger.js";
import { type PostgresServer, startPostgres } from "./postgres.js";

/** The chain every hold and credit here is on. */
export const CHAIN = "base";

/** A settlement's usage: one input and one output token. */
export const USAGE: UsageCounts = {
  inputTokens: 1n,
  outputTokens: 1n,
  cacheWrite5mTokens: 0n,
  cacheWrite1hTokens: 0n,
  cacheReadTokens: 0n,
  images: 0,
};

/** Starts a PostgreSQL server before the suite and stops it after; the getter is for its tests. */
export function suitePostgres(): () => PostgresServer {
  let server: PostgresServer | undefined;
  beforeAll(async () => {
    server = await startPostgres();
  });
  afterAll(async () => {
    await server?.stop();
  });
  return () => server!;
}

/** A text call's hold of `amount` on {@link CHAIN}, by key_1 of `accountId` (acct_a unless told). */
export function testHold(
  id: string,
  amount: bigint,
  { accountId = "acct_a", createdAt = 10 }: { accountId?: string; createdAt?: number } = {},
): NewHold {
  return {
    id,
    accountId,
    requestId: `req_${id}`,
    keyId: "key_1",
    chain: CHAIN,
    amount,
    callKind: "text",
    model: "claude-test",
    inputTokens: 12n,
    maxTokens: 1024n,
    imageSize: "",
    imageCount: 0,
    createdAt,
  };
}

/** Creates `accounts` and credits each `amount` on {@link CHAIN} (entry `funds_<account>`). */
export async function fundAccounts(
  pool: pg.Pool,
  ledger: PgLedger,
  accounts: readonly string[],
  amount = 10_000n,
): Promise<void> {
  for (const account of accounts) {
    await new PgAccountStore(pool).insertAccount(account, "", 1);
    const credited = await ledger.credit({
      entryId: `funds_${account}`,
      accountId: account,
      chain: CHAIN,
      amount,
      from: SYSTEM_MANUAL_CREDIT,
      memo: "test",
      createdAt: 1,
    });
    expect(credited.kind).toBe("credited");
  }
}
