/**
 * The wallet-signature port: what the dashboard's wallet sign-in (src/core/auth/sign-in-message.ts)
 * asks of the chains' libraries — EIP-4361 parsing, EVM addresses and signatures, Solana
 * addresses — so that the core names no chain SDK. src/chains/wallet-signatures.ts implements it
 * with viem and @solana/web3.js, loaded at the first sign-in.
 */

/** An EIP-4361 message's fields as parsed; each undefined when absent or unreadable. */
export interface SiweFields {
  readonly domain?: string | undefined;
  readonly address?: string | undefined;
  readonly uri?: string | undefined;
  readonly version?: string | undefined;
  readonly chainId?: number | undefined;
  readonly nonce?: string | undefined;
  readonly issuedAt?: Date | undefined;
  readonly expirationTime?: Date | undefined;
  readonly notBefore?: Date | undefined;
}

export interface WalletSignatures {
  /** The EIP-4361 fields of `text`. */
  parseSiwe(text: string): Promise<SiweFields>;
  /** The EIP-55 checksummed form of an EVM address (case not checked); undefined when it is not one. */
  evmAddress(address: string): Promise<string | undefined>;
  /** True when `signature` (0x hex) is `address` signing `text` (EIP-191). */
  verifyEvm(address: string, text: string, signature: string): Promise<boolean>;
  /** The 32 key bytes of a base58 Solana address; undefined when it is not one. */
  solanaPublicKey(address: string): Promise<Uint8Array | undefined>;
}
