import type { ChainWorkStores, Stores } from "../shared/store-set.js";
import { PgAccountStore, PgAuthStamp } from "./accounts.js";
import { auditPostgres } from "./audit.js";
import { PgChainRoles, PgChainWork } from "./chain-work.js";
import { openPostgres } from "./database.js";
import { PgIdempotency } from "./idempotency.js";
import { openImagePool, PgImageStore } from "./images.js";
import { PgLedger } from "./ledger.js";
import { PgSessionStore } from "./sessions.js";

/**
 * Every port on one PostgreSQL pool (the schema brought up to date first). `listen`: a serving
 * process learns of auth changes by notification (see {@link PgAuthStamp}); a one-shot command
 * reads the counter when it needs it.
 */
export async function openPgStores(url: string, poolSize: number, listen: boolean): Promise<Stores> {
  const pool = await openPostgres(url, poolSize);
  let stamp: PgAuthStamp | undefined;
  if (listen) {
    stamp = new PgAuthStamp(url);
    try {
      await stamp.start();
    } catch (error) {
      await pool.end();
      throw error;
    }
  }
  const ledger = new PgLedger(pool);
  // Not on `pool`: `url` images get a small pool of their own (see openImagePool).
  const images = openImagePool(url);
  return {
    kind: "postgres",
    accounts: new PgAccountStore(pool, stamp),
    sessions: new PgSessionStore(pool),
    ledger,
    chainWork: new PgChainWork(pool),
    idempotency: new PgIdempotency(pool),
    images: new PgImageStore(images),
    probe: {
      name: "database",
      required: true,
      check: async () => {
        await pool.query("SELECT 1");
        return `postgres ok (${pool.totalCount} connections, ${pool.waitingCount} waiting)`;
      },
    },
    audit: () => auditPostgres(pool),
    close: async () => {
      await stamp?.close();
      // Its kept resolutions get a last try while the pool is still open.
      await ledger.close();
      await pool.end();
      await images.end();
    },
  };
}

/**
 * The chains worker's store on PostgreSQL: a small pool for its writes, and one connection of
 * its own holding the chain roles it wins (session advisory locks).
 */
export async function openPgChainWork(url: string, poolSize: number): Promise<ChainWorkStores> {
  const pool = await openPostgres(url, Math.min(poolSize, 4));
  return {
    store: new PgChainWork(pool),
    roles: new PgChainRoles(url),
    close: () => pool.end(),
  };
}
