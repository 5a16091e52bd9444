import type { SpendCap } from "../../core/billing/spend-caps.js";
import { isStorageFull, storageFull } from "../../core/errors.js";
import type {
  BacklogRow,
  BalanceRow,
  DepositRow,
  HoldState,
  LedgerStore,
  OnchainStore,
  RaiseRow,
  ResolveResult,
  SettlementView,
  TransferRow,
  UsageCounts,
} from "../../core/ports/ledger.js";
import type { X402PaymentRow, X402Store } from "../../core/ports/x402.js";
import { KeptResolutions } from "../shared/kept-resolutions.js";
import type { Resolution, ResolutionSpool } from "../shared/resolution-spool.js";
import type { Db } from "./database.js";
import { GroupCommit } from "./group-commit.js";
import { LedgerRepository } from "./ledger.js";
import {
  eachWrite,
  LEDGER_WRITES,
  type LedgerWriteMethods,
  type LedgerWriteOp,
  type LedgerWrites,
  type SyncLedgerWrites,
} from "./ledger-writes.js";
import { OnchainRepository } from "./onchain.js";
import { nonceStatements } from "./sessions.js";
import { X402Repository } from "./x402.js";

/**
 * The writes whose repository method opens a transaction of its own (LedgerRepository's `tx`):
 * inside a group that is a savepoint, which rolls the write back alone when it throws, so the
 * group wraps them in no other (GroupCommit.run's `ownTransaction`).
 */
const OWN_TRANSACTION: ReadonlySet<LedgerWriteOp> = new Set([
  "placeHold",
  "raiseHold",
  "settle",
  "void",
  "expireHolds",
  "credit",
]);

/**
 * The writes on a connection of this thread, group-committed: the writes asked for in one turn
 * of the event loop share one transaction and one fsync (see {@link GroupCommit}). Used by the
 * ledger worker thread itself, by an in-memory database, and by short-lived processes (the CLI)
 * for which a thread would cost more than it saves. `statements` must name every write of
 * LEDGER_WRITES (tsc refuses one missing).
 */
export function groupCommittedWrites(db: Db): LedgerWrites {
  const ledger = new LedgerRepository(db);
  const onchain = new OnchainRepository(db, ledger);
  const x402 = new X402Repository(db, ledger);
  const commits = new GroupCommit(db);
  const nonces = nonceStatements(db);
  const statements: SyncLedgerWrites = {
    placeHold: (hold) => ledger.placeHold(hold),
    raiseHold: (raise) => ledger.raiseHold(raise),
    settle: (holdId, charge, usage, now, charges) => ledger.settle(holdId, charge, usage, now, charges),
    void: (holdId, status, now) => ledger.void(holdId, status, now),
    expireHolds: (cutoff, now, limit) => ledger.expireHolds(cutoff, now, limit),
    credit: (credit) => ledger.credit(credit),
    setDefaultChain: (accountId, chain, now) => ledger.setDefaultChain(accountId, chain, now),
    withdraw: (withdrawal) => onchain.withdraw(withdrawal),
    authoriseX402: (payment) => x402.authorise(payment),
    recordX402Collection: (collection) => x402.collect(collection),
    markX402Collecting: (id, now) => x402.markCollecting(id, now),
    closeX402: (closing) => x402.close(closing),
    clearFailedX402: (payer, now) => x402.clearFailed(payer, now),
    insertNonce: (nonce, expiresAt) => nonces.insert(nonce, expiresAt),
    purgeNonces: (now) => nonces.purge(now),
  };
  return {
    ...eachWrite((op, ...args) =>
      commits.run(
        () => (statements[op] as (...a: readonly unknown[]) => unknown)(...args),
        OWN_TRANSACTION.has(op),
      ),
    ),
    // Everything queued so far is in the group this empty write joins.
    close: () => commits.run(() => undefined),
  };
}

/** The writes SqliteLedger wraps in its kept resolutions rather than forwarding as they are. */
const KEPT_WRITES = ["settle", "void", "expireHolds"] as const satisfies readonly LedgerWriteOp[];
type KeptWrites = (typeof KEPT_WRITES)[number];

/**
 * Every listed write (LEDGER_WRITES) as `writes`' own, but for the three SqliteLedger wraps in
 * its kept resolutions: a call goes straight to `writes` (to the writer thread), not through a
 * forwarding method.
 */
abstract class WritesThroughBase {
  constructor(protected readonly writes: LedgerWrites) {
    const kept: readonly string[] = KEPT_WRITES;
    for (const op of LEDGER_WRITES) {
      if (!kept.includes(op))
        Object.defineProperty(this, op, {
          value: writes[op].bind(writes),
          writable: true,
          configurable: true,
        });
    }
  }
}
const WritesThrough = WritesThroughBase as unknown as abstract new (
  writes: LedgerWrites,
) => WritesThroughBase & Omit<LedgerWriteMethods, KeptWrites>;

/**
 * The ledger, onchain and x402 ports over SQLite. Reads run on `db` in this thread (WAL readers
 * never wait for the writer, and see every write the moment its answer arrives); writes go to
 * `writes`, by default a worker thread with a connection of its own (ledger-writer.ts starts
 * it, ledger-writer-thread.ts runs in it), so the request loop never waits on a commit's fsync.
 * The writes are its base class's (WritesThrough, built from LEDGER_WRITES); the settles and
 * voids the disk refused are kept here.
 */
