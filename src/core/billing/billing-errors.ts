import { Code, type ConnectError } from "@connectrpc/connect";
import { reasonError } from "../errors.js";
import type { ChainConfig } from "./chain-registry.js";
import { formatUnits, ledgerDecimals } from "./money.js";
import type { CapRefusal } from "./spend-caps.js";
import { PAYMENT_REQUIRED_METADATA } from "./x402-accounts.js";

/** The header (and RPC field) that picks the chain a call bills on. */
export const CHAIN_FIELD = "x-gateway-billing-chain";

/**
 * The account cannot cover the call on `chain`; the facade answers 402. `needed` and `available`
 * are ledger units (10^-ledger_decimals of the asset); `decimals` stays the asset's own.
 */
export const insufficientFunds = (chain: ChainConfig, needed: bigint, available: bigint): ConnectError => {
  const { symbol, decimals: assetDecimals } = chain.asset;
  const decimals = ledgerDecimals(assetDecimals);
  return reasonError(
    Code.FailedPrecondition,
    "INSUFFICIENT_FUNDS",
    `Insufficient funds on ${chain.id}: this call needs up to ${formatUnits(needed, decimals)} ${symbol}, ` +
      `${formatUnits(available, decimals)} ${symbol} is available.`,
    {
      chain: chain.id,
      needed: needed.toString(),
      available: available.toString(),
      symbol,
      decimals: `${assetDecimals}`,
      ledger_decimals: `${decimals}`,
    },
  );
};

/**
 * A spend cap leaves less than the call's hold; the facade answers 402 with `x-should-retry:
 * false`. Names the cap (whose: the account or a key; its period), what is left of it and when
 * it resets (metadata `resets_at`: ISO 8601, absent for a lifetime cap). Amounts as in
 * {@link insufficientFunds}.
 */
export const spendCapReached = (chain: ChainConfig, needed: bigint, refusal: CapRefusal): ConnectError => {
  const { symbol, decimals: assetDecimals } = chain.asset;
  const decimals = ledgerDecimals(assetDecimals);
  const { cap, remaining, resetsAt } = refusal;
  const whose = cap.keyId === "" ? "the account's" : `key ${cap.keyId}'s`;
  const label = cap.period === "lifetime" ? "lifetime" : cap.period === "day" ? "daily" : "monthly";
  const reset = resetsAt === undefined ? undefined : new Date(resetsAt).toISOString();
  return reasonError(
    Code.FailedPrecondition,
    "SPEND_CAP_REACHED",
    `Spend cap reached on ${chain.id}: ${whose} ${label} cap of ${formatUnits(cap.amount, decimals)} ${symbol} ` +
      `has ${formatUnits(remaining, decimals)} ${symbol} left and this call needs up to ` +
      `${formatUnits(needed, decimals)} ${symbol}; ` +
      (reset === undefined ? "a lifetime cap never resets." : `it resets at ${reset}.`),
    {
      chain: chain.id,
      cap_scope: cap.keyId === "" ? "account" : "key",
      ...(cap.keyId === "" ? {} : { key_id: cap.keyId }),
      cap_period: cap.period,
      cap_amount: cap.amount.toString(),
      remaining: remaining.toString(),
      needed: needed.toString(),
      ...(reset === undefined ? {} : { resets_at: reset }),
      symbol,
      decimals: `${assetDecimals}`,
      ledger_decimals: `${decimals}`,
    },
  );
};

/** An API key asked to change spend caps: it could lift its own, so only a session or the operator may. */
export const capsNeedOwner = (): ConnectError =>
  reasonError(
    Code.PermissionDenied,
    "SPEND_CAPS_OWNER_ONLY",
    "Spend caps are set from the dashboard (a signed-in session) or by the operator, not with an API key.",
  );

/** The requested chain is not one callers may bill on. */
export const chainUnknown = (value: string, allowed: readonly string[], field = CHAIN_FIELD): ConnectError =>
  reasonError(
    Code.InvalidArgument,
    "CHAIN_UNKNOWN",
    `${field} must be one of ${allowed.join(", ")}; got ${JSON.stringify(value)}.`,
    { field, value, allowed: allowed.join(",") },
  );

/** The account's default chain was disabled or removed by the operator since it was chosen. */
export const defaultChainUnavailable = (chain: string): ConnectError =>
  reasonError(
    Code.FailedPrecondition,
    "DEFAULT_CHAIN_UNAVAILABLE",
    `The account's default chain ${JSON.stringify(chain)} is no longer available: pick another ` +
      `with SetDefaultChain or name one in ${CHAIN_FIELD}.`,
    { chain },
  );

export const holdNotFound = (holdId: string): ConnectError =>
  reasonError(Code.NotFound, "HOLD_NOT_FOUND", `No hold ${JSON.stringify(holdId)}.`, { hold_id: holdId });

