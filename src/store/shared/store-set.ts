import type { HealthProbe } from "../../core/health-service.js";
import type { AccountStore, SessionStore } from "../../core/ports/accounts.js";
import type { ChainRoles, ChainWorkStore } from "../../core/ports/chain-work.js";
import type { IdempotencyStore } from "../../core/ports/idempotency.js";
import type { ImageStore } from "../../core/ports/image-store.js";
import type { LedgerStore, OnchainStore } from "../../core/ports/ledger.js";
import type { LedgerBatches } from "../../core/ports/metrics.js";
import type { X402Store } from "../../core/ports/x402.js";

/** Where the money and the accounts are kept, as the configuration chose. */
export type StoreChoice =
  | { readonly kind: "sqlite"; readonly dataDir: string }
  | {
      readonly kind: "postgres";
      /** Where the pooled, transaction-scoped work goes (possibly through a transaction pooler). */
      readonly url: string;
      /**
       * Where the session-level connections go: the auth listener, the chain roles, the
       * migration lock (docs/deployment.md, "Behind PgBouncer"); `url` unless configured apart.
       */
      readonly directUrl: string;
      readonly poolSize: number;
      /** Where a serving host keeps its resolution spool (docs/store.md); none when undefined. */
      readonly dataDir?: string;
    };

/**
 * Every port a runtime needs from its store, on one engine: SQLite in the data directory (one
 * host) or PostgreSQL (any number of gateway hosts and chains workers).
 */
export interface Stores {
  readonly kind: StoreChoice["kind"];
  readonly accounts: AccountStore;
  readonly sessions: SessionStore;
  readonly ledger: LedgerStore & OnchainStore & X402Store;
  /** What the chains worker and the deposit-address book write through. */
  readonly chainWork: ChainWorkStore;
  /** The Idempotency-Keys of billed calls. */
  readonly idempotency: IdempotencyStore;
  /**
   * Where `url` images are kept when the store is shared by several hosts (PostgreSQL); absent on
   * SQLite, whose one host keeps them as files in its data directory.
   */
  readonly images?: ImageStore;
  /** The store's health check (required: without it nothing can be billed). */
  readonly probe: HealthProbe;
  /**
   * PostgreSQL's holds and resolutions sent together since start (src/store/postgres/batches.ts),
   * for the metrics; absent on SQLite, whose writer thread commits in groups of its own.
   */
  batches?(): LedgerBatches;
  /** The ledger audit (see ledger-audit.ts) on this store, in one consistent snapshot. */
  audit(): Promise<string[]>;
  /** Finishes the writes in flight and closes every connection. */
  close(): Promise<void>;
}

/** What the chains worker works through: the store, and who runs which chain. */
export interface ChainWorkStores {
  readonly store: ChainWorkStore;
  readonly roles: ChainRoles | undefined;
  close(): Promise<void>;
}
