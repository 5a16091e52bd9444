import { accountNotFound, invalidField } from "../errors.js";
import { newId } from "../ids.js";
import {
  availableOf,
  type BalanceRow,
  type HoldRow,
  type HoldState,
  heldOf,
  type LedgerStore,
  type RaiseRow,
  type ResolveResult,
  SYSTEM_MANUAL_CREDIT,
} from "../ports/ledger.js";
import { type Metrics, NO_METRICS } from "../ports/metrics.js";
import {
  amountOutOfRange,
  holdAlreadyResolved,
  holdNotFound,
  idConflict,
  insufficientFunds,
  raiseConflict,
  requestIdReused,
  settleExceedsHold,
  spendCapReached,
} from "./billing-errors.js";
import type { CallBilling, HoldInput, HoldRaise, NewCallHold } from "./call-billing.js";
import type { ChainConfig, ChainRegistry } from "./chain-registry.js";
import { configuredChain, enabledChain, selectChain } from "./chain-selection.js";
import { encodeCharges } from "./charge-record.js";
import { creditIdFor, holdIdFor } from "./hold-ids.js";
import { INT64_MAX, ledgerDecimals, picoToUnits } from "./money.js";
import { firstPassPico, nextPassPico, type PassBoundary, type PricedTextCall } from "./pass-pricing.js";
import type { PriceCatalog } from "./price-catalog.js";
import {
  type CallSpec,
  chargedTokens,
  checkUsage,
  type DeliveredUsage,
  type PricedUsage,
  priceCall,
  priceUsage,
  quotePico,
  type TextCallSpec,
} from "./pricing.js";
import { periodReset, periodStart, type SpendCap } from "./spend-caps.js";

/** What the billing core is built from. */
export interface BillingDeps {
  readonly ledger: LedgerStore;
  readonly chains: ChainRegistry;
  readonly catalog: PriceCatalog;
  readonly now: () => number;
  /** Told of every hold placed and resolved and every amount charged; none when absent. */
  readonly metrics?: Metrics | undefined;
}

/** A cap with what its current period has spent, and when that period ends (undefined: never). */
export interface CapStanding {
  readonly cap: SpendCap;
  readonly spent: bigint;
  readonly resetsAt: number | undefined;
}

/** An operator credit. */
export interface CreditInput {
  readonly accountId: string;
  readonly chain: string;
  readonly amount: bigint;
  readonly reason: string;
  /** Optional idempotency key; "" credits unconditionally. */
  readonly creditId: string;
}

/** One account's funds on one chain. */
export interface ChainBalance {
  readonly chain: ChainConfig;
  readonly row: BalanceRow;
}

const NO_TOKENS = {
  inputTokens: 0n,
  outputTokens: 0n,
  cacheWrite5mTokens: 0n,
  cacheWrite1hTokens: 0n,
  cacheReadTokens: 0n,
} as const;
const MAX_REQUEST_ID = 200;
const MAX_REASON = 500;
/**
 * The most passes a raise may name: far above any call's (the provider's iteration limit, 10 by
 * default, plus its advisor calls and fallback hops); a bound on what a caller can ask the ledger to
 * record, not a rule of the provider's.
 */
const MAX_PASS = 10_000;
/** Holds expired per sweeper transaction: keeps each write-lock hold short. */
const SWEEP_BATCH = 500;

/**
 * The money core, in-process: quotes, holds, settlements, credits and balances. The
 * BillingService RPCs and the Inference service both call it; it does no caller checks (the
 * RPC layer does). Expected failures are ConnectErrors with a reason. Every write is answered
 * once the ledger has made it durable.
 */
export class Billing implements CallBilling {
  private readonly metrics: Metrics;

  constructor(private readonly deps: BillingDeps) {
    this.metrics = deps.metrics ?? NO_METRICS;
  }

  get chains(): ChainRegistry {
    return this.deps.chains;
  }

  get catalog(): PriceCatalog {
    return this.deps.catalog;
  }

  /** The chain a call would bill on: the named one, or the account's default for `auto`. */
  async chainFor(accountId: string, requested: string | undefined): Promise<ChainConfig> {
    return selectChain(this.deps.chains, requested, await this.deps.ledger.defaultChain(accountId));
  }

  /** The worst-case price of a call on the selected chain, in the chain's ledger units. */
  async quote(
    accountId: string,
    requested: string | undefined,
    call: CallSpec,
  ): Promise<{ chain: ChainConfig; amount: bigint }> {
    const chain = await this.chainFor(accountId, requested);
    return { chain, amount: this.quoteOn(chain, call) };
  }

