import { Code, type ConnectError } from "@connectrpc/connect";
import { accountSuspended, invalidField, reasonError } from "../errors.js";
import type { AccountStore } from "../ports/accounts.js";
import { type HoldState, type LedgerStore, ZERO_USAGE } from "../ports/ledger.js";
import type { Log } from "../ports/log.js";
import { type Metrics, NO_METRICS } from "../ports/metrics.js";
import type {
  X402Gateway,
  X402Offer,
  X402Onchain,
  X402OnchainState,
  X402PaymentPayload,
  X402PaymentRow,
  X402Scheme,
  X402Settlement,
  X402Store,
} from "../ports/x402.js";
import { AUTO_CHAIN, type ChainConfig, type ChainRegistry } from "./chain-registry.js";
import { holdIdFor } from "./hold-ids.js";
import { formatUnits, ledgerDecimals, ledgerToOnchain, onchainToLedger } from "./money.js";
import { PAYMENT_REQUIRED_METADATA, PAYMENT_RESPONSE_METADATA, x402AccountId } from "./x402-accounts.js";
import { x402Identity } from "./x402-identity.js";

/**
 * x402 payments (spec v2, docs/x402.md): a caller without an API key pays a call with a signed
 * stablecoin authorisation. The gateway offers what it accepts in a 402's `PAYMENT-REQUIRED`,
 * verifies the payment the client sends back (`PAYMENT-SIGNATURE`) through a facilitator, and
 * collects what the call was charged onchain once it is known. In the ledger the payment is the
 * payer's own account (keyed by its wallet address), credited with what the payment authorises
 * from `system:x402` for the call's hold and settle, and closed with the unspent rest returned:
 * the hold-and-settle rules, the chain header and usage apply unchanged.
 *
 * Text is paid on `upto` (the payer authorises at least the call's worst case; the delivered
 * price is collected), images on `exact` (the listed price of the one image, collected before
 * it is handed over). The wire format, the facilitator and the schemes are behind the
 * {@link X402Gateway} port (src/chains/x402/ implements it with the payment SDK); this file is
 * the money rule: authorise and credit, refuse replays, collect before delivery or after a
 * stream, close, and recover what a crash left open.
 */

/** An EVM chain x402 is offered on, as the runtime set it up. */
export interface X402Chain {
  /** The registry id of the chain. */
  readonly chain: string;
  /** Where payments go: the chain's treasury. */
  readonly payTo: string;
  /** The offers' `extra`: on EVM the token's EIP-712 domain (`name`, `version`) payers sign over. */
  readonly extra: Readonly<Record<string, unknown>>;
  /** The schemes taken there: `exact` and `upto` on EVM, `exact` on Solana. */
  readonly schemes: readonly X402Scheme[];
}

/** What x402 is built from. */
export interface X402Deps {
  readonly store: X402Store;
  /**
   * The holds payments paid for: the recovery pass reads how each call ended, and settles the
   * hold of a payment collected before a crash kept its call from settling.
   */
  readonly ledger: Pick<LedgerStore, "getHold" | "settle" | "void">;
  readonly accounts: AccountStore;
  readonly registry: ChainRegistry;
  /**
   * The x402 wire format and the facilitator that verifies and settles payments (a local one on
   * the treasury's chains, or a remote one), with each offered chain's schemes registered.
   */
  readonly gateway: X402Gateway;
  /**
   * Whether a payment was collected, read from the chain: asked before a payment whose
   * collection was begun is ended without that collection on record.
   */
  readonly onchain: X402Onchain;
  readonly chains: readonly X402Chain[];
  /** How long a payment must stay valid: the longest call, with room to collect after it. */
  readonly maxTimeoutSeconds: number;
  /**
   * The longest a call may run (TOLLGATE_MAX_CALL_MS): a payment older than this whose call has
   * ended, still open, was left so by a crash, and the recovery pass ends it.
   */
  readonly maxCallMs: number;
  /** The gateway's public origin for the offers' resource URLs (TOLLGATE_PUBLIC_URL), if set. */
  readonly publicOrigin: string | undefined;
  /**
   * TOLLGATE_X402_MAX_AUTHORISATION, in micro-dollars: the largest worst case an `upto` call is
   * served with (what a stream whose collection fails can cost the gateway at most); none when
   * undefined.
   */
  readonly maxAuthorisation?: bigint | undefined;
  /** Counts collections by outcome (NO_METRICS when absent). */
  readonly metrics?: Metrics | undefined;
  readonly now: () => number;
  readonly log: Log;
}

/** A route paid with x402, by the scheme it takes. */
export type X402Route =
  | { readonly kind: "text"; readonly path: string }
  | { readonly kind: "image"; readonly path: string };

