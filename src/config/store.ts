import { type Env, integer, url } from "./read.js";

/** Where the ledger and accounts are kept (docs/store.md). */
export interface StoreConfig {
  /**
   * `postgres://…`: the store is PostgreSQL, shared by every gateway host and chains worker
   * (docs/store.md); unset → SQLite in the data dir, the embedded default.
   */
  readonly databaseUrl: string | undefined;
  /** Connections each process keeps to PostgreSQL. */
  readonly databasePoolSize: number;
}

export function storeConfig(env: Env): StoreConfig {
  return {
    databaseUrl: url(env, "TOLLGATE_DATABASE_URL", {
      schemes: ["postgres:", "postgresql:"],
      shape: "postgres://user:password@host:port/database",
      problem: "must be a postgres:// or postgresql:// URL (unset it for SQLite in TOLLGATE_DATA_DIR)",
    })?.raw,
    databasePoolSize: integer(env, "TOLLGATE_DATABASE_POOL_SIZE", 10, 1, 1_000),
  };
}
