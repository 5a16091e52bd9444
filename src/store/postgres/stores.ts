import { openResolutionSpool } from "../shared/resolution-spool.js";
import type { ChainWorkStores, StoreChoice, Stores } from "../shared/store-set.js";
import { PgAccountStore, PgAuthStamp } from "./accounts.js";
import { auditPostgres } from "./audit.js";
import { PgChainRoles, PgChainWork } from "./chain-work.js";
import { openPostgres } from "./database.js";
import { PgIdempotency } from "./idempotency.js";
import { openImagePool, PgImageStore } from "./images.js";
import { PgLedger } from "./ledger.js";
import { PgSessionStore } from "./sessions.js";
import { unreachableAsUnavailable } from "./unreachable.js";

/** Where a process's PostgreSQL connections go (see {@link StoreChoice}). */
type PgChoice = Extract<StoreChoice, { kind: "postgres" }>;

/**
 * Every port on one PostgreSQL pool on `url` (the schema brought up to date first). `listen`: a
 * serving process learns of auth changes by notification (see {@link PgAuthStamp}), on a
 * connection of its own to `directUrl` (LISTEN needs a real session, which a transaction pooler
 * does not keep); a one-shot command reads the counter when it needs it. A serving process
 * keeps the settles and voids the server refuses in a spool in `dataDir` (replayed here, before
 * anything is served: docs/store.md).
 */
export async function openPgStores(
  { url, directUrl, poolSize, dataDir }: PgChoice,
  listen: boolean,
): Promise<Stores> {
  const pool = await openPostgres(url, poolSize, directUrl);
  unreachableAsUnavailable(pool);
  let stamp: PgAuthStamp | undefined;
  if (listen) {
    stamp = new PgAuthStamp(directUrl);
    try {
      await stamp.start();
    } catch (error) {
      await pool.end();
      throw error;
    }
  }
  // A serving host keeps its accounts' billing settings, told of changes by the same listener.
  const ledger = new PgLedger(pool, stamp);
  if (listen && dataDir !== undefined) {
    try {
      await ledger.keepIn(await openResolutionSpool(dataDir));
    } catch (error) {
      await stamp?.close();
      await pool.end();
      throw error;
    }
  }
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
    batches: () => ledger.batchesSent,
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
 * The chains worker's store on PostgreSQL: a small pool on `url` for its writes, and one
 * connection of its own to `directUrl` holding the chain roles it wins (session advisory locks).
 */
export async function openPgChainWork({ url, directUrl, poolSize }: PgChoice): Promise<ChainWorkStores> {
  const pool = await openPostgres(url, Math.min(poolSize, 4), directUrl);
  return {
    store: new PgChainWork(pool),
    roles: new PgChainRoles(directUrl),
    close: () => pool.end(),
  };
}
