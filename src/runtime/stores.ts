import type { KeyObject } from "node:crypto";
import type { Config } from "../config/config.js";
import { receiptKeyFromMasterSecret } from "../core/billing/receipts.js";
import { dataDirReceiptKey } from "../store/shared/receipt-key-file.js";
import type { StoreChoice, Stores } from "../store/shared/store-set.js";
import { openStores } from "../store/stores.js";
import type { Assembly } from "./resources.js";

/** The configured store: PostgreSQL when TOLLGATE_DATABASE_URL names one, else SQLite in the data dir. */
export function storeChoice(config: Config): StoreChoice {
  return config.databaseUrl === undefined
    ? { kind: "sqlite", dataDir: config.dataDir }
    : {
        kind: "postgres",
        url: config.databaseUrl,
        directUrl: config.databaseDirectUrl ?? config.databaseUrl,
        poolSize: config.databasePoolSize,
        dataDir: config.dataDir,
      };
}

/**
 * The gateway's stores. On SQLite a serving gateway group-commits the ledger's writes in a
 * writer thread; the operator's command does a few writes, committed on this thread (a writer
 * thread would cost more).
 */
export async function openGatewayStores(a: Assembly): Promise<Stores> {
  const stores = await openStores(storeChoice(a.config), { serving: a.mode !== "operator" });
  a.parts.stores = stores;
  a.stack.defer(() => stores.close());
  return stores;
}

/**
 * The key receipts are signed with: derived from the master secret (every host alike); without
 * one (chains off), kept in the data dir. The operator's CLI signs none: it reads and creates no
 * key file (a read-only command creates nothing).
 */
export function openReceiptKey(a: Assembly, masterSecret: Uint8Array | undefined): KeyObject | undefined {
  if (a.mode === "operator") return undefined;
  return masterSecret === undefined
    ? dataDirReceiptKey(a.config.dataDir)
    : receiptKeyFromMasterSecret(masterSecret);
}