/** A hold resolves exactly once; a second Settle or Release changes nothing. */
export const holdAlreadyResolved = (holdId: string, status: string, chain: string): ConnectError =>
  reasonError(Code.FailedPrecondition, "HOLD_ALREADY_RESOLVED", `Hold ${holdId} is already ${status}.`, {
    hold_id: holdId,
    status,
    chain,
  });

/** The delivered usage costs more than was held; nothing is posted. */
export const settleExceedsHold = (
  holdId: string,
  chain: string,
  charge: bigint,
  held: bigint,
): ConnectError =>
  reasonError(
    Code.FailedPrecondition,
    "SETTLE_EXCEEDS_HOLD",
    `Hold ${holdId} reserved ${held} ledger units on ${chain}; the charge of ${charge} exceeds it.`,
    { hold_id: holdId, chain, charge: charge.toString(), held: held.toString() },
  );

/** A pass of a hold raised before by another amount: a raise's id is (hold, pass). */
export const raiseConflict = (holdId: string, pass: number): ConnectError =>
  reasonError(
    Code.AlreadyExists,
    "RAISE_CONFLICT",
    `Hold ${holdId} was already raised for pass ${pass} by another amount; each pass is raised once.`,
    { hold_id: holdId, pass: `${pass}` },
  );

/** A request id (or credit id) reused for a different call. */
export const idConflict = (id: string): ConnectError =>
  reasonError(
    Code.AlreadyExists,
    "HOLD_CONFLICT",
    `${id} already exists for a different call; request ids must be unique per call.`,
    { id },
  );

/** A credit that would push a balance past the ledger's int64 range. */
export const amountOutOfRange = (chain: string): ConnectError =>
  reasonError(
    Code.OutOfRange,
    "AMOUNT_OUT_OF_RANGE",
    `The balance on ${chain} would exceed the ledger's int64 range.`,
    {
      field: "amount",
      chain,
    },
  );

/** A request id that already paid for a call: each id may start one upstream call only. */
export const requestIdReused = (requestId: string): ConnectError =>
  reasonError(
    Code.AlreadyExists,
    "REQUEST_ID_REUSED",
    `Request id ${JSON.stringify(requestId)} was already used for a call; each call needs its own.`,
    { request_id: requestId },
  );

export const receiptNotFound = (requestId: string): ConnectError =>
  reasonError(
    Code.NotFound,
    "RECEIPT_NOT_FOUND",
    `No call with request id ${JSON.stringify(requestId)} was billed to this account.`,
    { request_id: requestId },
  );

export const receiptPending = (requestId: string): ConnectError =>
  reasonError(
    Code.FailedPrecondition,
    "RECEIPT_PENDING",
    `The call ${requestId} is still running: its receipt is signed once it has settled.`,
    { request_id: requestId },
  );

/**
 * A keyless caller asked for a receipt without proving who it is: a 402 whose `PAYMENT-REQUIRED`
 * (`header`, in the metadata the facade turns into that header) is a sign-in-with-x challenge.
 */
export const payerSignInRequired = (header: string): ConnectError =>
  reasonError(
    Code.FailedPrecondition,
    "X402_SIGN_IN_REQUIRED",
    "A call paid with x402 has its receipt served to its payer only: sign the challenge in PAYMENT-REQUIRED " +
      "with the wallet that paid (x402 sign-in-with-x, e.g. wrapFetchWithSIWx) and send it as SIGN-IN-WITH-X.",
    { [PAYMENT_REQUIRED_METADATA]: header },
  );

/** A sign-in-with-x proof that failed a check; `check` is the extension's own failure code. */
export const payerSignInRefused = (check: string, message: string): ConnectError =>
  reasonError(
    Code.Unauthenticated,
    "X402_SIGN_IN_REFUSED",
    `The SIGN-IN-WITH-X proof is refused: ${message}`,
    {
      check,
    },
  );

/** No public origin to bind sign-in proofs to (a deployment without TOLLGATE_PUBLIC_URL): fail closed. */
export const payerSignInUnavailable = (): ConnectError =>
  reasonError(
    Code.Unavailable,
    "X402_SIGN_IN_UNAVAILABLE",
    "Keyless receipts are unavailable: the gateway has no public origin to bind sign-in proofs to " +
      "(the operator must set TOLLGATE_PUBLIC_URL).",
    { variable: "TOLLGATE_PUBLIC_URL" },
  );

/** A signed-in wallet asked for a call it did not pay (or that does not exist: the two are not told apart). */
export const notThePayer = (requestId: string, payer: string): ConnectError =>
  reasonError(
    Code.PermissionDenied,
    "NOT_THE_PAYER",
    `The wallet ${payer} paid no call with request id ${JSON.stringify(requestId)}: ` +
      "a receipt is served only to the wallet that paid.",
    { request_id: requestId },
  );
