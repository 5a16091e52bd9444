/**
 * The names x402 payments are known by outside the payment code (src/core/billing/x402.ts),
 * kept apart from it so that reading them loads none of the x402 packages.
 */

/**
 * The payer's account: one per wallet address, apart from any account with keys. An EVM address
 * is taken in lower case (its case is only a checksum); a Solana address as it is (base58 is
 * case-sensitive).
 */
export function x402AccountId(payer: string): string {
  return `acct_x402_${payer.startsWith("0x") ? payer.toLowerCase() : payer}`;
}

/** A payer's address as payments store it: an EVM address in lower case, a Solana one as it is. */
export function x402Payer(address: string): string {
  return /^0x[0-9a-fA-F]{40}$/.test(address) ? address.toLowerCase() : address;
}

/** Whether an account is a keyless x402 payer's. */
export function isX402Account(accountId: string): boolean {
  return accountId.startsWith("acct_x402_");
}

/** The ErrorInfo metadata key carrying a `PAYMENT-REQUIRED` header value (the facade sends it). */
export const PAYMENT_REQUIRED_METADATA = "payment_required";

/** The ErrorInfo metadata key carrying a `PAYMENT-RESPONSE` header value (a refused collection). */
export const PAYMENT_RESPONSE_METADATA = "payment_response";
