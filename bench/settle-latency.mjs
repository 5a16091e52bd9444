// Settle latency with the settlement outbox (the intent is written in the settle transaction),
// one settle at a time through the ledger's group-committed writes on this thread.
// Run after `make build`: node bench/settle-latency.mjs backed|credit
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Billing } from "../dist/src/core/billing/billing.js";
import { defaultPriceCatalog } from "../dist/src/core/billing/default-catalog.js";
import { defaultChainRegistry } from "../dist/src/core/billing/default-chains.js";
import { AuthRepository } from "../dist/src/store/sqlite/accounts.js";
import { openDatabase } from "../dist/src/store/sqlite/database.js";
import { LedgerRepository } from "../dist/src/store/sqlite/ledger.js";
import { groupCommittedWrites, SqliteLedger } from "../dist/src/store/sqlite/ledger-store.js";
import { OnchainRepository } from "../dist/src/store/sqlite/onchain.js";

const db = openDatabase(mkdtempSync(join(tmpdir(), "bench-")));
new AuthRepository(db).createAccount("acct_b", "b", Date.now());
const repo = new OnchainRepository(db, new LedgerRepository(db));
const billing = new Billing({
  ledger: new SqliteLedger(db, groupCommittedWrites(db)),
  chains: defaultChainRegistry(),
  catalog: defaultPriceCatalog(),
  now: Date.now,
});
const mode = process.argv[2];
if (mode === "backed")
  repo.recordScan(
    "base",
    0n,
    1n,
    [
      {
        txHash: "0x1",
        index: 0,
        position: 0n,
        from: "0x",
        to: "0x",
        accountId: "acct_b",
        onchainAmount: 10n ** 15n,
        amount: 10n ** 15n,
      },
    ],
    1,
  );
else
  await billing.credit({
    accountId: "acct_b",
    chain: "base",
    amount: 10n ** 15n,
    reason: "bench",
    creditId: "",
  });
const usage = {
  inputTokens: 1000n,
  outputTokens: 200n,
  cacheWrite5mTokens: 0n,
  cacheWrite1hTokens: 0n,
  cacheReadTokens: 0n,
  images: 0,
};
const n = 3000;
const times = [];
for (let i = 0; i < n; i++) {
  const h = await billing.hold({
    accountId: "acct_b",
    requestId: `r${i}`,
    keyId: "",
    chain: "base",
    call: { kind: "text", model: "model-haiku-4-5", inputTokens: 1000n, maxTokens: 1000n },
  });
  const t = process.hrtime.bigint();
  await billing.settle(h.hold.id, usage);
  times.push(Number(process.hrtime.bigint() - t) / 1000);
}
times.sort((a, b) => a - b);
console.log(
  `${mode}: settle (with outbox intent) p50 ${times[(n / 2) | 0].toFixed(0)} µs, p99 ${times[(n * 0.99) | 0].toFixed(0)} µs over ${n} settles (synchronous=FULL, file DB)`,
);