  /** The worst-case price of a call on a given chain, in the chain's ledger units; reads nothing. */
  quoteOn(chain: ChainConfig, call: CallSpec): bigint {
    if (call.kind === "text" && call.passByPass === true) return this.firstPassQuoteOn(chain, call);
    const priced = priceCall(this.deps.catalog, call);
    const amount = picoToUnits(quotePico(this.deps.catalog, priced), ledgerDecimals(chain.asset.decimals));
    if (amount > INT64_MAX) throw invalidField("call", "The call's worst-case price is out of range.");
    return amount;
  }

  /**
   * The worst case of a multi-pass text call's first pass on `chain`, in the chain's ledger
   * units (`firstPassPico`); reads nothing.
   */
  firstPassQuoteOn(chain: ChainConfig, call: TextCallSpec): bigint {
    return this.units(chain, firstPassPico(this.deps.catalog, this.pricedText(call)));
  }

  /** {@link nextPassQuoteOn} on the chain of the hold `placed` (a running call's). */
  nextPassQuote(placed: HoldRow, call: TextCallSpec, boundary: PassBoundary): bigint {
    return this.nextPassQuoteOn(configuredChain(this.deps.chains, placed.chain), call, boundary);
  }

  /**
   * The worst case of the stretch a pass boundary starts, on `chain`, in the chain's ledger
   * units (`nextPassPico`): what to raise the hold by; reads nothing.
   */
  nextPassQuoteOn(chain: ChainConfig, call: TextCallSpec, boundary: PassBoundary): bigint {
    return this.units(chain, nextPassPico(this.deps.catalog, this.pricedText(call), boundary));
  }

  /**
   * Raises the hold `placed` of a running call by `amount` (ledger units) for its pass `pass`
   * (≥ 2: pass 1 is the hold itself), atomically with the funds check and the spend caps.
   * Answers `raised` with the hold as it stands now (settle with its `hold`: a charge may reach
   * the raised total), or `declined` with the INSUFFICIENT_FUNDS or SPEND_CAP_REACHED refusal
   * when the raise does not fit, having written nothing. The same pass raised again by the same
   * amount holds nothing more (a retry) and answers `raised`; by another amount, RAISE_CONFLICT.
   * A hold that has resolved fails HOLD_ALREADY_RESOLVED; an unknown one HOLD_NOT_FOUND.
   */
  async raise(placed: HoldRow, pass: number, amount: bigint): Promise<HoldRaise> {
    if (!Number.isInteger(pass) || pass < 2 || pass > MAX_PASS) {
      throw invalidField("pass", `pass must be a whole number between 2 and ${MAX_PASS}.`);
    }
    if (amount <= 0n || amount > INT64_MAX) {
      throw invalidField("amount", "amount must be a positive whole number of the chain's ledger units.");
    }
    const chain = configuredChain(this.deps.chains, placed.chain);
    const result = await this.deps.ledger.raiseHold({
      holdId: placed.id,
      pass,
      amount,
      createdAt: this.deps.now(),
    });
    switch (result.kind) {
      case "raised":
      case "existing":
        return { kind: "raised", state: result.state };
      case "insufficient":
        return { kind: "declined", refusal: insufficientFunds(chain, amount, result.available) };
      case "capped":
        return { kind: "declined", refusal: spendCapReached(chain, amount, result.refusal) };
      case "not-found":
        throw holdNotFound(placed.id);
      case "not-open":
        throw holdAlreadyResolved(placed.id, result.state.resolution!.status, chain.id);
      case "conflict":
        throw raiseConflict(placed.id, pass);
    }
  }

  /** A hold's raises, by pass: the hold's history as the call ran. */
  raises(holdId: string): Promise<RaiseRow[]> {
    return this.deps.ledger.holdRaises(holdId);
  }

  /**
   * Reserves the call's worst-case price on the selected chain, or fails with
   * INSUFFICIENT_FUNDS having written nothing. The same request id returns the same hold.
   */
  async hold(input: HoldInput): Promise<HoldState> {
    const held = await this.placeHold(input);
    if (held.kind === "insufficient") throw insufficientFunds(held.chain, held.amount, held.available);
    return held.state;
  }

  /**
   * Like {@link hold}, for a call about to run: a request id that already has a hold (in any
   * state) is refused with REQUEST_ID_REUSED, so one id can never pay for two upstream calls.
   */
  async holdNewCall(input: HoldInput): Promise<HoldState> {
    const held = await this.holdOrFit(input);
    if (held.kind === "insufficient") throw held.refusal;
    return held.state;
  }

