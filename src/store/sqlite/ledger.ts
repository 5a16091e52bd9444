import type { Statement } from "better-sqlite3";
import { INT64_MAX } from "../../core/billing/money.js";
import { type CapPeriod, capRefusal, type SpendCap, spendDay } from "../../core/billing/spend-caps.js";
import {
  availableOf,
  type BalanceRow,
  type CreditResult,
  type HoldState,
  heldOf,
  type NewCredit,
  type NewHold,
  type NewRaise,
  type PlaceHoldResult,
  type PostedEntry,
  type RaiseResult,
  type RaiseRow,
  type ResolutionStatus,
  type ResolveResult,
  SYSTEM_REVENUE,
  type UsageCounts,
  ZERO_USAGE,
} from "../../core/ports/ledger.js";
import {
  isSystem,
  type Raw,
  raiseEntryId,
  sameCall,
  toBalance,
  toHoldState,
  toRaise,
  toSpendCap,
} from "../shared/ledger-rows.js";
import type { Db } from "./database.js";
import { SettlementOutbox } from "./settlement-outbox.js";

/** A hold's columns with its outcome's, and `raised`: the sum of its raises. */
const HOLD_STATE = `SELECT h.*, COALESCE((SELECT SUM(x.amount) FROM hold_raises x WHERE x.hold_id = h.id), 0) AS raised,
                r.status, r.amount AS settled_amount, r.input_tokens AS u_input, r.output_tokens AS u_output,
                r.cache_write_5m_tokens AS u_cw5m, r.cache_write_1h_tokens AS u_cw1h,
                r.cache_read_tokens AS u_read, r.images AS u_images, r.charges AS u_charges, r.endpoint AS u_endpoint, r.resolved_at
           FROM holds h LEFT JOIN hold_resolutions r ON r.hold_id = h.id`;

/**
 * The statements that read or write raises (migration 15): prepared at their first use, not with
 * the others, so that a database migrated only part of the way (the migration tests) can still
 * take the writes that do not touch holds.
 */
function holdStatements(db: Db) {
  const money = <T extends unknown[] = unknown[]>(sql: string) => db.prepare<T, Raw>(sql).safeIntegers(true);
  return {
    getHold: money<[string]>(`${HOLD_STATE} WHERE h.id = ?`),
    listHolds: money<[string, bigint, number]>(
      `${HOLD_STATE} WHERE h.account_id = ? AND h.seq < ? ORDER BY h.seq DESC LIMIT ?`,
    ),
    getRaise: money<[string, number]>("SELECT * FROM hold_raises WHERE hold_id = ? AND pass = ?"),
    holdRaises: money<[string]>("SELECT * FROM hold_raises WHERE hold_id = ? ORDER BY pass"),
    insertRaise: db.prepare<[string, number, bigint, number]>(
      "INSERT INTO hold_raises (hold_id, pass, amount, created_at) VALUES (?, ?, ?, ?)",
    ),
    addRaised: db.prepare<[bigint, string]>("UPDATE open_holds SET raised = raised + ? WHERE hold_id = ?"),
  };
}

/**
 * The ledger in SQLite. Statements are prepared once; statements that read money return
 * bigints (`safeIntegers`). Every write runs in a `BEGIN IMMEDIATE` transaction, so two
 * processes sharing the file serialise on the write lock and never both spend one balance.
 */
export class LedgerRepository {
  private readonly s;
  private readonly tx;
  #holds: ReturnType<typeof holdStatements> | undefined;
  readonly #db: Db;
  /** The settlement outbox, written inside the settle transaction. */
  readonly outbox: SettlementOutbox;

