import { Code, type ConnectError } from "@connectrpc/connect";
import { reasonError } from "../errors.js";

/** This gateway has no chain adapter for `chain` (onchain features are off, or it has none). */
export const chainsUnavailable = (chain: string): ConnectError =>
  reasonError(
    Code.FailedPrecondition,
    "CHAINS_UNAVAILABLE",
    chain === ""
      ? "Onchain features are not running on this gateway (see docs/chains.md)."
      : `Chain ${chain} has no onchain adapter on this gateway (see docs/chains.md).`,
    { chain },
  );

/** `address` is not a well-formed address of the chain's family. */
export const invalidAddress = (field: string, chain: string, address: string): ConnectError =>
  reasonError(
    Code.InvalidArgument,
    "INVALID_ADDRESS",
    `${field} ${JSON.stringify(address)} is not a valid address on ${chain}` +
      " (EVM: 0x + 40 hex digits, with a correct checksum if mixed-case; not the zero address).",
    { field, chain },
  );
