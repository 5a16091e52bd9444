import type { SessionStore } from "../../core/ports/accounts.js";
import type { LedgerStore, OnchainStore } from "../../core/ports/ledger.js";
import type { X402Store } from "../../core/ports/x402.js";

/**
 * The ledger's writes (the ports' write methods), as the SQLite ledger hands them to whichever
 * thread holds its write connection, and the sign-in nonces' (as cheap to group, and as costly
 * on the request loop). Listed once: the writer thread's proxy (ledger-writer.ts), the group
 * commit (groupCommittedWrites) and SqliteLedger's forwarding are all built from this list, so
 * adding a write is one entry here (and its statement in groupCommittedWrites, which tsc asks for).
 */
export const LEDGER_WRITES = [
  "placeHold",
  "raiseHold",
  "settle",
  "void",
  "expireHolds",
  "credit",
  "setDefaultChain",
  "withdraw",
  "authoriseX402",
  "recordX402Collection",
  "markX402Collecting",
  "closeX402",
  "clearFailedX402",
  "insertNonce",
  "purgeNonces",
] as const satisfies readonly (keyof WritablePorts)[];

/** Every port whose writes go through the ledger's write connection. */
type WritablePorts = LedgerStore & OnchainStore & X402Store & NonceWrites;

/** Sign-in nonces' writes: anyone may ask for a nonce, so its write never waits on this thread. */
export type NonceWrites = Pick<SessionStore, "insertNonce" | "purgeNonces">;

/** The name of one write, as it crosses to a worker thread. */
export type LedgerWriteOp = (typeof LEDGER_WRITES)[number];

/** The writes, each answering once its transaction has committed. */
export type LedgerWriteMethods = Pick<WritablePorts, LedgerWriteOp>;

/** The writes, and the close that finishes those already asked for, then lets the connection go. */
export interface LedgerWrites extends LedgerWriteMethods {
  close(): Promise<void>;
}

/** Each write as a synchronous statement on the connection that commits it (see GroupCommit). */
export type SyncLedgerWrites = {
  readonly [K in LedgerWriteOp]: (
    ...args: Parameters<WritablePorts[K]>
  ) => Awaited<ReturnType<WritablePorts[K]>>;
};

/**
 * An object with every listed write, each `write` bound to its name: a call enters `write` (in
 * the file that gives it) directly, with the write's name and its arguments.
 */
export function eachWrite(
  write: (op: LedgerWriteOp, ...args: unknown[]) => Promise<unknown>,
): LedgerWriteMethods {
  return Object.fromEntries(
    LEDGER_WRITES.map((op) => [op, write.bind(undefined, op)]),
  ) as unknown as LedgerWriteMethods;
}
