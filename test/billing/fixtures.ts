import { type Client, createClient, createRouterTransport } from "@connectrpc/connect";
import { expect } from "vitest";
import { Billing } from "../../src/core/billing/billing.js";
import { type ChainRegistry, parseChainRegistry } from "../../src/core/billing/chain-registry.js";
import { defaultPriceCatalog } from "../../src/core/billing/default-catalog.js";
import { DEFAULT_CHAINS_JSON, defaultChainRegistry } from "../../src/core/billing/default-chains.js";
import type { PriceCatalog } from "../../src/core/billing/price-catalog.js";
import type { CallSpec } from "../../src/core/billing/pricing.js";
import { operatorCallerResolver } from "../../src/core/caller.js";
import type { Core } from "../../src/core/core.js";
import { BillingService } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { AuthRepository } from "../../src/store/sqlite/accounts.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { type Db, openDatabase } from "../../src/store/sqlite/database.js";
import { groupCommittedWrites, SqliteLedger } from "../../src/store/sqlite/ledger-store.js";
import { coreOver } from "../helpers/core.js";

/** A billing core over its own database. */
export interface LedgerFixture {
  readonly db: Db;
  readonly billing: Billing;
  readonly accounts: AuthRepository;
  /** Creates an account and returns its id. */
  account(name?: string): string;
}

/** Opens a fresh billing core; `dataDir` defaults to a private in-memory database. */
export function ledgerFixture(
  options: { dataDir?: string; chains?: ChainRegistry; catalog?: PriceCatalog; now?: () => number } = {},
): LedgerFixture {
  const db = openDatabase(options.dataDir ?? ":memory:");
  const accounts = new AuthRepository(db);
  const billing = new Billing({
    ledger: new SqliteLedger(db, groupCommittedWrites(db)),
    chains: options.chains ?? defaultChainRegistry(),
    catalog: options.catalog ?? defaultPriceCatalog(),
    now: options.now ?? Date.now,
  });
  let n = 0;
  return {
    db,
    billing,
    accounts,
    account(name = "test") {
      const id = `acct_test${++n}${Math.random().toString(36).slice(2, 8)}`;
      accounts.createAccount(id, name, Date.now());
      return id;
    },
  };
}

/** Asserts the ledger's invariants (conservation, replay, no overdraft, hold consistency). */
export function expectSoundLedger(db: Db): void {
  expect(auditLedger(db)).toEqual([]);
}

/** Row counts of every ledger table: equal before and after means nothing was written. */
export function ledgerCounts(db: Db): Record<string, number> {
  const tables = [
    "ledger_entries",
    "holds",
    "hold_resolutions",
    "open_holds",
    "hold_raises",
    "ledger_balances",
    "billing_accounts",
  ];
  return Object.fromEntries(
    tables.map((t) => [t, (db.prepare(`SELECT count(*) AS n FROM ${t}`).get() as { n: number }).n]),
  );
}

/** A text call on the cheapest default model with a small, round worst case. */
export const SMALL_TEXT_CALL: CallSpec = {
  kind: "text",
  model: "model-haiku-4-5",
  inputTokens: 1000n,
  maxTokens: 1000n,
};

/** A core and a BillingService client acting as the operator, in-process. */
export function operatorBillingClient(db: Db, core: Core = coreOver(db)): Client<typeof BillingService> {
  const transport = createRouterTransport(core.routes, {
    router: core.routerOptionsFor(operatorCallerResolver),
  });
  return createClient(BillingService, transport);
}

/** The shipped registry as a mutable JSON document, to derive operator variants from. */
export function chainsJson(): { default_chain: string; chains: Record<string, unknown>[] } {
  return JSON.parse(JSON.stringify(DEFAULT_CHAINS_JSON));
}

/** The shipped registry with robinhood re-pointed at an 18-decimal dollar token. */
export function eighteenDecimalChains(): ChainRegistry {
  const json = chainsJson();
  json.chains[2] = {
    ...json.chains[2],
    asset: { symbol: "DAI", decimals: 18, address: "0x50c5725949A6F0c72E6C4a641F24049A917DB0Cb" },
  };
  return parseChainRegistry(json);
}
