/**
 * The SPL Token instructions that move tokens into an account, decoded from raw instruction
 * data (no I/O). A pure table: the instruction's tag (first data byte), the positions of its
 * accounts, and the data length; the amount is the little-endian u64 after the tag.
 */

/** What an instruction does to the destination's balance. */
export type TokenCreditKind = "transfer" | "transferChecked" | "mintTo" | "mintToChecked";

/** A decoded token credit: amount and the positions (in the instruction's account list) of its accounts. */
export interface TokenCredit {
  readonly kind: TokenCreditKind;
  readonly amount: bigint;
  /** Position of the source token account (transfers only). */
  readonly source: number | undefined;
  /** Position of the mint, when the instruction names it (transferChecked, mintTo*). */
  readonly mint: number | undefined;
  /** Position of the destination token account. */
  readonly destination: number;
}

interface Layout {
  readonly kind: TokenCreditKind;
  readonly source?: number;
  readonly mint?: number;
  readonly destination: number;
  /** Tag + u64 amount (+ u8 decimals for the checked forms). */
  readonly dataLength: number;
}

/** SPL Token (and Token-2022, which shares these tags) instruction layouts, by tag. */
const CREDIT_LAYOUTS: ReadonlyMap<number, Layout> = new Map([
  [3, { kind: "transfer", source: 0, destination: 1, dataLength: 9 }],
  [7, { kind: "mintTo", mint: 0, destination: 1, dataLength: 9 }],
  [12, { kind: "transferChecked", source: 0, mint: 1, destination: 2, dataLength: 10 }],
  [14, { kind: "mintToChecked", mint: 0, destination: 1, dataLength: 10 }],
]);

/** Decodes a token instruction that credits a token account; undefined for any other instruction. */
export function decodeTokenCredit(data: Uint8Array, accountCount: number): TokenCredit | undefined {
  const layout = CREDIT_LAYOUTS.get(data[0] ?? -1);
  if (layout === undefined || data.length !== layout.dataLength) return undefined;
  const highest = Math.max(layout.source ?? 0, layout.mint ?? 0, layout.destination);
  if (accountCount <= highest) return undefined;
  const amount = Buffer.from(data.buffer, data.byteOffset, data.byteLength).readBigUInt64LE(1);
  return {
    kind: layout.kind,
    amount,
    source: layout.source,
    mint: layout.mint,
    destination: layout.destination,
  };
}
