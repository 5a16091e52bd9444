import { ConfigError, type Env, integer, url } from "./read.js";

/** Where the ledger and accounts are kept (docs/store.md). */
export interface StoreConfig {
  /**
   * `postgres://…`: the store is PostgreSQL, shared by every gateway host and chains worker
   * (docs/store.md); unset → SQLite in the data dir, the embedded default.
   */
  readonly databaseUrl: string | undefined;
  /**
   * Where the few session-level connections go (the auth listener's LISTEN, the chain roles'
   * advisory locks, the migration lock) when TOLLGATE_DATABASE_URL goes through a transaction
   * pooler such as PgBouncer (docs/deployment.md, "Behind PgBouncer"); unset → TOLLGATE_DATABASE_URL.
   */
  readonly databaseDirectUrl: string | undefined;
  /** Connections each process keeps to PostgreSQL. */
  readonly databasePoolSize: number;
}

const POSTGRES_URL = {
  schemes: ["postgres:", "postgresql:"],
  shape: "postgres://user:password@host:port/database",
  // A Unix socket: postgres://user:password@/database?host=/var/run/postgresql (docs/deployment.md).
  emptyHost: true,
};

export function storeConfig(env: Env): StoreConfig {
  const databaseUrl = url(env, "TOLLGATE_DATABASE_URL", {
    ...POSTGRES_URL,
    problem: "must be a postgres:// or postgresql:// URL (unset it for SQLite in TOLLGATE_DATA_DIR)",
  })?.raw;
  const databaseDirectUrl = url(env, "TOLLGATE_DATABASE_DIRECT_URL", {
    ...POSTGRES_URL,
    problem: "must be a postgres:// or postgresql:// URL reaching PostgreSQL itself, not a pooler",
  })?.raw;
  if (databaseDirectUrl !== undefined && databaseUrl === undefined) {
    throw new ConfigError(
      "TOLLGATE_DATABASE_DIRECT_URL",
      "is set but TOLLGATE_DATABASE_URL is not: the direct URL only complements a PostgreSQL store's URL",
    );
  }
  return {
    databaseUrl,
    databaseDirectUrl,
    databasePoolSize: integer(env, "TOLLGATE_DATABASE_POOL_SIZE", 10, 1, 1_000),
  };
}
