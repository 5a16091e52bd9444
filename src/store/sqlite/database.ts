import { mkdirSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import { migrations as allMigrations, type Migration } from "./migrations.js";

/** The synchronous SQLite handle every repository is built on. */
export type Db = Database.Database;

/** File name of the database inside the data directory. */
export const DATABASE_FILE = "tollgate.db";

/**
 * Opens (creating if needed) the database in `dataDir`, sets the pragmas the money model relies
 * on, and applies pending migrations. `":memory:"` opens a private in-memory database.
 */
export function openDatabase(
  dataDir: string | ":memory:",
  migrations: readonly Migration[] = allMigrations,
): Db {
  let path = dataDir;
  if (dataDir !== ":memory:") {
    mkdirSync(dataDir, { recursive: true });
    path = join(dataDir, DATABASE_FILE);
  }
  const db = new Database(path);
  db.pragma("journal_mode = WAL");
  // FULL: a committed hold or settlement survives power loss, not just a process crash.
  db.pragma("synchronous = FULL");
  db.pragma("foreign_keys = ON");
  // Another process (the CLI, a second gateway) may hold the write lock briefly.
  db.pragma("busy_timeout = 5000");
  migrate(db, migrations);
  return db;
}

/** Applies every migration newer than the database's `user_version`, each in its own transaction. */
export function migrate(db: Db, migrations: readonly Migration[]): void {
  const current = db.pragma("user_version", { simple: true }) as number;
  const latest = migrations.at(-1)?.version ?? 0;
  if (current > latest) {
    throw new Error(`database schema version ${current} is newer than this build knows (${latest})`);
  }
  for (const migration of migrations) {
    if (migration.version <= current) continue;
    // IMMEDIATE: two processes starting together must not both apply the same migration.
    db.transaction(() => {
      const now = db.pragma("user_version", { simple: true }) as number;
      if (migration.version <= now) return;
      db.exec(migration.sql);
      db.pragma(`user_version = ${migration.version}`);
    }).immediate();
  }
}
