import type pg from "pg";
import { isStorageFull, isStoreUnavailable, storageFull, storeUnavailable } from "../../core/errors.js";
import type { KeptRefusal } from "../shared/kept-resolutions.js";
import { sqlState } from "./queries.js";

/**
 * The errors of a PostgreSQL server that cannot be reached, is restarting or has failed over:
 * the socket's (refused, reset, timed out, unreachable), SQLSTATE class 08 (connection
 * exception), 57P01–57P03 (admin or crash shutdown, cannot connect now: starting or recovering),
 * 53300 (too many connections), 25006 (read-only transaction: the host named is a standby now).
 */
const UNREACHABLE_CODES: ReadonlySet<string> = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
  "57P01",
  "57P02",
  "57P03",
  "53300",
  "25006",
]);

/** What `pg` throws, without a code, for a connection that ended under a query or a pool that timed out. */
const UNREACHABLE_MESSAGES =
  /^(Connection terminated|Client has encountered a connection error|Client was closed and is not queryable|timeout exceeded when trying to connect|Connection terminated unexpectedly)/;

/** Whether `error` says the server could not be reached (the statement may or may not have committed). */
export function isUnreachable(error: unknown): boolean {
  if (isStoreUnavailable(error)) return true;
  const code = sqlState(error);
  if (code !== undefined && (UNREACHABLE_CODES.has(code) || code.startsWith("08"))) return true;
  return error instanceof Error && UNREACHABLE_MESSAGES.test(error.message);
}

/**
 * The PostgreSQL ledger's kept refusals: a full disk (53100) and an unreachable server. Either
 * way the resolution is kept (and spooled) and retried; a retry of one that did commit before
 * the connection dropped changes nothing (a hold resolves once).
 */
export const pgKeptRefusal: KeptRefusal = (error) => {
  if (isStorageFull(error)) return storageFull();
  if (isUnreachable(error)) return storeUnavailable();
  return undefined;
};

/**
 * Makes `pool.query` reject with {@link storeUnavailable} (the original as its cause) when the
 * server cannot be reached, so that a call whose hold cannot be written is answered 503 with a
 * reason rather than a masked 500. Other errors pass as they are.
 */
export function unreachableAsUnavailable(pool: pg.Pool): void {
  const query = pool.query.bind(pool) as (...args: unknown[]) => unknown;
  pool.query = ((...args: unknown[]) => {
    const result = query(...args);
    if (!(result instanceof Promise)) return result;
    return result.catch((error: unknown) => {
      if (isStoreUnavailable(error) || !isUnreachable(error)) throw error;
      const unavailable = storeUnavailable();
      unavailable.cause = error;
      throw unavailable;
    });
  }) as typeof pool.query;
}
