import type { SpendCap } from "../../core/billing/spend-caps.js";

/** Whether announcements arrive (PgAuthStamp): what the cache holds may be used only then. */
export interface BillingAnnouncements {
  listening(): boolean;
  onBillingChange(listener: (accountId: string | undefined) => void): void;
}

/** What one account's calls read on every call: its billing row, its caps per (chain, key). */
interface AccountEntry {
  billing?: { defaultChain: string | undefined };
  readonly caps: Map<string, SpendCap[]>;
}

/**
 * What every billed call reads and an operator rarely changes, kept by a serving host: an
 * account's billing row (its default chain) and the spend caps that bound its calls on a chain
 * with a key. Each change, on any host, is announced at its commit (migration 15, heard by
 * PgAuthStamp) and forgets that account's entries; while announcements do not arrive nothing
 * is kept or answered from here, and each call reads the table as without a cache. A read that
 * began before an announcement and ends after it is not kept (`generation`), so a value older
 * than the newest announcement is never stored.
 */
export class BillingCache {
  readonly #accounts = new Map<string, AccountEntry>();
  #generation = 0;

  constructor(private readonly announcements: BillingAnnouncements) {
    announcements.onBillingChange((accountId) => this.forget(accountId));
  }

  /** A mark taken before a read, to hand back to {@link keepBilling} or {@link keepCaps}. */
  mark(): number {
    return this.#generation;
  }

  /** Forgets one account's entries (a change announced or made here), or every account's. */
  forget(accountId: string | undefined): void {
    this.#generation++;
    if (accountId === undefined) this.#accounts.clear();
    else this.#accounts.delete(accountId);
  }

  billing(accountId: string): { defaultChain: string | undefined } | undefined {
    return this.announcements.listening() ? this.#accounts.get(accountId)?.billing : undefined;
  }

  keepBilling(accountId: string, mark: number, billing: { defaultChain: string | undefined }): void {
    if (this.#kept(mark)) this.#entry(accountId).billing = billing;
  }

  caps(accountId: string, chain: string, keyId: string): SpendCap[] | undefined {
    return this.announcements.listening()
      ? this.#accounts.get(accountId)?.caps.get(`${chain}\u0000${keyId}`)
      : undefined;
  }

  keepCaps(accountId: string, chain: string, keyId: string, mark: number, caps: SpendCap[]): void {
    if (this.#kept(mark)) this.#entry(accountId).caps.set(`${chain}\u0000${keyId}`, caps);
  }

  #kept(mark: number): boolean {
    return mark === this.#generation && this.announcements.listening();
  }

  #entry(accountId: string): AccountEntry {
    let entry = this.#accounts.get(accountId);
    if (entry === undefined) {
      entry = { caps: new Map() };
      this.#accounts.set(accountId, entry);
    }
    return entry;
  }
}
