import type { HealthProbe } from "../core/health-service.js";
import type { AccountStore, SessionStore } from "../core/ports/accounts.js";
import type { ChainRoles, ChainWorkStore } from "../core/ports/chain-work.js";
import type { LedgerStore, OnchainStore } from "../core/ports/ledger.js";
import { AuthRepository } from "./auth-repository.js";
import { type Db, openDatabase } from "./database.js";
import { auditLedger } from "./ledger-audit.js";
import { SessionRepository } from "./session-repository.js";
import { SqliteChainWork } from "./sqlite-chain-work.js";
import { openSqliteLedger } from "./sqlite-ledger.js";

/** Where the money and the accounts are kept, as the configuration chose. */
export type StoreChoice =
  | { readonly kind: "sqlite"; readonly dataDir: string }
  | { readonly kind: "postgres"; readonly url: string; readonly poolSize: number };

/**
 * Every port a runtime needs from its store, on one engine: SQLite in the data directory (one
 * host) or PostgreSQL (any number of gateway hosts and chains workers).
 */
export interface Stores {
  readonly kind: StoreChoice["kind"];
  readonly accounts: AccountStore;
  readonly sessions: SessionStore;
  readonly ledger: LedgerStore & OnchainStore;
  /** What the chains worker and the deposit-address book write through. */
  readonly chainWork: ChainWorkStore;
  /** The store's health check (required: without it nothing can be billed). */
  readonly probe: HealthProbe;
  /** The SQLite database, when the store is SQLite (tools and tests read it directly). */
  readonly db: Db | undefined;
  /** The ledger audit (see ledger-audit.ts) on this store, in one consistent snapshot. */
  audit(): Promise<string[]>;
  /** Finishes the writes in flight and closes every connection. */
  close(): Promise<void>;
}

/**
 * Opens the configured store and brings its schema up to date. `serving` (a process that serves
 * calls rather than one command): on SQLite, ledger writes commit in a worker thread of their
 * own rather than on this one; on PostgreSQL, auth changes arrive by notification.
 */
export async function openStores(
  choice: StoreChoice,
  { serving }: { readonly serving: boolean },
): Promise<Stores> {
  const ledgerThread = serving;
  if (choice.kind === "postgres") {
    // Loaded only here: processes on SQLite never load the PostgreSQL client.
    const { openPgStores } = await import("./postgres/pg-stores.js");
    return await openPgStores(choice.url, choice.poolSize, serving);
  }
  const db = openDatabase(choice.dataDir);
  try {
    const ledger = await openSqliteLedger(db, choice.dataDir, { thread: ledgerThread });
    const ping = db.prepare("SELECT 1");
    return {
      kind: "sqlite",
      accounts: new AuthRepository(db),
      sessions: new SessionRepository(db),
      ledger,
      chainWork: new SqliteChainWork(db),
      probe: {
        name: "database",
        required: true,
        check: () => {
          ping.get();
          return "sqlite ok";
        },
      },
      db,
      audit: async () => auditLedger(db),
      close: async () => {
        try {
          await ledger.close();
        } finally {
          db.close();
        }
      },
    };
  } catch (error) {
    db.close();
    throw error;
  }
}

/** What the chains worker works through: the store, and who runs which chain. */
export interface ChainWorkStores {
  readonly store: ChainWorkStore;
  readonly roles: ChainRoles | undefined;
  close(): Promise<void>;
}

/**
 * Opens the store for a chains worker, on a connection (or pool) of its own. On PostgreSQL it
 * also competes for each chain's role, so that one process across every host runs each chain.
 */
export async function openChainWorkStores(choice: StoreChoice): Promise<ChainWorkStores> {
  if (choice.kind === "postgres") {
    const { openPgChainWork } = await import("./postgres/pg-stores.js");
    return await openPgChainWork(choice.url, choice.poolSize);
  }
  const db = openDatabase(choice.dataDir);
  return {
    store: new SqliteChainWork(db),
    roles: undefined,
    close: async () => {
      db.close();
    },
  };
}