  /**
   * Like {@link holdNewCall}, except that a wallet that cannot cover the call is answered with its
   * refusal and, for a text call, the largest max_tokens the available funds cover.
   */
  async holdOrFit(input: HoldInput): Promise<NewCallHold> {
    const held = await this.placeHold(input);
    if (held.kind === "insufficient") {
      const { chain, amount, available } = held;
      const { call } = input;
      return {
        kind: "insufficient",
        refusal: insufficientFunds(chain, amount, available),
        maxTokensThatFit: call.kind === "text" ? this.largestMaxTokens(chain, call, available) : undefined,
      };
    }
    if (held.kind === "existing") throw requestIdReused(held.state.hold.requestId);
    return { kind: "held", state: held.state };
  }

  /** The largest max_tokens (at most the call's own) whose worst case on `chain` is within `available`. */
  private largestMaxTokens(chain: ChainConfig, call: TextCallSpec, available: bigint): bigint {
    // The worst case grows with max_tokens: the largest that fits, by bisection.
    let low = 0n;
    let high = call.maxTokens;
    while (low < high) {
      const mid = (low + high + 1n) / 2n;
      if (this.quoteOn(chain, { ...call, maxTokens: mid }) <= available) low = mid;
      else high = mid - 1n;
    }
    return low;
  }

  /**
   * Posts what the call delivered (priced exactly, rounded up once) and releases the rest of
   * the hold. Fails, changing nothing, if the hold is resolved or the charge exceeds it.
   */
  async settle(holdId: string, usage: DeliveredUsage): Promise<HoldState> {
    return (await this.settleWith(holdId, usage, false)).state;
  }

  /**
   * Settles a call that ran: like {@link settle}, except that a charge above the hold is capped
   * at the hold. The hold covers every usage the provider may report within its documented
   * limits, so a cap means the provider went beyond them: the caller never pays more than the
   * worst case it was checked against, `capped` says the gateway absorbed the difference, and
   * `priced` is the full price (with what could not be priced) for the caller to report.
   * `placed` is the hold as {@link holdNewCall} returned it: its terms never change, so it is not
   * read again (the settlement itself still refuses a hold resolved meanwhile, by the sweeper).
   */
  settleDelivered(
    placed: HoldRow,
    usage: DeliveredUsage,
  ): Promise<{ state: HoldState; capped: boolean; priced: PricedUsage }> {
    return this.settleWith(placed.id, usage, true, placed);
  }

  /** Voids a pending hold: nothing is charged. Fails, changing nothing, if already resolved. */
  async release(holdId: string): Promise<HoldState> {
    const state = this.resolved(holdId, await this.deps.ledger.void(holdId, "released", this.deps.now()), 0n);
    this.metrics.holdsResolved("released", 1);
    return state;
  }

  /** Expires every hold placed more than `maxCallMs` ago; returns how many it voided. */
  async expireHolds(maxCallMs: number): Promise<number> {
    const now = this.deps.now();
    let total = 0;
    for (;;) {
      const n = await this.deps.ledger.expireHolds(now - maxCallMs, now, SWEEP_BATCH);
      total += n;
      if (n > 0) this.metrics.holdsResolved("swept", n);
      if (n < SWEEP_BATCH) return total;
    }
  }

  /** Credits an account by hand from the manual-credit system account, keeping the reason. */
  async credit(input: CreditInput): Promise<{ entryId: string; balance: ChainBalance }> {
    const chain = configuredChain(this.deps.chains, input.chain);
    if (input.amount > INT64_MAX) throw amountOutOfRange(chain.id);
    if (input.amount <= 0n) {
      throw invalidField("amount", "amount must be a positive whole number of the chain's ledger units.");
    }
    const reason = input.reason.trim();
    if (reason === "" || reason.length > MAX_REASON) {
      throw invalidField("reason", `reason is required, at most ${MAX_REASON} characters.`);
    }
    await this.requireAccount(input.accountId);
    const creditId = input.creditId.trim();
    const entryId = creditId === "" ? newId("credit") : creditIdFor(input.accountId, creditId);
    const result = await this.deps.ledger.credit({
      entryId,
      accountId: input.accountId,
      chain: chain.id,
      amount: input.amount,
      from: SYSTEM_MANUAL_CREDIT,
      memo: reason,
      createdAt: this.deps.now(),
    });
    switch (result.kind) {
      case "credited":
      case "existing":
        return { entryId, balance: { chain, row: result.balance } };
      case "conflict":
        throw idConflict(`credit_id ${JSON.stringify(creditId)}`);
      case "overflow":
        throw amountOutOfRange(chain.id);
    }
  }