/** A payment verified and credited for one call. */
export interface X402Authorisation {
  readonly id: string;
  readonly accountId: string;
  readonly chain: ChainConfig;
  readonly scheme: X402Scheme;
  readonly payer: string;
  /** Ledger units credited to the payer's account. */
  readonly authorised: bigint;
  /** When the gateway took the payment (unix ms): no collection of it is older. */
  readonly createdAt: number;
  readonly payload: X402PaymentPayload;
  readonly requirements: X402Offer;
}

/** What paying a call asks for. */
export interface X402PayInput {
  /** The payment as sent: a `PAYMENT-SIGNATURE` (or `X-PAYMENT`) header value. */
  readonly header: string;
  readonly route: X402Route;
  /** The `x-gateway-billing-chain` value ("" or `auto`: any chain offered). */
  readonly chainField: string;
  readonly requestId: string;
  /** The gateway's origin as the facade saw it, for the resource URL. */
  readonly origin: string | undefined;
  /** The call's worst case on a chain, in its ledger units (what the hold will be). */
  readonly quote: (chain: ChainConfig) => bigint;
}

/** The members of an x402 v2 payment payload; any other is refused. */
const PAYLOAD_KEYS: ReadonlySet<string> = new Set([
  "x402Version",
  "resource",
  "accepted",
  "payload",
  "extensions",
]);

/** A payload is read up to this size; a real one is about 1 KB (a permit and its signature). */
const MAX_PAYMENT_HEADER = 16 * 1024;

export class X402Payments {
  /** Per chain and scheme, the requirements with every field but `amount` as offered. */
  readonly #templates = new Map<string, X402Offer>();
  readonly #chains: ReadonlyMap<string, { readonly config: ChainConfig; readonly offer: X402Chain }>;
  /** Collections still running after their call's answer went out (streams), awaited by {@link drain}. */
  readonly #collecting = new Set<Promise<unknown>>();
  #recovery: NodeJS.Timeout | undefined;

  private constructor(private readonly deps: X402Deps) {
    const chains = new Map<string, { config: ChainConfig; offer: X402Chain }>();
    for (const offer of deps.chains) {
      const config = deps.registry.byId.get(offer.chain);
      if (config === undefined) continue;
      chains.set(config.id, { config, offer });
    }
    this.#chains = chains;
  }

  /**
   * Builds the payments and asks the facilitator what it supports (upto's offers name the
   * facilitator's address). A chain and scheme the facilitator does not serve is not offered
   * (and said so in the log); a facilitator that cannot answer, or serves none, stops start-up.
   */
  static async create(deps: X402Deps): Promise<X402Payments> {
    const payments = new X402Payments(deps);
    await deps.gateway.initialize();
    for (const { config, offer } of payments.#chains.values()) {
      for (const scheme of offer.schemes) {
        try {
          const template = await deps.gateway.offer({
            scheme,
            network: config.network,
            payTo: offer.payTo,
            asset: config.asset.address,
            extra: offer.extra,
            maxTimeoutSeconds: deps.maxTimeoutSeconds,
          });
          if (template !== undefined) payments.#templates.set(`${config.id}/${scheme}`, template);
        } catch (error) {
          deps.log.warn(
            { chain: config.id, scheme, err: error },
            "the x402 facilitator does not serve this chain and scheme: not offered",
          );
        }
      }
    }
    if (payments.#templates.size === 0) throw new Error("the x402 facilitator serves none of the chains");
    return payments;
  }

  /**
   * The 402 for a call without a key or payment: what the call costs at most on each chain it
   * may bill, as a `PAYMENT-REQUIRED` offer (in the error's metadata) and a message for
   * clients that read only the route's envelope.
   */
  paymentRequired(input: Omit<X402PayInput, "header" | "requestId">): ConnectError {
    return this.#required(
      input,
      "PAYMENT_REQUIRED",
      "This call is paid with x402: send a payment (PAYMENT-SIGNATURE) for one of the PAYMENT-REQUIRED header's " +
        "offers. With an API key, call the same route under /v1 instead.",
    );
  }

  /**
   * A call's payment on x402's door: without one (`header` ""), the 402 offering what the
   * gateway accepts ({@link paymentRequired}); with one, {@link authorise}. An `upto` call whose
   * worst case is above TOLLGATE_X402_MAX_AUTHORISATION is refused first (400 on `max_tokens`).
   */
  async pay(input: X402PayInput): Promise<X402Authorisation> {
    this.#refuseAboveCap(input);
    if (input.header === "") throw this.paymentRequired(input);
    return await this.authorise(input);
  }

