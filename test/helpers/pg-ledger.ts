/**
 * What the PostgreSQL ledger suites under test/store share: a server per suite, a hold of the
 * usual shape, usage of one token each way, and accounts funded by a manual credit.
 */
import type pg from "pg";
import { afterAll, beforeAll, expect } from "vitest";
import { SYSTEM_MANUAL_CREDIT } from "../../src/core/ports/ledger.js";
import { PgAccountStore } from "../../src/store/postgres/accounts.js";
import type { PgLedger } from "../../src/store/postgres/ledger.js";
import { CHAIN } from "./ledger-shapes.js";
import { type PostgresServer, startPostgres } from "./postgres.js";

/** The chain every hold and credit here is on; a settlement's usage: one token each way. */
export { CHAIN, ONE_TOKEN_EACH as USAGE, testHold } from "./ledger-shapes.js";

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
