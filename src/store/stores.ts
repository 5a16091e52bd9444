import { auditLedger } from "./shared/ledger-audit.js";
import type { ChainWorkStores, StoreChoice, Stores } from "./shared/store-set.js";
import { AuthRepository } from "./sqlite/accounts.js";
import { SqliteChainWork } from "./sqlite/chain-work.js";
import { openDatabase } from "./sqlite/database.js";
import { SqliteIdempotency } from "./sqlite/idempotency.js";
import { openSqliteLedger } from "./sqlite/ledger-store.js";
import { SessionRepository } from "./sqlite/sessions.js";

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
    const { openPgStores } = await import("./postgres/stores.js");
    return await openPgStores(choice.url, choice.poolSize, serving);
  }
  const db = openDatabase(choice.dataDir);
  try {
    const ledger = await openSqliteLedger(db, choice.dataDir, { thread: ledgerThread });
    const ping = db.prepare("SELECT 1");
    return {
      kind: "sqlite",
      accounts: new AuthRepository(db),
      sessions: new SessionRepository(db, ledger),
      ledger,
      chainWork: new SqliteChainWork(db),
      idempotency: new SqliteIdempotency(db),
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

/**
 * Opens the store for a chains worker, on a connection (or pool) of its own. On PostgreSQL it
 * also competes for each chain's role, so that one process across every host runs each chain.
 */
export async function openChainWorkStores(choice: StoreChoice): Promise<ChainWorkStores> {
  if (choice.kind === "postgres") {
    const { openPgChainWork } = await import("./postgres/stores.js");
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
