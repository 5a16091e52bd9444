import {
  type Commitment,
  type Connection,
  type Keypair,
  type PublicKey,
  Transaction,
  type TransactionInstruction,
} from "@solana/web3.js";

/** Builds, signs (first signer pays) and sends a transaction through the real Connection; returns its signature. */
export async function sendTx(
  connection: Connection,
  instructions: TransactionInstruction[],
  signers: Keypair[],
  options: { skipPreflight?: boolean; blockhash?: string } = {},
): Promise<{ signature: string; raw: Buffer }> {
  const payer = signers[0]!;
  const blockhash = options.blockhash ?? (await connection.getLatestBlockhash("confirmed")).blockhash;
  const tx = new Transaction({ feePayer: payer.publicKey, recentBlockhash: blockhash });
  tx.add(...instructions);
  tx.sign(...signers);
  const raw = tx.serialize();
  const signature = await connection.sendRawTransaction(raw, {
    skipPreflight: options.skipPreflight ?? false,
    preflightCommitment: "confirmed",
  });
  return { signature, raw };
}

/** The confirmation status of a signature (null when unknown). */
export async function statusOf(connection: Connection, signature: string): Promise<Commitment | null> {
  const { value } = await connection.getSignatureStatuses([signature], { searchTransactionHistory: true });
  return value[0]?.confirmationStatus ?? null;
}

/** Lamports of an account through the RPC. */
export async function lamportsOf(connection: Connection, key: PublicKey): Promise<number> {
  return connection.getBalance(key, "processed");
}