  /**
   * An account's balances: every enabled chain (zero if never funded) plus any other chain
   * where it has moved money, in registry order, and its default chain.
   */
  async balances(accountId: string): Promise<{ defaultChain: string; balances: ChainBalance[] }> {
    await this.requireAccount(accountId);
    const rows = new Map((await this.deps.ledger.balances(accountId)).map((r) => [r.chain, r]));
    const balances: ChainBalance[] = [];
    for (const chain of this.deps.chains.chains) {
      const row = rows.get(chain.id);
      if (row !== undefined || chain.enabled)
        balances.push({ chain, row: row ?? (await this.deps.ledger.balance(accountId, chain.id)) });
    }
    return {
      defaultChain: (await this.deps.ledger.defaultChain(accountId)) ?? this.deps.chains.defaultChain,
      balances,
    };
  }

  /** Sets the chain `auto` bills for this account; it must be an enabled chain. */
  async setDefaultChain(accountId: string, requested: string): Promise<string> {
    await this.requireAccount(accountId);
    const chain = enabledChain(this.deps.chains, requested, "chain");
    await this.deps.ledger.setDefaultChain(accountId, chain.id, this.deps.now());
    return chain.id;
  }

  /**
   * Sets a spend cap (`amount` given) or clears it, on an enabled chain; the key, if any, is
   * the caller's to check. Answers the account's caps afterwards.
   */
  async setSpendCap(target: Omit<SpendCap, "amount">, amount: bigint | undefined): Promise<CapStanding[]> {
    await this.requireAccount(target.accountId);
    const chain = enabledChain(this.deps.chains, target.chain, "chain").id;
    if (amount === undefined) await this.deps.ledger.clearSpendCap({ ...target, chain });
    else await this.deps.ledger.setSpendCap({ ...target, chain, amount }, this.deps.now());
    return this.spendCaps(target.accountId);
  }

  /** The account's caps, each with what its current period has spent and when it resets. */
  async spendCaps(accountId: string): Promise<CapStanding[]> {
    await this.requireAccount(accountId);
    const now = this.deps.now();
    const caps = await this.deps.ledger.spendCaps(accountId);
    return Promise.all(
      caps.map(async (cap) => ({
        cap,
        spent: await this.deps.ledger.capSpent(cap, periodStart(cap.period, now)),
        resetsAt: periodReset(cap.period, now),
      })),
    );
  }

  /** Funds the account may spend now on a chain. */
  async available(accountId: string, chainId: string): Promise<bigint> {
    return availableOf(await this.deps.ledger.balance(accountId, chainId));
  }

  /** An account's calls, newest first, before the cursor `beforeSeq`. */
  async usage(accountId: string, beforeSeq: bigint, limit: number): Promise<HoldState[]> {
    await this.requireAccount(accountId);
    return this.deps.ledger.listHolds(accountId, beforeSeq, limit);
  }

  private async placeHold(
    input: HoldInput,
  ): Promise<
    | { kind: "placed" | "existing"; state: HoldState }
    | { kind: "insufficient"; chain: ChainConfig; amount: bigint; available: bigint }
  > {
    const requestId = input.requestId.trim();
    if (requestId === "" || requestId.length > MAX_REQUEST_ID) {
      throw invalidField("request_id", `request_id must be 1–${MAX_REQUEST_ID} characters.`);
    }
    // One read for the account and its default chain: this runs before every call.
    const account = await this.deps.ledger.billingAccount(input.accountId);
    if (account === undefined) throw accountNotFound(input.accountId);
    const { call } = input;
    const chain = selectChain(this.deps.chains, input.chain, account.defaultChain);
    const amount = this.quoteOn(chain, call);
    const result = await this.deps.ledger.placeHold({
      id: holdIdFor(input.accountId, requestId),
      accountId: input.accountId,
      requestId,
      keyId: input.keyId,
      chain: chain.id,
      amount,
      callKind: call.kind,
      model: call.model,
      inputTokens: call.kind === "text" ? call.inputTokens : 0n,
      maxTokens: call.kind === "text" ? call.maxTokens : 0n,
      imageSize: call.kind === "image" ? call.size : "",
      imageCount: call.kind === "image" ? call.count : 0,
      createdAt: this.deps.now(),
    });
    switch (result.kind) {
      case "placed":
        this.metrics.holdPlaced(call.kind);
        return { kind: "placed", state: result.state };
      case "existing":
        return { kind: "existing", state: result.state };
      case "conflict":
        throw idConflict(`request_id ${JSON.stringify(requestId)}`);
      case "insufficient":
        return { kind: "insufficient", chain, amount, available: result.available };
      case "capped":
        throw spendCapReached(chain, amount, result.refusal);
    }
  }

