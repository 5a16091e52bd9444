import { PublicKey, TransactionInstruction } from "@solana/web3.js";

/** The SPL Memo program (v2), deployed on every cluster and in litesvm's default programs. */
export const MEMO_PROGRAM_ID = new PublicKey("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr");

/**
 * A memo instruction carrying `text` (no signers required). A memo makes otherwise identical
 * transactions distinct, so two equal transfers under one blockhash get two signatures.
 */
export function memoInstruction(text: string): TransactionInstruction {
  return new TransactionInstruction({
    programId: MEMO_PROGRAM_ID,
    keys: [],
    data: Buffer.from(text, "utf8"),
  });
}
