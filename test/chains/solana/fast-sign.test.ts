import { Keypair, PublicKey, SystemProgram, Transaction } from "@solana/web3.js";
import { describe, expect, it } from "vitest";
import { signAndSerialize } from "../../../src/chains/solana/fast-sign.js";
import { memoInstruction } from "../../../src/chains/solana/memo.js";

describe("signAndSerialize", () => {
  const payer = Keypair.generate();
  const owner = Keypair.generate();
  const build = () => {
    const tx = new Transaction({
      feePayer: payer.publicKey,
      recentBlockhash: Keypair.generate().publicKey.toBase58(),
    });
    tx.add(
      SystemProgram.transfer({ fromPubkey: owner.publicKey, toPubkey: PublicKey.default, lamports: 5 }),
      memoInstruction("x"),
    );
    return tx;
  };

  it("produces exactly the bytes and signature of web3.js Transaction.sign + serialize", () => {
    const tx = build();
    const fast = signAndSerialize(tx, [owner, payer]);
    tx.sign(payer, owner);
    expect(fast.wire.equals(tx.serialize())).toBe(true);
    expect(fast.signature.equals(tx.signature!)).toBe(true);
    expect(Transaction.from(fast.wire).verifySignatures()).toBe(true);
  });

  it("refuses to serialise without every required signer", () => {
    expect(() => signAndSerialize(build(), [payer])).toThrow(/missing signature of/);
  });
});
