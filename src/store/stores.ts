import type { ChainWorkStores, StoreChoice, Stores } from "./shared/store-set.js";
import { openSqliteChainWork, openSqliteStores } from "./sqlite/stores.js";

/**
 * Opens the configured store and brings its schema up to date. `serving` (a process that serves
 * calls rather than one command): on SQLite, ledger writes commit in a worker thread of their
 * own rather than on this one; on PostgreSQL, auth changes arrive by notification. A serving
 * process keeps the resolutions the store refuses in a spool in its data dir (docs/store.md).
 */
export async function openStores(
  choice: StoreChoice,
  { serving }: { readonly serving: boolean },
): Promise<Stores> {
  if (choice.kind === "postgres") {
    // Loaded only here: processes on SQLite never load the PostgreSQL client.
    const { openPgStores } = await import("./postgres/stores.js");
    return await openPgStores(choice, serving);
  }
  return await openSqliteStores(choice.dataDir, serving);
}

/**
 * Opens the store for a chains worker, on a connection (or pool) of its own. On PostgreSQL it
 * also competes for each chain's role, so that one process across every host runs each chain.
 */
export async function openChainWorkStores(choice: StoreChoice): Promise<ChainWorkStores> {
  if (choice.kind === "postgres") {
    const { openPgChainWork } = await import("./postgres/stores.js");
    return await openPgChainWork(choice);
  }
  return openSqliteChainWork(choice.dataDir);
}
