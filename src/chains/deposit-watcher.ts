import { onchainToLedger } from "../core/billing/money.js";
import type { ChainWorkStore } from "../core/ports/chain-work.js";
import type { ChainAdapter, ObservedDeposit } from "../core/ports/chains.js";
import type { DepositToCredit } from "../core/ports/ledger.js";
import type { AddressBook } from "./address-book.js";

/** How a watcher scans. */
export interface DepositWatcherOptions {
  /** The most positions one `scanDeposits` call covers (RPCs cap log ranges). */
  readonly maxRange: bigint;
  /**
   * Where a chain never scanned before starts: `genesis` (dev chains: everything counts) or
   * `finalized` (a configured chain: from the finalized position at first start).
   */
  readonly startAt: "genesis" | "finalized";
  readonly now: () => number;
}

/** Where a watcher stands, for health and metrics. */
export interface WatcherStatus {
  /** The newest position the chain reported. */
  readonly head: bigint | undefined;
  /** The newest position that met the finality rule. */
  readonly finalized: bigint | undefined;
  /** The next position to scan: everything below it is credited. */
  readonly cursor: bigint | undefined;
  /** Final positions not yet scanned (finalized − cursor + 1, at least 0). */
  readonly lag: bigint | undefined;
  /** Unix ms of the last completed scan; 0 before the first. */
  readonly lastScanAt: number;
}

/**
 * The deposit watcher of one chain. Each {@link tick} scans every final position past its
 * cursor for transfers of the chain's asset to deposit addresses, and credits them with the
 * cursor's advance in one transaction per range (no gap, no duplicate after a crash). Deposits
 * above the finality line are only listed as pending, never credited: a reorg or revert there
 * simply makes them disappear.
 */
export class DepositWatcher {
  private status: WatcherStatus = {
    head: undefined,
    finalized: undefined,
    cursor: undefined,
    lag: undefined,
    lastScanAt: 0,
  };

  /** Whether the last tick left pending rows (starts true: a previous process may have). */
  private pendingListed = true;

  constructor(
    private readonly adapter: ChainAdapter,
    private readonly addresses: AddressBook,
    private readonly repo: ChainWorkStore,
    private readonly options: DepositWatcherOptions,
  ) {}

  /** The last tick's view of the chain. */
  get state(): WatcherStatus {
    return this.status;
  }

  /** Scans up to the finality line and credits what it finds; returns how many deposits it credited. */
  async tick(): Promise<number> {
    const chain = this.adapter.chain;
    await this.addresses.refresh();
    const finalized = await this.adapter.finalizedPosition();
    let cursor = await this.repo.cursor(chain.id);
    if (cursor === undefined) {
      const start = this.options.startAt === "genesis" ? 0n : finalized < 0n ? 0n : finalized + 1n;
      await this.repo.initCursor(chain.id, start, this.options.now());
      cursor = (await this.repo.cursor(chain.id))!;
    }
    let credited = 0;
    while (cursor <= finalized) {
      const last = min(finalized, cursor + this.options.maxRange - 1n);
      const found = await this.adapter.scanDeposits(cursor, last, this.addresses.addresses());
      const deposits = this.toCredit(found);
      if (await this.repo.recordScan(chain.id, cursor, last + 1n, deposits, this.options.now())) {
        credited += deposits.length;
        cursor = last + 1n;
      } else {
        // Another process moved the cursor: continue from where it is now.
        cursor = (await this.repo.cursor(chain.id))!;
      }
    }
    // Above the finality line: listed as pending so callers see their deposit coming.
    const head = (await this.adapter.health()).head ?? finalized;
    const pendingFrom = cursor > finalized ? cursor : finalized + 1n;
    const pending = this.toCredit(
      await this.adapter.pendingDeposits(pendingFrom, this.options.maxRange, this.addresses.addresses()),
    );
    // Skip the write (and its fsync) when there was nothing pending and still is not.
    if (pending.length > 0 || this.pendingListed)
      await this.repo.replacePending(chain.id, pending, this.options.now());
    this.pendingListed = pending.length > 0;
    const lag = finalized - cursor + 1n;
    this.status = { head, finalized, cursor, lag: lag < 0n ? 0n : lag, lastScanAt: this.options.now() };
    return credited;
  }

  private toCredit(found: readonly ObservedDeposit[]): DepositToCredit[] {
    const out: DepositToCredit[] = [];
    for (const d of found) {
      const accountId = this.addresses.accountOf(d.to);
      if (accountId === undefined) continue;
      out.push({
        txHash: d.txHash,
        index: d.index,
        position: d.position,
        from: d.from,
        to: d.to,
        accountId,
        onchainAmount: d.amount,
        amount: onchainToLedger(d.amount, this.adapter.chain.asset.decimals).ledger,
      });
    }
    return out;
  }
}

function min(a: bigint, b: bigint): bigint {
  return a < b ? a : b;
}
