import type { ChainWorkStore } from "../core/ports/chain-work.js";
import type { ChainAdapter } from "../core/ports/chains.js";

/**
 * The deposit addresses of one chain family, in memory, for the watchers: address → account.
 * An address is derived from the master secret (≈1.5 ms of CPU for secp256k1) the first time
 * it is handed out, and stored (never the key); from then on every watcher of the family
 * credits transfers to it. Nobody can know an address that was never handed out, so accounts
 * that never asked cost nothing. Each process loads only rows it has not seen yet.
 */
export class AddressBook {
  private readonly byAddress = new Map<string, string>();
  private readonly all = new Set<string>();
  private lastSeq = 0;

  constructor(
    private readonly repo: ChainWorkStore,
    /** Any adapter of the family: every chain of one family gives an account the same address. */
    private readonly adapter: ChainAdapter,
    private readonly now: () => number,
  ) {}

  get family(): string {
    return this.adapter.chain.family;
  }

  /** The account's address, stored so the watchers see it from their next scan. */
  async addressOf(accountId: string): Promise<string> {
    const stored = await this.repo.depositAddressOf(accountId, this.family);
    if (stored !== undefined) return stored;
    const address = this.adapter.depositAddress(accountId);
    await this.repo.saveDepositAddress(this.family, accountId, address, this.now());
    return address;
  }

  /** Loads addresses stored since the last refresh (by this or another process). */
  async refresh(): Promise<void> {
    for (const row of await this.repo.addressesSince(this.family, this.lastSeq)) {
      this.byAddress.set(row.address, row.accountId);
      this.all.add(row.address);
      this.lastSeq = row.seq;
    }
  }

  /** The account an address belongs to. */
  accountOf(address: string): string | undefined {
    return this.byAddress.get(address);
  }

  /** Every known address (the watcher's recipient filter); a live view, not a copy. */
  addresses(): ReadonlySet<string> {
    return this.all;
  }

  get size(): number {
    return this.byAddress.size;
  }
}
