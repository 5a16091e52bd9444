import { openResolutionSpool } from "../shared/resolution-spool.js";
import type { ChainWorkStores, Stores } from "../shared/store-set.js";
import { AuthRepository } from "./accounts.js";
import { auditLedger } from "./audit.js";
import { SqliteChainWork } from "./chain-work.js";
import { openDatabase } from "./database.js";
import { SqliteIdempotency } from "./idempotency.js";
import { openSqliteLedger } from "./ledger-store.js";
import { SessionRepository } from "./sessions.js";

/**
 * Every port on the SQLite database in `dataDir` (its schema brought up to date first).
 * `ledgerThread` (a serving process): ledger writes commit in a worker thread of their own rather
 * than on this one, and the settles and voids the disk refuses are spooled (docs/store.md).
 */
export async function openSqliteStores(dataDir: string, ledgerThread: boolean): Promise<Stores> {
  const db = openDatabase(dataDir);
  try {
    const ledger = await openSqliteLedger(db, dataDir, { thread: ledgerThread });
    // A serving process keeps the settles and voids the disk refuses in a spool beside the database.
    if (ledgerThread && dataDir !== ":memory:") {
      try {
        await ledger.keepIn(await openResolutionSpool(dataDir));
      } catch (error) {
        await ledger.close();
        throw error;
      }
    }
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

/** The chains worker's store on SQLite: a connection of its own; one host runs every chain. */
export function openSqliteChainWork(dataDir: string): ChainWorkStores {
  const db = openDatabase(dataDir);
  return {
    store: new SqliteChainWork(db),
    roles: undefined,
    close: async () => {
      db.close();
    },
  };
}