  constructor(db: Db) {
    this.#db = db;
    this.outbox = new SettlementOutbox(db);
    const money = <T extends unknown[] = unknown[]>(sql: string) =>
      db.prepare<T, Raw>(sql).safeIntegers(true);
    this.s = {
      accountExists: db.prepare<[string], Raw>("SELECT 1 FROM accounts WHERE id = ?"),
      billingAccount: db.prepare<[string], { default_chain: string | null }>(
        `SELECT b.default_chain FROM accounts a
         LEFT JOIN billing_accounts b ON b.account_id = a.id WHERE a.id = ?`,
      ),
      getDefaultChain: db.prepare<[string], { default_chain: string }>(
        "SELECT default_chain FROM billing_accounts WHERE account_id = ?",
      ),
      setDefaultChain: db.prepare<[string, string, number]>(
        `INSERT INTO billing_accounts (account_id, default_chain, updated_at) VALUES (?, ?, ?)
         ON CONFLICT (account_id) DO UPDATE SET default_chain = excluded.default_chain, updated_at = excluded.updated_at`,
      ),
      balance: money<[string, string]>("SELECT * FROM ledger_balances WHERE account = ? AND chain = ?"),
      balances: money<[string]>("SELECT * FROM ledger_balances WHERE account = ? ORDER BY chain"),
      // Two steps, not an upsert: SQLite checks CHECK constraints on the would-be inserted row
      // before it notices the conflict, so an upsert of a bare debit would trip the overdraft check.
      ensureBalance: db.prepare<[string, string, number]>(
        "INSERT INTO ledger_balances (account, chain, may_overdraw) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
      ),
      addToBalance: db.prepare<[bigint, bigint, bigint, bigint, string, string]>(
        `UPDATE ledger_balances SET
           debits_pending  = debits_pending  + ?,
           debits_posted   = debits_posted   + ?,
           credits_pending = credits_pending + ?,
           credits_posted  = credits_posted  + ?
         WHERE account = ? AND chain = ?`,
      ),
      insertEntry: db.prepare<
        [string, string, string, string, bigint, number, string, string | null, string, number]
      >(
        `INSERT INTO ledger_entries
           (id, chain, debit_account, credit_account, amount, pending, kind, hold_id, memo, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      ),
      getEntry: money<[string]>("SELECT * FROM ledger_entries WHERE id = ?"),
      insertHold: db.prepare<Raw>(
        `INSERT INTO holds (id, account_id, request_id, key_id, chain, amount, call_kind, model,
                            input_tokens, max_tokens, image_size, image_count, created_at)
         VALUES (@id, @accountId, @requestId, @keyId, @chain, @amount, @callKind, @model,
                 @inputTokens, @maxTokens, @imageSize, @imageCount, @createdAt)`,
      ),
      insertResolution: db.prepare<
        [
          string,
          ResolutionStatus,
          bigint,
          bigint,
          bigint,
          bigint,
          bigint,
          bigint,
          number,
          string,
          string,
          number,
        ]
      >(
        `INSERT INTO hold_resolutions (hold_id, status, amount, input_tokens, output_tokens, cache_write_5m_tokens,
                                       cache_write_1h_tokens, cache_read_tokens, images, charges, endpoint, resolved_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      ),
      // The caps that bound a hold: the account's own and its key's, on the hold's chain.
      capsFor: money<[string, string, string]>(
        `SELECT * FROM spend_caps WHERE account_id = ? AND chain = ? AND key_id IN ('', ?)`,
      ),
      // What a cap's period has spent: its days' rows, of every key for an account's cap.
      spentSince: money<[string, string, number, string, string]>(
        `SELECT COALESCE(SUM(spent), 0) AS spent FROM spend_days
          WHERE account_id = ? AND chain = ? AND day >= ? AND (? = '' OR key_id = ?)`,
      ),
      // A hold adds its amount to its key's day; its resolution then adds (charge − amount).
      addSpent: db.prepare<[string, string, string, number, bigint]>(
        `INSERT INTO spend_days (account_id, key_id, chain, day, spent) VALUES (?, ?, ?, ?, ?)
         ON CONFLICT (account_id, chain, key_id, day) DO UPDATE SET spent = spent + excluded.spent`,
      ),
      reviseSpent: db.prepare<[bigint, string, string, string, number]>(
        "UPDATE spend_days SET spent = spent + ? WHERE account_id = ? AND chain = ? AND key_id = ? AND day = ?",
      ),
      spendCaps: money<[string]>(
        "SELECT * FROM spend_caps WHERE account_id = ? ORDER BY key_id, chain, period",
      ),
      setSpendCap: db.prepare<[string, string, string, CapPeriod, bigint, number]>(
        `INSERT INTO spend_caps (account_id, key_id, chain, period, amount, updated_at) VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT (account_id, key_id, chain, period)
         DO UPDATE SET amount = excluded.amount, updated_at = excluded.updated_at`,
      ),
      clearSpendCap: db.prepare<[string, string, string, CapPeriod]>(
        "DELETE FROM spend_caps WHERE account_id = ? AND key_id = ? AND chain = ? AND period = ?",
      ),
      openHold: db.prepare<[string, number]>("INSERT INTO open_holds (hold_id, created_at) VALUES (?, ?)"),
      closeHold: db.prepare<[string]>("DELETE FROM open_holds WHERE hold_id = ?"),
    };
    // Prepared at the first sweep, not here: it reads x402_payments, which a database migrated
    // only part of the way (the migration tests) does not have yet.
    let expiredHolds: Statement<[number, number], { hold_id: string }> | undefined;
    this.tx = {
      placeHold: db.transaction((hold: NewHold) => this.placeHoldTx(hold)),
      raiseHold: db.transaction((raise: NewRaise) => this.raiseTx(raise)),
      resolve: db.transaction(
        (
          holdId: string,
          status: ResolutionStatus,
          charge: bigint,
          usage: UsageCounts,
          now: number,
          charges: string,
        ) => this.resolveTx(holdId, status, charge, usage, now, charges),
      ),
      credit: db.transaction((credit: NewCredit) => this.creditTx(credit)),
      sweep: db.transaction((cutoff: number, now: number, limit: number) => {
        // A hold whose x402 payment is collected stays: its charge was taken onchain, and the
        // x402 recovery pass settles it (one lookup per hold, on x402_payments' unique hold_id).
        // So does one whose payment's collection was begun: the chain may have taken it.
        expiredHolds ??= db.prepare(
          `SELECT o.hold_id FROM open_holds o
            WHERE o.created_at < ?
              AND NOT EXISTS (SELECT 1 FROM x402_payments p WHERE p.hold_id = o.hold_id
                                AND (p.status = 'collected' OR (p.status = 'authorised' AND p.collecting_at IS NOT NULL)))
            ORDER BY o.created_at LIMIT ?`,
        );
        const ids = expiredHolds.all(cutoff, limit).map((r) => r.hold_id);
        for (const id of ids) this.resolveTx(id, "expired", 0n, ZERO_USAGE, now, "");
        return ids.length;
      }),
    };
  }

  /** Whether an account with this id exists. */
  accountExists(accountId: string): boolean {
    return this.s.accountExists.get(accountId) !== undefined;
  }

  /** Undefined when there is no such account, else the chain it picked, if any. */
  billingAccount(accountId: string): { defaultChain: string | undefined } | undefined {
    const row = this.s.billingAccount.get(accountId);
    return row === undefined ? undefined : { defaultChain: row.default_chain ?? undefined };
  }

  /** The chain the account picked, or undefined when it never picked one. */
  defaultChain(accountId: string): string | undefined {
    return this.s.getDefaultChain.get(accountId)?.default_chain;
  }

  setDefaultChain(accountId: string, chain: string, now: number): void {
    this.s.setDefaultChain.run(accountId, chain, now);
  }

  /** One ledger account's totals on one chain (all zero if it never moved money there). */
  balance(account: string, chain: string): BalanceRow {
    const row = this.s.balance.get(account, chain);
    return row === undefined ? emptyBalance(account, chain) : toBalance(row);
  }

  /** Every chain on which the ledger account has ever moved money. */
  balances(account: string): BalanceRow[] {
    return this.s.balances.all(account).map(toBalance);
  }

  /** The statements over raises and the holds they add to (see holdStatements). */
  private get h(): ReturnType<typeof holdStatements> {
    this.#holds ??= holdStatements(this.#db);
    return this.#holds;
  }

  /** A hold and its outcome. */
  getHold(holdId: string): HoldState | undefined {
    const row = this.h.getHold.get(holdId);
    return row === undefined ? undefined : toHoldState(row);
  }

  /** An account's holds, newest first, with seq below `beforeSeq`. */
  listHolds(accountId: string, beforeSeq: bigint, limit: number): HoldState[] {
    return this.h.listHolds.all(accountId, beforeSeq, limit).map(toHoldState);
  }

  /** A hold's raises, by pass. */
  holdRaises(holdId: string): RaiseRow[] {
    return this.h.holdRaises.all(holdId).map(toRaise);
  }

  /**
   * Reserves `hold.amount` on the account's chain, atomically with the funds check: a pending
   * entry from the account to revenue. An existing hold with the same id is returned as it
   * is (idempotent retry) if it is for the same call, refused otherwise. Writes nothing when
   * funds are short.
   */
  placeHold(hold: NewHold): PlaceHoldResult {
    return this.tx.placeHold.immediate(hold);
  }

  /**
   * Raises an open hold by `raise.amount`, atomically with the spend caps and the funds check: a
   * pending entry from the account to revenue, the raise recorded with the hold, the open hold's
   * total and its key's day moved with it. A pass raised before answers as the first raise did
   * (`existing`), or `conflict` for another amount. Writes nothing unless it raises.
   */
  raiseHold(raise: NewRaise): RaiseResult {
    return this.tx.raiseHold.immediate(raise);
  }

  /**
   * Settles a pending hold: posts `charge` (≤ what it holds, raises included) from the account to
   * revenue and voids the pending entries, in one transaction. Changes nothing unless the hold is
   * pending.
   */
  settle(holdId: string, charge: bigint, usage: UsageCounts, now: number, charges = ""): ResolveResult {
    return this.tx.resolve.immediate(holdId, "settled", charge, usage, now, charges);
  }

  /** Voids a pending hold (`released` by the caller, `expired` by the sweeper); nothing is charged. */
  void(holdId: string, status: "released" | "expired", now: number): ResolveResult {
    return this.tx.resolve.immediate(holdId, status, 0n, ZERO_USAGE, now, "");
  }

  /**
   * Expires up to `limit` holds placed before `cutoff`, in one transaction; returns how many.
   * A hold whose x402 payment is `collected`, or `authorised` with a collection begun, is never expired.
   */
  expireHolds(cutoff: number, now: number, limit: number): number {
    return this.tx.sweep.immediate(cutoff, now, limit);
  }

  /**
   * Posts a credit from a system account to a user account. An entry id seen before returns
   * the first credit if it matches, and a conflict if it does not.
   */
  credit(credit: NewCredit): CreditResult {
    return this.tx.credit.immediate(credit);
  }

  private placeHoldTx(hold: NewHold): PlaceHoldResult {
    const existing = this.getHold(hold.id);
    if (existing !== undefined) {
      return sameCall(existing.hold, hold) ? { kind: "existing", state: existing } : { kind: "conflict" };
    }
    // Caps first, as PostgreSQL does: a capped call is refused as such even when funds are short too.
    const refusal = hold.amount > 0n ? this.capRefusal(hold, hold.amount) : undefined;
    if (refusal !== undefined) return { kind: "capped", refusal };
    const available = availableOf(this.balance(hold.accountId, hold.chain));
    if (hold.amount > available) return { kind: "insufficient", available };
    const { lastInsertRowid } = this.s.insertHold.run({ ...hold });
    this.s.openHold.run(hold.id, hold.createdAt);
    if (hold.amount > 0n) {
      this.s.insertEntry.run(
        `${hold.id}/hold`,
        hold.chain,
        hold.accountId,
        SYSTEM_REVENUE,
        hold.amount,
        1,
        "hold",
        hold.id,
        "",
        hold.createdAt,
      );
      this.move(hold.chain, hold.accountId, SYSTEM_REVENUE, { pending: hold.amount });
      this.s.addSpent.run(hold.accountId, hold.keyId, hold.chain, spendDay(hold.createdAt), hold.amount);
    }
    // What was just written, without reading it back.
    return {
      kind: "placed",
      state: { hold: { ...hold, raised: 0n, seq: Number(lastInsertRowid) }, resolution: undefined },
    };
  }

  private raiseTx(raise: NewRaise): RaiseResult {
    const state = this.getHold(raise.holdId);
    if (state === undefined) return { kind: "not-found" };
    const earlier = this.h.getRaise.get(raise.holdId, raise.pass);
    if (earlier !== undefined) {
      return earlier.amount === raise.amount ? { kind: "existing", state } : { kind: "conflict" };
    }
    if (state.resolution !== undefined) return { kind: "not-open", state };
    const { hold } = state;
    // As a hold: caps first, then funds, and nothing written unless both let it through.
    const refusal = this.capRefusal(hold, raise.amount);
    if (refusal !== undefined) return { kind: "capped", refusal };
    const available = availableOf(this.balance(hold.accountId, hold.chain));
    if (raise.amount > available) return { kind: "insufficient", available };
    this.h.insertRaise.run(raise.holdId, raise.pass, raise.amount, raise.createdAt);
    this.h.addRaised.run(raise.amount, raise.holdId);
    this.s.insertEntry.run(
      raiseEntryId(raise),
      hold.chain,
      hold.accountId,
      SYSTEM_REVENUE,
      raise.amount,
      1,
      "hold",
      hold.id,
      "",
      raise.createdAt,
    );
    this.move(hold.chain, hold.accountId, SYSTEM_REVENUE, { pending: raise.amount });
    // Spent on the hold's own day, as the hold was: its resolution revises that day.
    this.s.addSpent.run(hold.accountId, hold.keyId, hold.chain, spendDay(hold.createdAt), raise.amount);
    return {
      kind: "raised",
      state: { hold: { ...hold, raised: hold.raised + raise.amount }, resolution: undefined },
    };
  }

  /** Sets a cap, replacing the one for the same account, key, chain and period. */
  setSpendCap(cap: SpendCap, now: number): void {
    this.s.setSpendCap.run(cap.accountId, cap.keyId, cap.chain, cap.period, cap.amount, now);
  }

  /** Removes a cap; whether there was one. */
  clearSpendCap(cap: Omit<SpendCap, "amount">): boolean {
    return this.s.clearSpendCap.run(cap.accountId, cap.keyId, cap.chain, cap.period).changes > 0;
  }

  /** The account's caps, its own (key "") first. */
  spendCaps(accountId: string): SpendCap[] {
    return this.s.spendCaps.all(accountId).map(toSpendCap);
  }

  /**
   * The cap that refuses `amount` more on `hold` (a hold being placed, or one being raised), if
   * one does, against the caps' periods as of the hold. Runs inside the write's transaction, so
   * the holds it sums are every hold placed (and raise made) before this one.
   */
  private capRefusal(hold: Pick<NewHold, "accountId" | "chain" | "keyId" | "createdAt">, amount: bigint) {
    const caps = this.s.capsFor.all(hold.accountId, hold.chain, hold.keyId).map(toSpendCap);
    if (caps.length === 0) return undefined;
    return capRefusal(caps, amount, hold.createdAt, (cap, since) => this.capSpent(cap, since));
  }

  /** What the cap's holds placed at or after `since` have spent. */
  capSpent(cap: SpendCap, since: number): bigint {
    return this.s.spentSince.get(cap.accountId, cap.chain, since, cap.keyId, cap.keyId)!.spent as bigint;
  }

  private resolveTx(
    holdId: string,
    status: ResolutionStatus,
    charge: bigint,
    usage: UsageCounts,
    now: number,
    charges: string,
  ): ResolveResult {
    const state = this.getHold(holdId);
    if (state === undefined) return { kind: "not-found" };
    if (state.resolution !== undefined) return { kind: "already-resolved", state };
    const { hold } = state;
    const held = heldOf(hold);
    if (charge < 0n || charge > held) return { kind: "exceeds", state };
    this.s.insertResolution.run(
      holdId,
      status,
      charge,
      usage.inputTokens,
      usage.outputTokens,
      usage.cacheWrite5mTokens,
      usage.cacheWrite1hTokens,
      usage.cacheReadTokens,
      usage.images,
      charges,
      usage.endpoint ?? "",
      now,
    );
    this.s.closeHold.run(holdId);
    // The hold's pending entry and its raises' stop counting, and the charge is posted, in one
    // update of each side's balance (a charge never exceeds what is held, so none without a hold).
    if (held > 0n) this.move(hold.chain, hold.accountId, SYSTEM_REVENUE, { pending: -held, posted: charge });
    if (charge !== held)
      this.s.reviseSpent.run(charge - held, hold.accountId, hold.chain, hold.keyId, spendDay(hold.createdAt));
    if (charge > 0n) {
      this.s.insertEntry.run(
        `${holdId}/charge`,
        hold.chain,
        hold.accountId,
        SYSTEM_REVENUE,
        charge,
        0,
        "charge",
        holdId,
        "",
        now,
      );
      // The outbox: the onchain settlement's intent commits (or not) with the charge itself.
      if (status === "settled") this.outbox.record(holdId, hold.accountId, hold.chain, charge, now);
    }
    // What was just written, without reading it back.
    return {
      kind: "resolved",
      state: {
        hold,
        resolution: {
          holdId,
          status,
          amount: charge,
          usage: {
            inputTokens: usage.inputTokens,
            outputTokens: usage.outputTokens,
            cacheWrite5mTokens: usage.cacheWrite5mTokens,
            cacheWrite1hTokens: usage.cacheWrite1hTokens,
            cacheReadTokens: usage.cacheReadTokens,
            images: usage.images,
            ...(usage.endpoint ? { endpoint: usage.endpoint } : {}),
          },
          charges,
          resolvedAt: now,
        },
      },
    };
  }

  private creditTx(credit: NewCredit): CreditResult {
    const existing = this.s.getEntry.get(credit.entryId);
    if (existing !== undefined) {
      const same =
        existing.kind === "credit" &&
        existing.credit_account === credit.accountId &&
        existing.chain === credit.chain &&
        existing.amount === credit.amount;
      return same
        ? { kind: "existing", balance: this.balance(credit.accountId, credit.chain) }
        : { kind: "conflict" };
    }
    // SQLite would turn an overflowing sum into a REAL (refused by STRICT); refuse it by name instead.
    const before = this.balance(credit.accountId, credit.chain);
    const source = this.balance(credit.from, credit.chain);
    if (before.creditsPosted + credit.amount > INT64_MAX || source.debitsPosted + credit.amount > INT64_MAX) {
      return { kind: "overflow" };
    }
    this.s.insertEntry.run(
      credit.entryId,
      credit.chain,
      credit.from,
      credit.accountId,
      credit.amount,
      0,
      "credit",
      null,
      credit.memo,
      credit.createdAt,
    );
    this.move(credit.chain, credit.from, credit.accountId, { posted: credit.amount });
    return { kind: "credited", balance: this.balance(credit.accountId, credit.chain) };
  }

  /**
   * Posts one entry and updates both running balances. It opens no transaction of its own:
   * callers (the deposit watcher, withdrawals) run it inside theirs, with their own checks.
   */
  post(entry: PostedEntry): void {
    this.s.insertEntry.run(
      entry.id,
      entry.chain,
      entry.debit,
      entry.credit,
      entry.amount,
      0,
      entry.kind,
      null,
      entry.memo,
      entry.createdAt,
    );
    this.move(entry.chain, entry.debit, entry.credit, { posted: entry.amount });
  }

  /** Applies one entry's effect to both sides' running totals. */
  private move(
    chain: string,
    debit: string,
    credit: string,
    delta: { pending?: bigint; posted?: bigint },
  ): void {
    const pending = delta.pending ?? 0n;
    const posted = delta.posted ?? 0n;
    this.addToBalance(debit, chain, [pending, posted, 0n, 0n]);
    this.addToBalance(credit, chain, [0n, 0n, pending, posted]);
  }

  /**
   * Adds to one running balance, creating its row the first time: the update is tried first
   * (the row nearly always exists), and only when it touched nothing is the row inserted and
   * the update run again.
   */
  private addToBalance(
    account: string,
    chain: string,
    [debitsPending, debitsPosted, creditsPending, creditsPosted]: [bigint, bigint, bigint, bigint],
  ): void {
    const add = () =>
      this.s.addToBalance.run(debitsPending, debitsPosted, creditsPending, creditsPosted, account, chain);
    if (add().changes > 0) return;
    this.s.ensureBalance.run(account, chain, isSystem(account) ? 1 : 0);
    add();
  }
}

function emptyBalance(account: string, chain: string): BalanceRow {
  return { account, chain, debitsPending: 0n, debitsPosted: 0n, creditsPending: 0n, creditsPosted: 0n };
}
