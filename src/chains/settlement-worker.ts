import { ledgerToOnchain } from "../core/billing/money.js";
import type { ChainWorkStore } from "../core/ports/chain-work.js";
import type { ChainAdapter, PreparedTransfer } from "../core/ports/chains.js";
import type { TransferRow } from "../core/ports/ledger.js";

/** How settlements are grouped and retried. */
export interface SettlementWorkerOptions {
  /** `per-call`: one transfer per charged call; `batch`: one per (account, chain) per window. */
  readonly mode: "per-call" | "batch";
  /** Batch mode: an account's calls wait at most this long for the others of its batch. */
  readonly batchWindowMs: number;
  /** How soon a sent transfer is checked again. */
  readonly recheckMs: number;
  /** The longest wait between retries after an error (backoff doubles up to it). */
  readonly maxBackoffMs: number;
  /** New transfer ids. */
  readonly newId: () => string;
  readonly now: () => number;
  readonly onError?: (error: unknown, transfer: TransferRow) => void;
}

/** Transfers advanced per tick: bounds one tick's RPC calls. */
const TICK_LIMIT = 100;

/**
 * The settlement worker of one chain: turns the outbox's intents into transfers (per call or
 * batched), then drives each transfer — settlement or withdrawal — through prepare → store →
 * broadcast → confirm. The signed transaction is stored before it is sent, and a stored one is
 * only ever re-asked about ({@link ChainAdapter.transferState}), never re-signed, unless the
 * chain says it failed or was dropped; so a crash or restart at any point never pays twice.
 * An RPC error leaves the transfer as it is and retries with exponential backoff.
 */
export class SettlementWorker {
  constructor(
    private readonly adapter: ChainAdapter,
    private readonly repo: ChainWorkStore,
    private readonly options: SettlementWorkerOptions,
  ) {}

  /** One pass: batch due intents, then advance every due transfer once. Returns transfers advanced. */
  async tick(): Promise<number> {
    const { chain } = this.adapter;
    const now = this.options.now();
    await this.repo.batchIntents(
      chain.id,
      this.options.mode === "per-call",
      now - this.options.batchWindowMs,
      this.adapter.treasuryAddress(),
      this.options.newId,
      now,
    );
    let advanced = 0;
    for (const transfer of await this.repo.openTransfers(chain.id, now, TICK_LIMIT)) {
      try {
        await this.advance(transfer);
        advanced += 1;
      } catch (error) {
        const delay = Math.min(
          this.options.recheckMs * 2 ** Math.min(transfer.attempts, 20),
          this.options.maxBackoffMs,
        );
        const at = this.options.now();
        await this.repo.markRetry(transfer.id, errorText(error), at + delay, at);
        this.options.onError?.(error, transfer);
      }
    }
    return advanced;
  }

  private async advance(t: TransferRow): Promise<void> {
    const { now, recheckMs } = this.options;
    if (t.status === "queued") {
      const prepared = await this.adapter.prepareTransfer({
        id: t.id,
        accountId: t.accountId,
        to: t.to,
        amount: ledgerToOnchain(t.amount, this.adapter.chain.asset.decimals),
      });
      // Durable before it can exist anywhere else: after a crash we ask about this transaction.
      await this.repo.markPrepared(t.id, prepared.txHash, prepared.raw, now());
      await this.adapter.broadcast(prepared);
      await this.repo.markSent(t.id, now() + recheckMs, now());
      return;
    }
    const prepared: PreparedTransfer = { orderId: t.id, txHash: t.txHash, raw: t.raw };
    const state = await this.adapter.transferState(prepared);
    switch (state) {
      case "confirmed":
        await this.repo.markConfirmed(t.id, now());
        return;
      case "pending":
        // Prepared but perhaps never sent (a crash after storing it): sending again is harmless.
        if (t.status === "prepared") await this.adapter.broadcast(prepared);
        await this.repo.markSent(t.id, now() + recheckMs, now());
        return;
      case "failed":
      case "dropped":
        // Nothing moved and it can no longer land: the same order (same EIP-3009 nonce) is
        // prepared anew.
        await this.repo.markRequeued(t.id, `transaction ${t.txHash} ${state}`, now(), now());
        return;
    }
  }
}

function errorText(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const { shortMessage, details } = error as { shortMessage?: string; details?: string };
  if (shortMessage === undefined) return error.message.split("\n")[0]!;
  return details === undefined || details === "" ? shortMessage : `${shortMessage}: ${details}`;
}