  /**
   * Verifies a payment for one call and credits what it authorises to its payer's account.
   * Every refusal is a 402 carrying a fresh offer; nothing is written for a refused payment.
   * The payment's identity is what its payer signed (x402-identity.ts), so a re-encoding of a
   * payment presented before is a replay, refused before the facilitator is asked.
   */
  async authorise(input: X402PayInput): Promise<X402Authorisation> {
    const scheme: X402Scheme = input.route.kind === "text" ? "upto" : "exact";
    const payload = this.#decode(input);
    const accepted = payload.accepted;
    const entry = [...this.#chains.values()].find((c) => c.config.network === accepted.network);
    if (entry === undefined) {
      throw this.#required(
        input,
        "X402_PAYMENT_INVALID",
        `This gateway takes no x402 payment on network ${JSON.stringify(accepted.network)}.`,
      );
    }
    const chain = entry.config;
    const named = input.chainField;
    if (named !== "" && named !== AUTO_CHAIN && named !== chain.id) {
      throw this.#required(
        input,
        "X402_WRONG_CHAIN",
        `The payment is on ${chain.id} (${chain.network}) but x-gateway-billing-chain names ${named}: ` +
          "pay on the chain the header names, or leave the header out.",
      );
    }
    if (accepted.scheme !== scheme) {
      throw this.#required(
        input,
        "X402_PAYMENT_INVALID",
        `${input.route.path} is paid with the x402 "${scheme}" scheme, not "${accepted.scheme}".`,
      );
    }
    const identity = x402Identity(chain.network, scheme, payload.payload, String(accepted.asset ?? ""));
    if (!identity.ok) {
      throw this.#required(
        input,
        "X402_PAYMENT_INVALID",
        `The payment is not one x402 defines: ${identity.problem}.`,
      );
    }
    if ((await this.deps.store.x402Payment(identity.id)) !== undefined) throw this.#replayed(input);
    let onchain: bigint;
    try {
      onchain = BigInt(accepted.amount);
    } catch {
      throw this.#required(input, "X402_PAYMENT_INVALID", "The payment's amount is not an integer.");
    }
    const template = this.#templates.get(`${chain.id}/${scheme}`);
    if (template === undefined) {
      throw this.#required(
        input,
        "X402_PAYMENT_INVALID",
        `This gateway takes no "${scheme}" payment on ${chain.id} (its facilitator does not serve it).`,
      );
    }
    const requirements: X402Offer = { ...template, amount: accepted.amount };
    if (!this.deps.gateway.matches(requirements, payload)) {
      throw this.#required(
        input,
        "X402_PAYMENT_INVALID",
        "The payment does not match what this gateway offers (asset, payTo, timeout or token domain): " +
          "pay one of the PAYMENT-REQUIRED offers.",
      );
    }
    const authorised = onchain < 0n ? 0n : onchainToLedger(onchain, chain.asset.decimals).ledger;
    const needed = input.quote(chain);
    const decimals = ledgerDecimals(chain.asset.decimals);
    const wrongAmount = scheme === "exact" ? authorised !== needed : authorised < needed;
    if (wrongAmount) {
      const amount = `${formatUnits(needed, decimals)} ${chain.asset.symbol}`;
      throw this.#required(
        input,
        "X402_AMOUNT_TOO_SMALL",
        scheme === "exact"
          ? `This call costs ${amount} on ${chain.id}; the payment is for ${formatUnits(authorised, decimals)}.`
          : `This call needs an authorisation of at least ${amount} on ${chain.id} (its worst case); ` +
              `the payment authorises ${formatUnits(authorised, decimals)}.`,
        { chain: chain.id, needed: `${needed}`, authorised: `${authorised}` },
      );
    }
    if (identity.payer !== undefined) await this.#refuseOwing(input, identity.payer);
    const verified = await this.#verify(payload, requirements);
    if (!verified.isValid || verified.payer === undefined) {
      throw this.#required(
        input,
        "X402_PAYMENT_INVALID",
        `The payment was refused: ${verified.invalidMessage ?? verified.invalidReason ?? "not valid"}.`,
        { invalid_reason: verified.invalidReason ?? "" },
      );
    }
    const payer = chain.family === "evm" ? verified.payer.toLowerCase() : verified.payer;
    if (identity.payer !== undefined && identity.payer !== payer) {
      throw this.#required(input, "X402_PAYMENT_INVALID", "The payment's signer is not the payer it names.");
    }
    if (identity.payer === undefined) await this.#refuseOwing(input, payer);
    const accountId = await this.#payerAccount(payer);
    const id = identity.id;
    const createdAt = this.deps.now();
    const written = await this.deps.store.authoriseX402({
      id,
      holdId: holdIdFor(accountId, input.requestId),
      accountId,
      chain: chain.id,
      scheme,
      payer,
      authorised,
      payload: JSON.stringify(payload),
      createdAt,
    });
    if (written === "replayed") throw this.#replayed(input);
    return { id, accountId, chain, scheme, payer, authorised, createdAt, payload, requirements };
  }

  /**
   * Collects `charge` (ledger units) onchain. The answer says whether the chain took it; it
   * never throws for the chain's refusal (a thrown facilitator error is a refusal too).
   */
  async settleOnchain(payment: X402Authorisation, charge: bigint): Promise<X402Settlement> {
    const amount = ledgerToOnchain(charge, payment.chain.asset.decimals);
    try {
      return await this.deps.gateway.settle(
        payment.payload,
        payment.requirements,
        payment.scheme === "upto" ? amount : undefined,
      );
    } catch (error) {
      return {
        success: false,
        errorReason: SETTLE_THREW,
        errorMessage: error instanceof Error ? error.message : String(error),
        transaction: "",
        network: payment.requirements.network,
      };
    }
  }

  /**
   * Collects `charge` before the answer is handed over (a non-streaming text answer, an image).
   * The collection is marked begun, durably, before the facilitator is asked: from then on the
   * payment may have been collected whatever this process hears, so its hold is never swept and
   * it is never closed unused without asking the chain. The collection is then recorded
   * (`collected`) before anything else is written for the call: a crash after that leaves a
   * payment the recovery pass settles; a crash before it, one the recovery pass finds onchain.
   *
   * A collection the facilitator does not confirm is looked up onchain: taken after all, it is
   * recorded as any other. One the chain shows can no longer be taken, or that the facilitator
   * refused before sending anything, releases the call's hold (`releaseHold`), closes the
   * payment (nothing charged, the whole authorisation returned) and throws 402
   * X402_PAYMENT_NOT_COLLECTED: the caller then delivers nothing. One that was sent and could
   * still land is left open for the recovery pass (its hold pending), and the caller delivers
   * nothing either. Whatever happens, the hold is no longer the caller's to release.
   */
  async collectBeforeDelivery(
    payment: X402Authorisation,
    charge: bigint,
    releaseHold: () => Promise<unknown>,
  ): Promise<X402Settlement> {
    const { settled, inDoubt } = await this.#collectOnce(payment, charge);
    if (inDoubt) throw paymentNotCollected(settled, this.responseHeader(settled), true);
    if (!settled.success) {
      this.#metrics.x402Collected("refused");
      this.deps.log.warn(
        {
          payment: payment.id,
          chain: payment.chain.id,
          reason: settled.errorReason,
          err: settled.errorMessage,
        },
        "an x402 payment could not be collected before delivery: nothing delivered, nothing charged",
      );
      // The hold first: the whole authorisation is then available to return.
      await releaseHold();
      await this.deps.store.closeX402({
        id: payment.id,
        status: "unused",
        settled: 0n,
        txHash: "",
        error: settled.errorMessage ?? settled.errorReason ?? "refused",
        returned: payment.authorised,
        now: this.deps.now(),
      });
      throw paymentNotCollected(settled, this.responseHeader(settled), false);
    }
    this.#metrics.x402Collected("settled");
    await this.deps.store.recordX402Collection({
      id: payment.id,
      collected: charge,
      txHash: settled.transaction,
      now: this.deps.now(),
    });
    return settled;
  }

  /**
   * Ends a payment whose call was charged `charge` and delivered (a stream): collected onchain
   * (nothing when 0), then closed with the rest of the authorisation returned. The collection is
   * marked begun before the facilitator is asked, and one it does not confirm is looked up
   * onchain: taken after all (a collection retried after a crash, its permit spent by the one
   * before), it closes `settled` with that transaction; sent and still able to land, it is left
   * open for the recovery pass. A collection the chain refused is logged, counted and recorded
   * as `failed` (the charge stands as owed, and the payer's further x402 calls are refused until
   * an operator clears it). Answers the settlement, undefined when nothing was collected (or it
   * was left open).
   */
  async collect(payment: X402Authorisation, charge: bigint): Promise<X402Settlement | undefined> {
    if (charge === 0n) {
      await this.close(payment, 0n, undefined);
      return undefined;
    }
    const { settled, inDoubt } = await this.#collectOnce(payment, charge);
    if (inDoubt) return undefined;
    this.#metrics.x402Collected(settled.success ? "settled" : "failed");
    await this.close(payment, charge, settled);
    return settled;
  }

  /**
   * Marks the collection begun, asks the facilitator to collect `charge`, and when it does not
   * confirm, asks the chain: a payment the chain took is the settlement; one sent that may still
   * land is `inDoubt` (logged, left to the recovery pass: nothing is delivered on it).
   */
  async #collectOnce(
    payment: X402Authorisation,
    charge: bigint,
  ): Promise<{ settled: X402Settlement; inDoubt: boolean }> {
    await this.#beginCollection(payment);
    const settled = await this.settleOnchain(payment, charge);
    if (settled.success) return { settled, inDoubt: false };
    const onchain = await this.#lookUp(payment, payment.createdAt);
    const taken = this.#takenAs(payment, charge, onchain);
    if (taken !== undefined) return { settled: taken, inDoubt: false };
    if (onchain.kind === "unused" || !maySend(settled)) return { settled, inDoubt: false };
    this.deps.log.error(
      {
        payment: payment.id,
        chain: payment.chain.id,
        reason: settled.errorReason,
        err: settled.errorMessage,
        onchain: onchain.kind,
      },
      "an x402 collection was sent but not confirmed: nothing delivered on it; the payment is left to the recovery pass",
    );
    return { settled, inDoubt: true };
  }

  /** {@link collect} after the answer went out (a stream): awaited by {@link drain} at shutdown. */
  collectLater(payment: X402Authorisation, charge: bigint, requestId: string): void {
    const running = this.collect(payment, charge).catch((error: unknown) =>
      this.deps.log.error(
        { err: error, requestId, payment: payment.id },
        "collecting an x402 payment failed",
      ),
    );
    this.#collecting.add(running);
    void running.finally(() => this.#collecting.delete(running));
  }

  /**
   * Records how a payment ended — `settled` by the chain, refused (`failed`), or `unused`
   * (nothing charged) — and returns the unspent authorisation to `system:x402`.
   */
  async close(
    payment: X402Authorisation,
    charge: bigint,
    settled: X402Settlement | undefined,
  ): Promise<void> {
    if (settled !== undefined && !settled.success) {
      this.deps.log.error(
        {
          payment: payment.id,
          chain: payment.chain.id,
          reason: settled.errorReason,
          err: settled.errorMessage,
        },
        "an x402 payment's collection was refused: its charge stands as owed",
      );
    }
    await this.deps.store.closeX402({
      id: payment.id,
      status: settled === undefined ? "unused" : settled.success ? "settled" : "failed",
      settled: settled?.success === true ? charge : 0n,
      txHash: settled?.success === true ? settled.transaction : "",
      error:
        settled === undefined || settled.success
          ? ""
          : (settled.errorMessage ?? settled.errorReason ?? "refused"),
      returned: payment.authorised - charge,
      now: this.deps.now(),
    });
  }

  get #metrics(): Metrics {
    return this.deps.metrics ?? NO_METRICS;
  }

  /** The x402 payments of these holds (for their receipts). */
  payments(holdIds: readonly string[]): Promise<Map<string, X402PaymentRow>> {
    return this.deps.store.x402Payments(holdIds);
  }

  /** The `PAYMENT-RESPONSE` header value of a collection. */
  responseHeader(settled: X402Settlement): string {
    return this.deps.gateway.paymentResponseHeader(settled);
  }

  /**
   * Ends the payments a crash left open (authorised or collected, older than the longest call):
   * - `collected` (its charge was collected onchain before the crash): its hold — never swept
   *   while the payment is collected — is settled at the collected amount if still pending, and
   *   the payment closed `settled` with its transaction;
   * - `authorised` with a collection begun (`collectingAt`, older than the longest call: not one
   *   still running), which the chain may have taken while nobody was there to record it: the
   *   chain is asked. Taken, the collection is recorded (its transaction, what it moved) and the
   *   payment ends as a collected one: charged once, closed `settled`. Not taken and no longer
   *   able to be, it ends as below (its hold, which the sweeper left, expired first). Not taken
   *   yet but still able to be, it waits (a stream's charge is collected now instead); when the
   *   chain's answer settles nothing, it is left for the operator;
   * - `authorised`, its call over: a call that charged nothing, or never held, returns the whole
   *   authorisation; an `upto` call that charged (a stream, settled before its collection) is
   *   collected now (one the chain refuses because an earlier collection spent its permit is
   *   found onchain and closed `settled`; one it refuses otherwise is `failed`, the charge owed).
   *   A call still held waits for the sweeper.
   * One payment's failure is logged and leaves the others to end. Resolves with how many
   * payments it ended.
   */
  async recover(): Promise<number> {
    const now = this.deps.now();
    const open = await this.deps.store.openX402Payments(now - this.deps.maxCallMs, 100);
    let ended = 0;
    for (const row of open) {
      try {
        if (await this.#recoverOne(row, now)) {
          this.deps.log.info(
            { payment: row.id, chain: row.chain, status: row.status },
            "ended an x402 payment a crash left open",
          );
          ended++;
        }
      } catch (error) {
        this.deps.log.error(
          { err: error, payment: row.id },
          "ending an open x402 payment failed: retried next pass",
        );
      }
    }
    return ended;
  }

  /** Ends one open payment ({@link recover}); false when it is left open. */
  async #recoverOne(row: X402PaymentRow, now: number): Promise<boolean> {
    let state = await this.deps.ledger.getHold(row.holdId);
    const entry = this.#chains.get(row.chain);
    const template = this.#templates.get(`${row.chain}/${row.scheme}`);
    if (entry === undefined || template === undefined) {
      this.deps.log.warn(
        { payment: row.id, chain: row.chain, scheme: row.scheme },
        "an open x402 payment on a chain x402 no longer runs on: left open",
      );
      return false;
    }
    const payload = JSON.parse(row.payload) as X402PaymentPayload;
    const payment: X402Authorisation = {
      id: row.id,
      accountId: row.accountId,
      chain: entry.config,
      scheme: row.scheme,
      payer: row.payer,
      authorised: row.authorised,
      createdAt: row.createdAt,
      payload,
      requirements: { ...template, amount: payload.accepted.amount },
    };
    if (row.status === "authorised" && row.collectingAt !== undefined) {
      // A collection begun less than the longest call ago may still be running here.
      if (row.collectingAt > now - this.deps.maxCallMs) return false;
      const onchain = await this.#lookUp(payment, payment.createdAt);
      switch (onchain.kind) {
        case "used": {
          const collected = onchainToLedger(onchain.collected, payment.chain.asset.decimals).ledger;
          const recorded = await this.deps.store.recordX402Collection({
            id: row.id,
            collected,
            txHash: onchain.transaction,
            now: this.deps.now(),
          });
          if (recorded !== "recorded") return false;
          this.#metrics.x402Collected("settled");
          this.deps.log.warn(
            {
              payment: row.id,
              chain: row.chain,
              transaction: onchain.transaction,
              collected: `${collected}`,
            },
            "an x402 collection the gateway never recorded was found onchain: recorded",
          );
          row = { ...row, status: "collected", settled: collected, txHash: onchain.transaction };
          break;
        }
        case "unknown":
          this.deps.log.error(
            { payment: row.id, chain: row.chain, reason: onchain.reason },
            "an x402 payment whose collection was begun cannot be told collected or not: left for the operator",
          );
          return false;
        case "usable":
          // Nothing took it yet, but a collection already sent still could. A stream's charge is
          // collected now (a second collection of one permit cannot both land); anything else
          // waits until the authorisation can no longer be used.
          if (state?.resolution?.status !== "settled" || state.resolution.amount === 0n) return false;
          break;
        case "unused":
          // The sweeper leaves the hold of a payment whose collection was begun: ended here.
          if (state !== undefined && state.resolution === undefined) {
            const voided = await this.deps.ledger.void(row.holdId, "expired", this.deps.now());
            state = voided.kind === "not-found" ? undefined : voided.state;
          }
          break;
      }
    }
    if (row.status === "collected") {
      if (!(await this.#settleCollected(row, state))) return false;
      await this.close(payment, row.settled, {
        success: true,
        transaction: row.txHash,
        network: template.network,
      });
      return true;
    }
    if (state !== undefined && state.resolution === undefined) return false;
    await this.collect(payment, state?.resolution?.amount ?? 0n);
    return true;
  }

  /**
   * Settles the hold of a payment collected before a crash, at what was collected (its usage
   * died with the process: the charge is the collected amount, with no token counts). False
   * when the hold is not there to settle, or ended otherwise (logged for the operator).
   */
  async #settleCollected(row: X402PaymentRow, state: HoldState | undefined): Promise<boolean> {
    if (state === undefined) {
      this.deps.log.error({ payment: row.id }, "a collected x402 payment has no hold: left for the operator");
      return false;
    }
    if (state.resolution === undefined) {
      const { hold } = state;
      const result = await this.deps.ledger.settle(
        hold.id,
        row.settled,
        // Its usage died with the process that collected it: no counts, the images it held.
        { ...ZERO_USAGE, images: hold.callKind === "image" ? hold.imageCount : 0 },
        this.deps.now(),
        "",
      );
      if (result.kind === "resolved") return true;
      state = result.kind === "not-found" ? undefined : result.state;
    }
    if (state?.resolution?.status === "settled" && state.resolution.amount === row.settled) return true;
    this.deps.log.error(
      { payment: row.id, hold: row.holdId, resolution: state?.resolution?.status },
      "a collected x402 payment's hold ended otherwise than at its collection: left for the operator",
    );
    return false;
  }

  /**
   * Marks the payment's collection begun, durably, before the facilitator is asked for it; a
   * payment that cannot be marked (closed, or collected, meanwhile) is not collected.
   */
  async #beginCollection(payment: X402Authorisation): Promise<void> {
    const marked = await this.deps.store.markX402Collecting(payment.id, this.deps.now());
    if (marked !== "marked") {
      throw new Error(`x402 payment ${payment.id}: its collection cannot begin (${marked})`);
    }
  }

  /** What the chain says of the payment since `since`; a chain that cannot be asked settles nothing. */
  async #lookUp(payment: X402Authorisation, since: number): Promise<X402OnchainState> {
    try {
      return await this.deps.onchain.collection(payment.payload, payment.requirements, since);
    } catch (error) {
      return {
        kind: "unknown",
        reason: `the chain could not be asked: ${error instanceof Error ? error.message : String(error)}`,
      };
    }
  }

  /**
   * The settlement of a collection the facilitator did not confirm but the chain shows taken for
   * `charge`; undefined when it is not (or for another amount: left for the recovery pass and the
   * operator, never recorded as this call's).
   */
  #takenAs(
    payment: X402Authorisation,
    charge: bigint,
    onchain: X402OnchainState,
  ): X402Settlement | undefined {
    if (onchain.kind !== "used") return undefined;
    const collected = onchainToLedger(onchain.collected, payment.chain.asset.decimals).ledger;
    if (collected !== charge) {
      this.deps.log.error(
        {
          payment: payment.id,
          transaction: onchain.transaction,
          collected: `${collected}`,
          charge: `${charge}`,
        },
        "an x402 collection found onchain moved another amount than the call's charge",
      );
      return undefined;
    }
    this.deps.log.warn(
      { payment: payment.id, chain: payment.chain.id, transaction: onchain.transaction },
      "an x402 collection the facilitator did not confirm was found onchain",
    );
    return { success: true, transaction: onchain.transaction, network: payment.requirements.network };
  }

  /** Runs {@link recover} now and every `intervalMs` (an unref'd timer) until {@link stopRecovery}. */
  startRecovery(intervalMs: number): void {
    // One pass at a time: two passes over the same open payment would both collect it, and the
    // loser's refusal could close as `failed` a payment the winner collected.
    let running = false;
    const run = () => {
      if (running) return;
      running = true;
      void this.recover()
        .catch((error: unknown) => this.deps.log.error({ err: error }, "the x402 recovery pass failed"))
        .finally(() => {
          running = false;
        });
    };
    run();
    this.#recovery = setInterval(run, intervalMs);
    this.#recovery.unref();
  }

  stopRecovery(): void {
    clearInterval(this.#recovery);
  }

  /** Waits for the collections still running (shutdown). */
  async drain(): Promise<void> {
    while (this.#collecting.size > 0) await Promise.allSettled([...this.#collecting]);
  }

  /**
   * The facilitator's verdict. A remote facilitator answers a refusal with an error status
   * (thrown as its verdict); one that cannot be reached is a 503: nothing was charged, retry later.
   */
  async #verify(payload: X402PaymentPayload, requirements: X402Offer) {
    try {
      return await this.deps.gateway.verify(payload, requirements);
    } catch (error) {
      this.deps.log.error({ err: error }, "the x402 facilitator did not answer a verify");
      throw reasonError(
        Code.Unavailable,
        "X402_FACILITATOR_UNAVAILABLE",
        "The x402 facilitator could not verify the payment just now; nothing was charged. Try again.",
      );
    }
  }

  /** 402 X402_PAYMENT_REPLAYED: a payment (by what its payer signed) pays for one call. */
  #replayed(input: X402PayInput): ConnectError {
    return this.#required(
      input,
      "X402_PAYMENT_REPLAYED",
      "This payment was already presented: an x402 payment pays for one call. Sign a new one.",
    );
  }

  /**
   * Refuses a payer that owes: one of its streams was delivered and its collection refused
   * onchain (a `failed` payment no operator cleared). Checked on every host, in the store.
   */
  async #refuseOwing(input: X402PayInput, payer: string): Promise<void> {
    const [owed] = await this.deps.store.failedX402Payments(payer, 1);
    if (owed === undefined) return;
    throw this.#required(
      input,
      "X402_PAYER_OWES",
      `A call this payer was served could not be collected onchain (payment ${owed.id}, ${owed.error || "refused"}): ` +
        "its x402 calls are refused until the gateway's operator clears it.",
      { payment: owed.id },
    );
  }

  /**
   * Refuses (400 on `max_tokens`) an `upto` call whose worst case is above
   * TOLLGATE_X402_MAX_AUTHORISATION on a chain it could be paid on: a stream is delivered
   * before it is collected, so its worst case is what a payer who moves its funds meanwhile can
   * cost the gateway.
   */
  #refuseAboveCap(input: X402PayInput): void {
    const cap = this.deps.maxAuthorisation;
    if (cap === undefined || input.route.kind !== "text") return;
    for (const { config } of this.#chains.values()) {
      const named = input.chainField;
      if (named !== "" && named !== AUTO_CHAIN && config.id !== named) continue;
      const decimals = ledgerDecimals(config.asset.decimals);
      // The cap is in micro-dollars; a chain's ledger units are 10^-decimals dollars.
      const capOnChain =
        decimals >= 6 ? cap * 10n ** BigInt(decimals - 6) : cap / 10n ** BigInt(6 - decimals);
      const needed = input.quote(config);
      if (needed <= capOnChain) continue;
      throw invalidField(
        "max_tokens",
        `This call's worst case is ${formatUnits(needed, decimals)} ${config.asset.symbol}; calls paid with x402 ` +
          `are served up to ${formatUnits(capOnChain, decimals)} (TOLLGATE_X402_MAX_AUTHORISATION). ` +
          "Lower max_tokens, or call /v1 with an API key.",
      );
    }
  }

  /** The payment as sent, decoded; anything unreadable is a 402 saying so. */
  #decode(input: X402PayInput): X402PaymentPayload {
    let payload: X402PaymentPayload;
    try {
      if (input.header.length > MAX_PAYMENT_HEADER) throw new Error("too large");
      payload = this.deps.gateway.decodePayment(input.header);
    } catch {
      throw this.#required(
        input,
        "X402_PAYMENT_INVALID",
        "The PAYMENT-SIGNATURE header is not an x402 payment (base64 of its JSON).",
      );
    }
    if (payload?.x402Version !== 2) {
      throw this.#required(
        input,
        "X402_PAYMENT_INVALID",
        `x402 version ${JSON.stringify(payload?.x402Version)} payments are not taken: pay with x402 v2 ` +
          "(PAYMENT-SIGNATURE, as @x402/fetch and the other 2.x clients send it).",
      );
    }
    if (
      typeof payload.accepted !== "object" ||
      payload.accepted === null ||
      typeof payload.payload !== "object"
    ) {
      throw this.#required(input, "X402_PAYMENT_INVALID", "The payment names no accepted offer.");
    }
    // A key x402 does not define changes nothing the facilitator reads: it could only re-encode.
    const unknown = Object.keys(payload).find((key) => !PAYLOAD_KEYS.has(key));
    if (unknown !== undefined) {
      throw this.#required(
        input,
        "X402_PAYMENT_INVALID",
        `The payment has a key x402 does not define: ${JSON.stringify(unknown)}.`,
      );
    }
    return payload;
  }

  /** The payer's account, opened on its first payment; a suspended one is refused (403). */
  async #payerAccount(payer: string): Promise<string> {
    const id = x402AccountId(payer);
    let account = await this.deps.accounts.getAccount(id);
    if (account === undefined) {
      try {
        account = await this.deps.accounts.insertAccount(id, `x402 payer ${payer}`, this.deps.now());
      } catch (error) {
        // Another call of the same payer opened it meanwhile.
        account = await this.deps.accounts.getAccount(id);
        if (account === undefined) throw error;
      }
    }
    if (account.status !== "active") throw accountSuspended();
    return id;
  }

  /** A 402 with a fresh offer for the call on every chain it may bill. */
  #required(
    input: Omit<X402PayInput, "header" | "requestId">,
    reason: string,
    message: string,
    metadata: Record<string, string> = {},
  ): ConnectError {
    const named = input.chainField;
    const scheme: X402Scheme = input.route.kind === "text" ? "upto" : "exact";
    const chains = [...this.#chains.values()].filter(
      (c) =>
        (named === "" || named === AUTO_CHAIN || c.config.id === named) &&
        this.#templates.has(`${c.config.id}/${scheme}`),
    );
    const accepts = chains.map(({ config }) => ({
      ...this.#templates.get(`${config.id}/${scheme}`)!,
      amount: `${ledgerToOnchain(input.quote(config), config.asset.decimals)}`,
    }));
    const origin = this.deps.publicOrigin ?? input.origin ?? "http://localhost";
    const resource = {
      url: `${origin}${input.route.path}`,
      description: input.route.kind === "text" ? "A messages call, its delivered price" : "One image",
      mimeType: "application/json",
    };
    const required = this.deps.gateway.paymentRequiredHeader({
      error: message,
      resource,
      accepts,
      sponsorGas: scheme === "upto",
    });
    if (accepts.length === 0 && named !== "" && named !== AUTO_CHAIN) {
      metadata = { ...metadata, chain: named };
      message += ` No x402 payment is taken on ${named} for ${input.route.path} ("${scheme}" does not run there): pay with an API key, or on another chain.`;
    }
    return reasonError(Code.FailedPrecondition, reason, message, {
      ...metadata,
      [PAYMENT_REQUIRED_METADATA]: required,
    });
  }
}

