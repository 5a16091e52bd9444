import { address } from "@solana/kit";
import { TOKEN_PROGRAM_ID } from "@solana/spl-token";
import { Keypair } from "@solana/web3.js";
import { describe, expect, it } from "vitest";
import { DevSvm } from "../../../src/dev/chains/solana/dev-svm.js";

describe("DevSvm account reads", () => {
  it("read through litesvm's native binding exactly what its public API returns", () => {
    const chain = new DevSvm({ slotMs: 0 });
    const wallet = Keypair.generate().publicKey.toBase58();
    chain.fundFromGenesis(wallet, 1_234_567_890n);
    for (const key of [wallet, TOKEN_PROGRAM_ID.toBase58()]) {
      const expected = chain.svm.getAccount(address(key));
      if (!expected.exists) throw new Error(`${key} should exist`);
      expect(chain.account(key)).toEqual({
        lamports: Number(expected.lamports),
        data: expected.data,
        owner: expected.programAddress,
        executable: expected.executable,
        space: expected.data.length,
      });
      expect(chain.lamports(key)).toBe(Number(expected.lamports));
    }
    const missing = Keypair.generate().publicKey.toBase58();
    expect(chain.account(missing)).toBeUndefined();
    expect(chain.lamports(missing)).toBe(0);
    chain.stop();
  });
});
