import type { SiweFields, WalletSignatures } from "../core/ports/wallets.js";

/**
 * The core's wallet-signature port over viem (EIP-4361, EVM addresses and signatures) and
 * @solana/web3.js (Solana addresses). Both are loaded at the first sign-in, not with the core:
 * the CLI's commands, which build the core too, start without them.
 */
export function walletSignatures(): WalletSignatures {
  return {
    async parseSiwe(text: string): Promise<SiweFields> {
      const { parseSiweMessage } = await import("viem/siwe");
      return parseSiweMessage(text);
    },
    async evmAddress(address: string): Promise<string | undefined> {
      const { getAddress, isAddress } = await import("viem");
      return isAddress(address, { strict: false }) ? getAddress(address) : undefined;
    },
    async verifyEvm(address: string, text: string, signature: string): Promise<boolean> {
      const { verifyMessage } = await import("viem");
      return await verifyMessage({
        address: address as `0x${string}`,
        message: text,
        signature: signature as `0x${string}`,
      });
    },
    async solanaPublicKey(address: string): Promise<Uint8Array | undefined> {
      const { PublicKey } = await import("@solana/web3.js");
      try {
        return new PublicKey(address).toBytes();
      } catch {
        return undefined;
      }
    },
  };
}