/**
 * A payment not collected before delivery: 402, and the answer is not handed over. `pending`: the
 * collection was sent and not confirmed, so it may yet land (the recovery pass then records it).
 */
function paymentNotCollected(
  settled: X402Settlement,
  responseHeader: string,
  pending: boolean,
): ConnectError {
  const why = settled.errorMessage ?? settled.errorReason ?? "refused";
  return reasonError(
    Code.FailedPrecondition,
    "X402_PAYMENT_NOT_COLLECTED",
    pending
      ? `The payment's collection was sent but not confirmed (${why}): the answer was not delivered. ` +
          "Should the collection land, the call's receipt says so."
      : `The payment could not be collected onchain (${why}): nothing was charged and the answer was not delivered.`,
    { [PAYMENT_RESPONSE_METADATA]: responseHeader },
  );
}

/** How {@link X402Payments.settleOnchain} answers a facilitator that threw (it may have sent). */
const SETTLE_THREW = "settle_failed";

/**
 * Whether a collection the facilitator did not confirm may have been sent: it names a
 * transaction, says one is pending, failed while sending, or could not be heard. x402's
 * facilitators answer a refusal before sending (a failed check or simulation) with a reason
 * alone; anything else may have reached the chain.
 */
function maySend(settled: X402Settlement): boolean {
  return (
    settled.transaction !== "" ||
    settled.errorMessage !== undefined ||
    settled.errorReason === SETTLE_THREW ||
    /settlement_pending|transaction_failed/.test(settled.errorReason ?? "")
  );
}
