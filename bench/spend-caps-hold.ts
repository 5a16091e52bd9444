/**
 * What a spend cap adds to placing a hold on SQLite: placeHold (then void) timed one by one,
 * without caps and then under a key's daily, the account's monthly and its lifetime cap, after
 * `N` settled holds spread over the month's first 15 days. A capped hold sums its key's spend per
 * day over each period (docs/billing.md "Spend caps"), so its cost should not grow with N; writes
 * run on this thread (`thread: false`), in a fresh data dir.
 *
 * Usage: node dist/bench/spend-caps-hold.js DATA_DIR N
 */
import { performance } from "node:perf_hooks";
import type { NewHold } from "../src/core/ports/ledger.js";
import { SYSTEM_MANUAL_CREDIT } from "../src/core/ports/ledger.js";
import { AuthRepository } from "../src/store/sqlite/accounts.js";
import { openDatabase } from "../src/store/sqlite/database.js";
import { openSqliteLedger } from "../src/store/sqlite/ledger-store.js";

const USAGE = {
  inputTokens: 1n,
  outputTokens: 1n,
  cacheWrite5mTokens: 0n,
  cacheWrite1hTokens: 0n,
  cacheReadTokens: 0n,
  images: 0,
};
const TIMED = 2000;

async function main(dir: string, earlier: number): Promise<void> {
  const db = openDatabase(dir);
  const ledger = await openSqliteLedger(db, dir, { thread: false });
  await new AuthRepository(db).insertAccount("acct", "", 1);
  const now = Date.UTC(2026, 5, 15, 12);
  await ledger.credit({
    entryId: "funds",
    accountId: "acct",
    chain: "base",
    amount: 10n ** 15n,
    from: SYSTEM_MANUAL_CREDIT,
    memo: "",
    createdAt: now,
  });
  const hold = (id: string, createdAt = now): NewHold => ({
    id,
    accountId: "acct",
    requestId: id,
    keyId: "key",
    chain: "base",
    amount: 1000n,
    callKind: "text",
    model: "m",
    inputTokens: 1n,
    maxTokens: 1n,
    imageSize: "",
    imageCount: 0,
    createdAt,
  });
  for (let i = 0; i < earlier; i++) {
    await ledger.placeHold(hold(`earlier${i}`, now - (i % 15) * 86_400_000));
    await ledger.settle(`earlier${i}`, 500n, USAGE, now, "");
  }
  /** p50 and p99 of placeHold in ms, each hold voided before the next. */
  const timed = async (label: string) => {
    const ms: number[] = [];
    for (let i = 0; i < TIMED; i++) {
      const started = performance.now();
      const placed = await ledger.placeHold(hold(`${label}${i}`));
      ms.push(performance.now() - started);
      if (placed.kind !== "placed") throw new Error(`hold ${placed.kind}`);
      await ledger.void(`${label}${i}`, "released", now);
    }
    ms.sort((a, b) => a - b);
    return { p50: ms[TIMED / 2]!, p99: ms[Math.floor(TIMED * 0.99)]! };
  };
  const uncapped = await timed("uncapped");
  await ledger.setSpendCap(
    { accountId: "acct", keyId: "key", chain: "base", period: "day", amount: 10n ** 14n },
    now,
  );
  await ledger.setSpendCap(
    { accountId: "acct", keyId: "", chain: "base", period: "month", amount: 10n ** 14n },
    now,
  );
  await ledger.setSpendCap(
    { accountId: "acct", keyId: "", chain: "base", period: "lifetime", amount: 10n ** 14n },
    now,
  );
  const capped = await timed("capped");
  await ledger.close();
  db.close();
  console.log(JSON.stringify({ holdsInPeriod: earlier + TIMED, uncapped, capped }));
}

await main(process.argv[2] ?? "", Number(process.argv[3] ?? 1000));
