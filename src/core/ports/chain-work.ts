import type { BacklogRow, DepositToCredit, TransferRow } from "./ledger.js";

/** A stored deposit address, as the watchers load them. */
export interface StoredAddress {
  readonly seq: number;
  readonly address: string;
  readonly accountId: string;
}

/**
 * What the chains worker (`src/chains/`: deposit watchers, settlement workers, address books)
 * asks of the store that keeps the money. Like the ledger port, every method answers only once
 * its write is durable, and money moves only inside the store's own transactions: a scan's
 * credits commit with its cursor, a batch's transfers with the intents they cover. SQLite
 * implements it for one host, PostgreSQL for several.
 */
export interface ChainWorkStore {
  /** Records an account's deposit address for a family (idempotent). */
  saveDepositAddress(family: string, accountId: string, address: string, now: number): Promise<void>;
  /** The stored deposit address of an account, if it has one yet. */
  depositAddressOf(accountId: string, family: string): Promise<string | undefined>;
  /** Deposit addresses of a family stored after `seq`, oldest first (a watcher loads only new ones). */
  addressesSince(family: string, seq: number): Promise<StoredAddress[]>;
  /** The watcher's next unscanned position on a chain, if it has scanned before. */
  cursor(chain: string): Promise<bigint | undefined>;
  /** Sets where a chain's watcher starts, unless it already has a cursor. */
  initCursor(chain: string, position: bigint, now: number): Promise<void>;
  /**
   * Credits the deposits of a scan of positions `from`..`next - 1` and moves the cursor to
   * `next`, in one transaction. A deposit already recorded is skipped (overlapping scans and
   * restarts credit nothing twice). If the cursor is no longer at `from` (another process
   * scanned meanwhile), nothing is written and false is returned.
   */
  recordScan(
    chain: string,
    from: bigint,
    next: bigint,
    deposits: readonly DepositToCredit[],
    now: number,
  ): Promise<boolean>;
  /** Replaces the chain's list of deposits seen above the finality line (display only). */
  replacePending(chain: string, rows: readonly DepositToCredit[], now: number): Promise<void>;
  /**
   * Groups unbatched settlement intents into transfers to the treasury: one per call
   * (`perCall`), or one per account whose oldest unbatched intent is older than `cutoff`.
   * Returns how many transfers it created.
   */
  batchIntents(
    chain: string,
    perCall: boolean,
    cutoff: number,
    treasury: string,
    newId: () => string,
    now: number,
  ): Promise<number>;
  /** Transfers of a chain that are due for work, signed ones first, oldest first. */
  openTransfers(chain: string, now: number, limit: number): Promise<TransferRow[]>;
  /** One transfer by id. */
  transfer(id: string): Promise<TransferRow | undefined>;
  /** Stores the signed transaction, before it is broadcast (only from `queued`). */
  markPrepared(id: string, txHash: string, raw: string, now: number): Promise<void>;
  /** The transaction was handed to the RPC; check on it again at `recheckAt`. */
  markSent(id: string, recheckAt: number, now: number): Promise<void>;
  markConfirmed(id: string, now: number): Promise<void>;
  /** The signed transaction failed or was dropped: the order is prepared anew at `retryAt`. */
  markRequeued(id: string, reason: string, retryAt: number, now: number): Promise<void>;
  /** A step failed (RPC outage, …): try again at `retryAt`, keeping the state. */
  markRetry(id: string, error: string, retryAt: number, now: number): Promise<void>;
  /** The settlement backlog and settled totals of every chain that has any. */
  backlog(): Promise<BacklogRow[]>;
  /**
   * One chain's backlog at a glance, for its health check: a bounded read (off the partial
   * indexes of unbatched intents and open transfers) whatever the size of the outbox.
   */
  backlogGlance(chain: string, atMost: number): Promise<BacklogGlance>;
}

/** What {@link ChainWorkStore.backlogGlance} sees of one chain's settlement backlog. */
export interface BacklogGlance {
  /** Calls not yet in a transfer plus transfers not yet confirmed, counted up to `atMost`. */
  readonly waiting: number;
  /** The newest error among (at most `atMost` of) the open transfers; "" when none. */
  readonly lastError: string;
}

/**
 * The right to run one chain's deposit watcher and settlement worker. Held by one process at a
 * time across every host on the store; a process that dies loses it, and another takes it over.
 */
export interface ChainRoles {
  /**
   * Takes the role for `chain`, or confirms it is still held: true while this process holds it.
   * Called before every tick; a false answer means another process runs the chain now.
   */
  hold(chain: string): Promise<boolean>;
  /** Gives up every role held (another process takes them over at its next try). */
  close(): Promise<void>;
}

/** Roles on a store only one process writes to (SQLite): always held. */
export const SOLE_PROCESS_ROLES: ChainRoles = {
  hold: async () => true,
  close: async () => {},
};
