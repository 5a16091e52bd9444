import type {
  HoldRow,
  NewHold,
  PlaceHoldResult,
  ResolveResult,
  UsageCounts,
} from "../../core/ports/ledger.js";
import { writtenResolution, ZERO_USAGE } from "./ledger.js";
import { LEDGER_WRITES, type LedgerWriteOp } from "./ledger-writes.js";

/**
 * What crosses between the serving thread and the ledger writer thread (ledger-writer.ts,
 * ledger-writer-thread.ts), kept small: each message is one flat array, a write's name crosses as
 * its index in LEDGER_WRITES, and the answers of the writes every billed call makes carry only
 * what the serving thread does not already have (docs/performance.md §22):
 * - a placed hold: its `seq` (the rest is the hold that was sent);
 * - a resolved hold (settle, void): the hold's columns as an array, without their names (the
 *   resolution is the one the write's own arguments describe: `writtenResolution`).
 * Every other answer crosses as the write returned it.
 */

/** A batch of writes: `[id, op, args, id, op, args, ...]`. */
export type WireRequests = unknown[];
/** A batch of answers: `[id, ok, value, ...]`; `ok` 1: a (compact) answer, 0: an error's description. */
export type WireReplies = unknown[];

/** The op number of the writer's close (not a write). */
export const CLOSE_OP = -1;

/** A write's op number: its index in LEDGER_WRITES. */
export const OP_NUMBER: ReadonlyMap<LedgerWriteOp, number> = new Map(LEDGER_WRITES.map((op, i) => [op, i]));

const PLACE_HOLD = OP_NUMBER.get("placeHold")!;
const SETTLE = OP_NUMBER.get("settle")!;
const VOID = OP_NUMBER.get("void")!;

/** A hold's columns, in the order a resolved hold's answer carries them. */
const HOLD_KEYS = [
  "seq",
  "id",
  "accountId",
  "requestId",
  "keyId",
  "chain",
  "amount",
  "raised",
  "callKind",
  "model",
  "inputTokens",
  "maxTokens",
  "imageSize",
  "imageCount",
  "createdAt",
] as const satisfies readonly (keyof HoldRow)[];

/** On the writer thread: the answer of write `op` as it crosses back. */
export function shrinkAnswer(op: number, value: unknown): unknown {
  if (op === PLACE_HOLD) {
    const placed = value as PlaceHoldResult;
    return placed.kind === "placed" ? placed.state.hold.seq : value;
  }
  if (op === SETTLE || op === VOID) {
    const resolved = value as ResolveResult;
    if (resolved.kind !== "resolved") return value;
    const hold = resolved.state.hold;
    return HOLD_KEYS.map((key) => hold[key]);
  }
  return value;
}

/** On the serving thread: the answer of write `op`, sent with `args`, from what crossed back. */
export function expandAnswer(op: number, args: readonly unknown[], wire: unknown): unknown {
  if (op === PLACE_HOLD && typeof wire === "number") {
    const result: PlaceHoldResult = {
      kind: "placed",
      state: { hold: { ...(args[0] as NewHold), raised: 0n, seq: wire }, resolution: undefined },
    };
    return result;
  }
  if ((op === SETTLE || op === VOID) && Array.isArray(wire)) {
    const hold = Object.fromEntries(HOLD_KEYS.map((key, i) => [key, wire[i]])) as unknown as HoldRow;
    const resolution =
      op === SETTLE
        ? writtenResolution(
            args[0] as string,
            "settled",
            args[1] as bigint,
            args[2] as UsageCounts,
            args[3] as number,
            (args[4] as string | undefined) ?? "",
          )
        : writtenResolution(
            args[0] as string,
            args[1] as "released" | "expired",
            0n,
            ZERO_USAGE,
            args[2] as number,
            "",
          );
    const result: ResolveResult = { kind: "resolved", state: { hold, resolution } };
    return result;
  }
  return wire;
}