export class SqliteLedger extends WritesThrough implements LedgerStore, OnchainStore, X402Store {
  readonly #ledger: LedgerRepository;
  readonly #onchain: OnchainRepository;
  readonly #x402: X402Repository;
  /** Settles and voids the full disk refused, written when space returns (see KeptResolutions). */
  readonly #kept = new KeptResolutions(
    (r: Resolution) =>
      r.kind === "settle"
        ? this.writes.settle(r.holdId, r.charge, r.usage, r.now, r.charges)
        : this.writes.void(r.holdId, r.status, r.now),
    (error) => (isStorageFull(error) ? storageFull() : undefined),
  );

  constructor(db: Db, writes: LedgerWrites) {
    super(writes);
    this.#ledger = new LedgerRepository(db);
    this.#onchain = new OnchainRepository(db, this.#ledger);
    this.#x402 = new X402Repository(db, this.#ledger);
  }

  async accountExists(accountId: string): Promise<boolean> {
    return this.#ledger.accountExists(accountId);
  }

  async billingAccount(accountId: string): Promise<{ defaultChain: string | undefined } | undefined> {
    return this.#ledger.billingAccount(accountId);
  }

  async defaultChain(accountId: string): Promise<string | undefined> {
    return this.#ledger.defaultChain(accountId);
  }

  async balance(account: string, chain: string): Promise<BalanceRow> {
    return this.#ledger.balance(account, chain);
  }

  async balances(account: string): Promise<BalanceRow[]> {
    return this.#ledger.balances(account);
  }

  async getHold(holdId: string): Promise<HoldState | undefined> {
    return this.#ledger.getHold(holdId);
  }

  async listHolds(accountId: string, beforeSeq: bigint, limit: number): Promise<HoldState[]> {
    return this.#ledger.listHolds(accountId, beforeSeq, limit);
  }

  async holdRaises(holdId: string): Promise<RaiseRow[]> {
    return this.#ledger.holdRaises(holdId);
  }

  settle(
    holdId: string,
    charge: bigint,
    usage: UsageCounts,
    now: number,
    charges: string,
  ): Promise<ResolveResult> {
    return this.#kept.run({ kind: "settle", holdId, charge, usage, now, charges });
  }

  void(holdId: string, status: "released" | "expired", now: number): Promise<ResolveResult> {
    return this.#kept.run({ kind: "void", holdId, status, now });
  }

  /**
   * Keeps the resolutions the disk refuses in `spool` too, and writes (or keeps) the ones a
   * previous process left there: a serving process's, before it serves or sweeps.
   */
  keepIn(spool: ResolutionSpool): Promise<void> {
    return this.#kept.useSpool(spool);
  }

  /** Writes the kept resolutions first: a hold whose settlement waits for space is not voided. */
  async expireHolds(cutoff: number, now: number, limit: number): Promise<number> {
    await this.#kept.flush();
    return this.writes.expireHolds(cutoff, now, limit);
  }

  /** Written on this thread's connection: rare, and read by the writer's next hold. */
  async setSpendCap(cap: SpendCap, now: number): Promise<void> {
    this.#ledger.setSpendCap(cap, now);
  }

  async clearSpendCap(cap: Omit<SpendCap, "amount">): Promise<boolean> {
    return this.#ledger.clearSpendCap(cap);
  }

  async spendCaps(accountId: string): Promise<SpendCap[]> {
    return this.#ledger.spendCaps(accountId);
  }

  async capSpent(cap: SpendCap, since: number): Promise<bigint> {
    return this.#ledger.capSpent(cap, since);
  }

  async settlements(holdIds: readonly string[]): Promise<Map<string, SettlementView>> {
    return this.#ledger.outbox.views(holdIds);
  }

  async listDeposits(accountId: string, limit: number): Promise<DepositRow[]> {
    return this.#onchain.listDeposits(accountId, limit);
  }

  async listTransfers(
    accountId: string,
    kind: "settlement" | "withdrawal",
    beforeSeq: bigint,
    limit: number,
  ): Promise<TransferRow[]> {
    return this.#onchain.listTransfers(accountId, kind, beforeSeq, limit);
  }

  async transfer(id: string): Promise<TransferRow | undefined> {
    return this.#onchain.transfer(id);
  }

  async backlog(): Promise<BacklogRow[]> {
    return this.#onchain.backlog();
  }

  async failedX402Payments(payer: string, limit: number): Promise<X402PaymentRow[]> {
    return this.#x402.failed(payer, limit);
  }

  async x402Payment(id: string): Promise<X402PaymentRow | undefined> {
    return this.#x402.payment(id);
  }

  async x402Payments(holdIds: readonly string[]): Promise<Map<string, X402PaymentRow>> {
    return this.#x402.payments(holdIds);
  }

  async openX402Payments(createdBefore: number, limit: number): Promise<X402PaymentRow[]> {
    return this.#x402.open(createdBefore, limit);
  }

  /**
   * Finishes the writes in flight, tries the kept resolutions one last time (the spool keeps
   * those still refused), and stops the writer (the read connection is the caller's).
   */
  async close(): Promise<void> {
    await this.#kept.close();
    return this.writes.close();
  }
}

/**
 * The SQLite ledger over an open database. `thread`: writes go to a worker thread of their own
 * (the serving process: its request loop never waits on a commit); otherwise they are
 * group-committed on `db` in this thread (the CLI, and an in-memory database, which another
 * thread cannot open).
 */
export async function openSqliteLedger(
  db: Db,
  dataDir: string | ":memory:",
  { thread }: { readonly thread: boolean },
): Promise<SqliteLedger> {
  if (!thread || dataDir === ":memory:") return new SqliteLedger(db, groupCommittedWrites(db));
  const { startLedgerWriter } = await import("./ledger-writer.js");
  return new SqliteLedger(db, await startLedgerWriter(dataDir));
}
