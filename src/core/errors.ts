import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { type ErrorInfo, ErrorInfoSchema } from "../gen/google/rpc/error_details_pb.js";

/** The `ErrorInfo.domain` of every reason the core attaches. */
export const ERROR_DOMAIN = "tollgate.dev";

/** An expected failure: a code, a machine-readable reason, and optional metadata. */
export function reasonError(
  code: Code,
  reason: string,
  message: string,
  metadata: Record<string, string> = {},
): ConnectError {
  return new ConnectError(message, code, undefined, [
    { desc: ErrorInfoSchema, value: create(ErrorInfoSchema, { reason, domain: ERROR_DOMAIN, metadata }) },
  ]);
}

/** The ErrorInfo attached by {@link reasonError}, if any. */
export function errorInfo(error: ConnectError): ErrorInfo | undefined {
  return error.findDetails(ErrorInfoSchema)[0];
}

/** Bad input: names the offending field. */
export function invalidField(field: string, message: string): ConnectError {
  return reasonError(Code.InvalidArgument, "INVALID_FIELD", message, { field });
}

export const keyMissing = () =>
  reasonError(
    Code.Unauthenticated,
    "KEY_MISSING",
    "No API key: send it as x-api-key or Authorization: Bearer.",
  );
/** A call asked to pay with x402 on a gateway that takes no x402 payments (TOLLGATE_X402=off). */
export const x402NotTaken = () =>
  reasonError(
    Code.Unimplemented,
    "X402_NOT_TAKEN",
    "This gateway takes no x402 payments: call with an API key (x-api-key or Authorization: Bearer).",
  );
export const keyMalformed = () =>
  reasonError(
    Code.Unauthenticated,
    "KEY_MALFORMED",
    "The API key is malformed (check for a typo or truncation).",
  );
export const keyUnknown = () => reasonError(Code.Unauthenticated, "KEY_UNKNOWN", "The API key is not valid.");
export const keyRevoked = () =>
  reasonError(Code.PermissionDenied, "KEY_REVOKED", "The API key has been revoked.");
export const accountSuspended = () =>
  reasonError(Code.PermissionDenied, "ACCOUNT_SUSPENDED", "The account is suspended.");
export const operatorOnly = () =>
  reasonError(Code.PermissionDenied, "OPERATOR_ONLY", "This call needs the operator token.");
export const otherAccount = () =>
  reasonError(Code.PermissionDenied, "OTHER_ACCOUNT", "A key may only act on its own account.");
export const accountNotFound = (id: string) =>
  reasonError(Code.NotFound, "ACCOUNT_NOT_FOUND", `No account ${JSON.stringify(id)}.`, { account_id: id });
export const keyNotFound = (id: string) =>
  reasonError(Code.NotFound, "KEY_NOT_FOUND", `No key ${JSON.stringify(id)}.`, { key_id: id });
/**
 * The account has as many live keys as it may (TOLLGATE_MAX_LIVE_KEYS). FailedPrecondition, not
 * ResourceExhausted: waiting never helps, revoking a key does, so clients must not retry it.
 */
export const keyLimit = (limit: number) =>
  reasonError(
    Code.FailedPrecondition,
    "KEY_LIMIT",
    `The account already has ${limit} live API keys, the most it may have: revoke one it no longer uses first.`,
    { limit: `${limit}` },
  );

/** Seconds a caller is told to wait before trying again while storage is full. */
const STORAGE_FULL_RETRY_AFTER_S = "30";

/**
 * A write refused because the disk holding the data is full: Unavailable (503), retryable once
 * space is freed. Says what happened without saying where; `lead` may say what it meant for
 * the call first.
 */
export function storageFull(lead?: string): ConnectError {
  const message = "The service is temporarily unavailable: its storage is full. Try again later.";
  return reasonError(Code.Unavailable, "STORAGE_FULL", lead === undefined ? message : `${lead} ${message}`, {
    retry_after: STORAGE_FULL_RETRY_AFTER_S,
  });
}

/**
 * The codes the stores' drivers give a write the disk had no room for: SQLite's SQLITE_FULL
 * (SQLite reports a write() failing with ENOSPC as such), the OS's ENOSPC and EDQUOT (file
 * writes: url images), PostgreSQL's 53100 disk_full.
 */
const STORAGE_FULL_CODES: ReadonlySet<unknown> = new Set(["SQLITE_FULL", "ENOSPC", "EDQUOT", "53100"]);

/** Whether `error` is a write the full disk refused (raw, or already {@link storageFull}). */
export function isStorageFull(error: unknown): boolean {
  if (error instanceof ConnectError) return errorInfo(error)?.reason === "STORAGE_FULL";
  return STORAGE_FULL_CODES.has((error as { code?: unknown } | null)?.code);
}

/** Seconds a caller is told to wait before trying again while the store cannot be reached. */
const STORE_UNAVAILABLE_RETRY_AFTER_S = "5";

/**
 * A write or read the store could not take because it cannot be reached (PostgreSQL restarting,
 * failing over, the connection lost): Unavailable (503), retryable. Nothing was charged unless
 * `lead` says otherwise; like {@link storageFull}, it says what happened without saying where.
 */
export function storeUnavailable(lead?: string): ConnectError {
  const message =
    "The service is temporarily unavailable: its database cannot be reached. Try again shortly.";
  return reasonError(
    Code.Unavailable,
    "STORE_UNAVAILABLE",
    lead === undefined ? message : `${lead} ${message}`,
    { retry_after: STORE_UNAVAILABLE_RETRY_AFTER_S },
  );
}

/** Whether `error` is {@link storeUnavailable}. */
export function isStoreUnavailable(error: unknown): boolean {
  return error instanceof ConnectError && errorInfo(error)?.reason === "STORE_UNAVAILABLE";
}

/**
 * Any thrown value as a ConnectError: expected failures pass through, a write the full disk
 * refused becomes {@link storageFull}, anything else becomes a masked Internal that keeps the
 * original as `cause` for the logs.
 */
export function toConnectError(error: unknown): ConnectError {
  if (error instanceof ConnectError) return error;
  if (isStorageFull(error)) return storageFull();
  return new ConnectError("internal error", Code.Internal, undefined, undefined, error);
}