  /** The account's call `requestId` (its hold and outcome), if the account made one. */
  async call(accountId: string, requestId: string): Promise<HoldState | undefined> {
    const state = await this.deps.ledger.getHold(holdIdFor(accountId, requestId));
    return state?.hold.accountId === accountId ? state : undefined;
  }

  /** A configured chain's registry entry. */
  chainConfig(id: string): ChainConfig | undefined {
    return this.deps.chains.byId.get(id);
  }

  private async settleWith(
    holdId: string,
    usage: DeliveredUsage,
    cap: boolean,
    placed?: HoldRow,
  ): Promise<{ state: HoldState; capped: boolean; priced: PricedUsage }> {
    checkUsage(usage);
    let hold = placed;
    if (hold === undefined) {
      const state = await this.deps.ledger.getHold(holdId);
      if (state === undefined) throw holdNotFound(holdId);
      if (state.resolution !== undefined)
        throw holdAlreadyResolved(holdId, state.resolution.status, state.hold.chain);
      hold = state.hold;
    }
    const { chain, priced, capped, charge } = this.priced(hold, usage, cap);
    const counts =
      hold.callKind === "text"
        ? { ...chargedTokens(priced), images: 0 }
        : { ...NO_TOKENS, images: usage.images };
    const recorded = usage.endpoint ? { ...counts, endpoint: usage.endpoint } : counts;
    const result = await this.deps.ledger.settle(
      holdId,
      charge,
      recorded,
      this.deps.now(),
      encodeCharges(priced),
    );
    const state = this.resolved(holdId, result, charge);
    this.metrics.holdsResolved("settled", 1);
    this.metrics.charged(chain.id, hold.model, charge, ledgerDecimals(chain.asset.decimals));
    return { state, capped, priced };
  }

  /**
   * What {@link settleDelivered} will charge `placed` for `usage`, without settling: for a call
   * paid with x402 whose charge is collected onchain before its answer is handed over.
   */
  chargeFor(placed: HoldRow, usage: DeliveredUsage): bigint {
    checkUsage(usage);
    return this.priced(placed, usage, true).charge;
  }

  /** A text call validated against the catalog. */
  private pricedText(call: TextCallSpec): PricedTextCall {
    return priceCall(this.deps.catalog, call) as PricedTextCall;
  }

  /** Pico-dollars as the chain's ledger units, rounded up; InvalidArgument past int64. */
  private units(chain: ChainConfig, pico: bigint): bigint {
    const amount = picoToUnits(pico, ledgerDecimals(chain.asset.decimals));
    if (amount > INT64_MAX) throw invalidField("call", "The call's worst-case price is out of range.");
    return amount;
  }

  /** The charge of `usage` on `hold`, capped at what the hold holds (raises included) when `cap`. */
  private priced(hold: HoldRow, usage: DeliveredUsage, cap: boolean) {
    // The charge depends on what was delivered, not on the request's features: only the model
    // (and an image call's size) comes from the hold.
    const call: CallSpec =
      hold.callKind === "text"
        ? { kind: "text", model: hold.model, inputTokens: hold.inputTokens, maxTokens: hold.maxTokens }
        : { kind: "image", model: hold.model, size: hold.imageSize, count: hold.imageCount };
    const chain = configuredChain(this.deps.chains, hold.chain);
    const priced = priceUsage(this.deps.catalog, priceCall(this.deps.catalog, call), usage);
    const full = picoToUnits(priced.pico, ledgerDecimals(chain.asset.decimals));
    const held = heldOf(hold);
    const capped = cap && full > held;
    return { chain, priced, capped, charge: capped ? held : full };
  }

  private async requireAccount(accountId: string): Promise<void> {
    if (!(await this.deps.ledger.accountExists(accountId))) throw accountNotFound(accountId);
  }

  private resolved(holdId: string, result: ResolveResult, charge: bigint): HoldState {
    switch (result.kind) {
      case "resolved":
        return result.state;
      case "not-found":
        throw holdNotFound(holdId);
      case "already-resolved":
        throw holdAlreadyResolved(holdId, result.state.resolution!.status, result.state.hold.chain);
      case "exceeds":
        throw settleExceedsHold(holdId, result.state.hold.chain, charge, heldOf(result.state.hold));
    }
  }
}
