/**
 * The Solana chain port against the dev chain, through the real @solana/web3.js Connection:
 * addresses, health, the deposit scan (finality, identity, other mints, failed transactions),
 * and transfers (fee paid by the treasury, exact amounts, dropped, re-broadcast, restart).
 */
import { createHmac, randomBytes } from "node:crypto";
import {
  ACCOUNT_SIZE,
  createAssociatedTokenAccountIdempotentInstruction,
  createInitializeAccount3Instruction,
  createInitializeMint2Instruction,
  createMintToCheckedInstruction,
  createTransferCheckedInstruction,
  createTransferInstruction,
  getAssociatedTokenAddressSync,
  MINT_SIZE,
  TOKEN_PROGRAM_ID,
} from "@solana/spl-token";
import { Keypair, LAMPORTS_PER_SOL, PublicKey, SystemProgram, Transaction } from "@solana/web3.js";
import { afterEach, describe, expect, it } from "vitest";
import { createSolanaAdapter } from "../../../src/chains/solana/solana-adapter.js";
import type { ObservedDeposit } from "../../../src/core/ports/chains.js";
import { type SolanaFixture, solanaChainConfig, startSolanaFixture } from "./fixtures.js";
import { lamportsOf, sendTx } from "./helpers.js";

const fixtures: SolanaFixture[] = [];
afterEach(async () => {
  await Promise.all(fixtures.splice(0).map((f) => f.close()));
});
async function fixture(options: Parameters<typeof startSolanaFixture>[0] = {}): Promise<SolanaFixture> {
  const f = await startSolanaFixture(options);
  fixtures.push(f);
  return f;
}

/** A funded wallet holding `amount` of the dev mint. */
async function holder(f: SolanaFixture, amount: bigint): Promise<Keypair> {
  const wallet = Keypair.generate();
  await f.dev.airdrop(wallet.publicKey.toBase58(), BigInt(LAMPORTS_PER_SOL));
  await f.dev.mintTo(wallet.publicKey.toBase58(), amount);
  return wallet;
}

async function scanAll(f: SolanaFixture, recipients: string[]): Promise<ObservedDeposit[]> {
  return f.adapter.scanDeposits(0n, await f.adapter.finalizedPosition(), new Set(recipients));
}

describe("Solana adapter: addresses and health", () => {
  it("derives deposit and treasury keys from the master secret by the shared HMAC rule", async () => {
    const f = await fixture();
    const seed = createHmac("sha256", f.masterSecret).update("tollgate/solana/deposit/acct_1").digest();
    expect(f.adapter.depositAddress("acct_1")).toBe(Keypair.fromSeed(seed).publicKey.toBase58());
    const treasurySeed = createHmac("sha256", f.masterSecret).update("tollgate/solana/treasury").digest();
    expect(f.adapter.treasuryAddress()).toBe(Keypair.fromSeed(treasurySeed).publicKey.toBase58());
    expect(f.adapter.depositAddress("acct_1")).not.toBe(f.adapter.depositAddress("acct_2"));
    // Re-derivable: another adapter with the same secret agrees; another secret does not.
    const again = createSolanaAdapter(f.chain, { masterSecret: Uint8Array.from(f.masterSecret) });
    expect(again.depositAddress("acct_1")).toBe(f.adapter.depositAddress("acct_1"));
    const other = createSolanaAdapter(f.chain, { masterSecret: randomBytes(32) });
    expect(other.depositAddress("acct_1")).not.toBe(f.adapter.depositAddress("acct_1"));
  });

  it("accepts on-curve base58 addresses only", async () => {
    const f = await fixture();
    const wallet = Keypair.generate().publicKey;
    expect(f.adapter.isValidAddress(wallet.toBase58())).toBe(true);
    expect(f.adapter.isValidAddress(f.adapter.depositAddress("acct_1"))).toBe(true);
    const tokenAccount = getAssociatedTokenAddressSync(f.mint, wallet).toBase58();
    for (const bad of [
      "",
      "not an address",
      "0x5FbDB2315678afecb367f032d93F642f64180aa3",
      `${wallet.toBase58()}0`,
      wallet.toBase58().slice(0, 20),
      tokenAccount, // off-curve: someone's token account pasted instead of the wallet
    ]) {
      expect(f.adapter.isValidAddress(bad), bad).toBe(false);
    }
  });

  it("reports the RPC's head when reachable, and the error when not; an outage fails calls, never transfers", async () => {
    const f = await fixture();
    const health = await f.adapter.health();
    expect(health).toEqual({ reachable: true, head: BigInt(f.dev.slot("processed")), error: undefined });
    const down = createSolanaAdapter(
      { ...f.chain, rpcUrl: "http://127.0.0.1:9" },
      { masterSecret: f.masterSecret },
    );
    const unreachable = await down.health();
    expect(unreachable.reachable).toBe(false);
    expect(unreachable.head).toBeUndefined();
    expect(unreachable.error).toMatch(/fetch failed|ECONNREFUSED/);
    // An outage is an error the settlement worker backs off on, never a verdict about a transfer.
    await f.dev.mintTo(f.adapter.depositAddress("acct_1"), 10n);
    const prepared = await f.adapter.prepareTransfer({
      id: "o_outage",
      accountId: "acct_1",
      to: f.adapter.treasuryAddress(),
      amount: 1n,
    });
    await expect(down.broadcast(prepared)).rejects.toThrow(/broadcast of .* failed/);
    await expect(down.transferState(prepared)).rejects.toThrow();
    await expect(
      down.prepareTransfer({ id: "o2", accountId: "acct_1", to: f.adapter.treasuryAddress(), amount: 1n }),
    ).rejects.toThrow();
    expect(await f.adapter.transferState(prepared)).toBe("pending");
  });

  it("refuses a non-Solana chain, a short master secret and a websocket RPC URL", async () => {
    const f = await fixture();
    expect(() =>
      createSolanaAdapter({ ...f.chain, family: "evm" }, { masterSecret: f.masterSecret }),
    ).toThrow(/not a Solana chain/);
    expect(() => createSolanaAdapter(f.chain, { masterSecret: new Uint8Array(8) })).toThrow(
      /at least 16 bytes/,
    );
    expect(() =>
      createSolanaAdapter({ ...f.chain, rpcUrl: "ws://127.0.0.1:1" }, { masterSecret: f.masterSecret }),
    ).toThrow(/http/);
  });
});

describe("Solana adapter: deposit scan", () => {
  it("sees a deposit only at finality, once, with the owner as recipient", async () => {
    const f = await fixture();
    const to = f.adapter.depositAddress("acct_1");
    const signature = await f.dev.mintTo(to, 2_500_000n);
    const slot = BigInt(f.dev.slot("processed"));
    expect(await f.adapter.finalizedPosition()).toBeLessThan(slot);
    expect(await scanAll(f, [to])).toEqual([]);
    f.dev.advanceSlots(3);
    expect(await f.adapter.finalizedPosition()).toBeLessThan(slot);
    expect(await scanAll(f, [to])).toEqual([]);
    f.dev.advanceSlots(1);
    expect(await f.adapter.finalizedPosition()).toBe(slot);
    // Index 5: the ATA creation (0) and its four inner instructions (1–4) come before the mint.
    const expected: ObservedDeposit = {
      txHash: signature,
      index: 5,
      position: slot,
      from: f.dev.mint,
      to,
      amount: 2_500_000n,
    };
    expect(await scanAll(f, [to])).toEqual([expected]);
    // Overlapping and repeated scans report the same (signature, index), never a second deposit.
    f.dev.advanceSlots(5);
    expect(await f.adapter.scanDeposits(slot, slot, new Set([to]))).toEqual([expected]);
    expect(await scanAll(f, [to])).toEqual([expected]);
    expect(
      await f.adapter.scanDeposits(slot + 1n, await f.adapter.finalizedPosition(), new Set([to])),
    ).toEqual([]);
  });

  it("sees transfer and transferChecked from a wallet, reporting the sender's owner, in chain order", async () => {
    const f = await fixture();
    const to = f.adapter.depositAddress("acct_1");
    const other = f.adapter.depositAddress("acct_2");
    const wallet = await holder(f, 1_000n);
    const source = getAssociatedTokenAddressSync(f.mint, wallet.publicKey);
    const createTo = (owner: string) =>
      createAssociatedTokenAccountIdempotentInstruction(
        wallet.publicKey,
        getAssociatedTokenAddressSync(f.mint, new PublicKey(owner)),
        new PublicKey(owner),
        f.mint,
      );
    const ataOf = (owner: string) => getAssociatedTokenAddressSync(f.mint, new PublicKey(owner));
    const checked = await sendTx(
      f.connection,
      [createTo(to), createTransferCheckedInstruction(source, f.mint, ataOf(to), wallet.publicKey, 100n, 6)],
      [wallet],
    );
    f.dev.advanceSlots(1);
    const plain = await sendTx(
      f.connection,
      [
        createTo(other),
        createTransferInstruction(source, ataOf(other), wallet.publicKey, 7n),
        createTransferInstruction(source, ataOf(to), wallet.publicKey, 3n),
      ],
      [wallet],
    );
    f.finalize();
    const deposits = await scanAll(f, [to, other]);
    const from = wallet.publicKey.toBase58();
    expect(
      deposits.map(({ txHash, index, from, to, amount }) => ({ txHash, index, from, to, amount })),
    ).toEqual([
      { txHash: checked.signature, index: 5, from, to, amount: 100n },
      { txHash: plain.signature, index: 5, from, to: other, amount: 7n },
      { txHash: plain.signature, index: 6, from, to, amount: 3n },
    ]);
    expect(deposits[0]!.position).toBeLessThan(deposits[1]!.position);
    // Only the recipients asked about.
    expect((await scanAll(f, [other])).map((d) => d.amount)).toEqual([7n]);
  });

  it("ignores another mint, a token account that is not the owner's associated one, and failed transactions", async () => {
    const f = await fixture();
    const to = f.adapter.depositAddress("acct_1");
    const toKey = new PublicKey(to);
    const wallet = await holder(f, 1_000n);
    // Another mint, minted straight into the deposit owner's associated account for it.
    const otherMint = Keypair.generate();
    const otherAta = getAssociatedTokenAddressSync(otherMint.publicKey, toKey);
    await sendTx(
      f.connection,
      [
        SystemProgram.createAccount({
          fromPubkey: wallet.publicKey,
          newAccountPubkey: otherMint.publicKey,
          lamports: await f.connection.getMinimumBalanceForRentExemption(MINT_SIZE),
          space: MINT_SIZE,
          programId: TOKEN_PROGRAM_ID,
        }),
        createInitializeMint2Instruction(otherMint.publicKey, 6, wallet.publicKey, null),
        createAssociatedTokenAccountIdempotentInstruction(
          wallet.publicKey,
          otherAta,
          toKey,
          otherMint.publicKey,
        ),
        createMintToCheckedInstruction(otherMint.publicKey, otherAta, wallet.publicKey, 5_000n, 6),
      ],
      [wallet, otherMint],
    );
    // The right mint, but into a token account the owner holds that is not its associated one.
    const stray = Keypair.generate();
    const source = getAssociatedTokenAddressSync(f.mint, wallet.publicKey);
    await sendTx(
      f.connection,
      [
        SystemProgram.createAccount({
          fromPubkey: wallet.publicKey,
          newAccountPubkey: stray.publicKey,
          lamports: await f.connection.getMinimumBalanceForRentExemption(ACCOUNT_SIZE),
          space: ACCOUNT_SIZE,
          programId: TOKEN_PROGRAM_ID,
        }),
        createInitializeAccount3Instruction(stray.publicKey, f.mint, toKey),
        createTransferCheckedInstruction(source, f.mint, stray.publicKey, wallet.publicKey, 10n, 6),
      ],
      [wallet, stray],
    );
    // A transaction whose first transfer would credit the deposit, but whose second fails.
    const ata = getAssociatedTokenAddressSync(f.mint, toKey);
    const failed = await sendTx(
      f.connection,
      [
        createAssociatedTokenAccountIdempotentInstruction(wallet.publicKey, ata, toKey, f.mint),
        createTransferCheckedInstruction(source, f.mint, ata, wallet.publicKey, 20n, 6),
        createTransferCheckedInstruction(source, f.mint, ata, wallet.publicKey, 10_000n, 6),
      ],
      [wallet],
      { skipPreflight: true },
    );
    const { value } = await f.connection.getSignatureStatuses([failed.signature]);
    expect(value[0]?.err).toEqual({ InstructionError: [2, { Custom: 1 }] });
    f.finalize();
    expect(await scanAll(f, [to])).toEqual([]);
    expect(await f.adapter.balanceOf(to)).toBe(0n);
    // The control: the same transfer, in a transaction that succeeds, is seen (the failed one's
    // account creation was rolled back with it, so the account is created again).
    await sendTx(
      f.connection,
      [
        createAssociatedTokenAccountIdempotentInstruction(wallet.publicKey, ata, toKey, f.mint),
        createTransferCheckedInstruction(source, f.mint, ata, wallet.publicKey, 20n, 6),
      ],
      [wallet],
    );
    f.finalize();
    expect((await scanAll(f, [to])).map((d) => d.amount)).toEqual([20n]);
  });

  it("returns nothing for an empty range or no recipients, and refuses a range past finality", async () => {
    const f = await fixture();
    const to = f.adapter.depositAddress("acct_1");
    await f.dev.mintTo(to, 1n);
    f.finalize();
    const head = await f.adapter.finalizedPosition();
    expect(await f.adapter.scanDeposits(head, head - 1n, new Set([to]))).toEqual([]);
    expect(await f.adapter.scanDeposits(0n, head, new Set())).toEqual([]);
    // Scanning past finality would let a cursor skip slots that are not final yet.
    await expect(f.adapter.scanDeposits(0n, head + 1n, new Set([to]))).rejects.toThrow(
      /past the finalized slot/,
    );
  });
});

describe("Solana adapter: transfers", () => {
  it("moves exactly the amount to the treasury, with the treasury paying every fee", async () => {
    const f = await fixture();
    const owner = f.adapter.depositAddress("acct_1");
    await f.dev.mintTo(owner, 5_000_000n);
    const treasuryLamports = await lamportsOf(f.connection, new PublicKey(f.adapter.treasuryAddress()));
    const prepared = await f.adapter.prepareTransfer({
      id: "set_1",
      accountId: "acct_1",
      to: f.adapter.treasuryAddress(),
      amount: 1_234_567n,
    });
    expect(prepared.orderId).toBe("set_1");
    expect(await f.adapter.transferState(prepared)).toBe("pending");
    await f.adapter.broadcast(prepared);
    expect(await f.adapter.transferState(prepared)).toBe("pending");
    f.finalize();
    expect(await f.adapter.transferState(prepared)).toBe("confirmed");
    expect(await f.adapter.balanceOf(f.adapter.treasuryAddress())).toBe(1_234_567n);
    expect(await f.adapter.balanceOf(owner)).toBe(5_000_000n - 1_234_567n);
    expect(await lamportsOf(f.connection, new PublicKey(owner))).toBe(0);
    const rent = await f.connection.getMinimumBalanceForRentExemption(ACCOUNT_SIZE);
    expect(await lamportsOf(f.connection, new PublicKey(f.adapter.treasuryAddress()))).toBe(
      treasuryLamports - rent - 2 * 5000,
    );
    // The transaction is the one the prepared transfer names.
    const tx = await f.connection.getTransaction(prepared.txHash, { commitment: "finalized" });
    expect(tx?.meta?.err).toBeNull();
  });

  it("settles with `confirmed` finality one slot after landing when the registry asks for it", async () => {
    const f = await fixture({ commitment: "confirmed" });
    const owner = f.adapter.depositAddress("acct_1");
    await f.dev.mintTo(owner, 10n);
    f.dev.advanceSlots(1);
    const prepared = await f.adapter.prepareTransfer({
      id: "o1",
      accountId: "acct_1",
      to: f.adapter.treasuryAddress(),
      amount: 10n,
    });
    await f.adapter.broadcast(prepared);
    expect(await f.adapter.transferState(prepared)).toBe("pending");
    f.dev.advanceSlots(1);
    expect(await f.adapter.transferState(prepared)).toBe("confirmed");
  });

  it("does not pay twice when the same prepared transfer is broadcast again, or after a restart", async () => {
    const f = await fixture();
    const owner = f.adapter.depositAddress("acct_1");
    await f.dev.mintTo(owner, 1_000n);
    const order = { id: "set_dup", accountId: "acct_1", to: f.adapter.treasuryAddress(), amount: 400n };
    const prepared = await f.adapter.prepareTransfer(order);
    await f.adapter.broadcast(prepared);
    await f.adapter.broadcast(prepared);
    f.dev.advanceSlots(1);
    await f.adapter.broadcast(prepared);
    // A restarted process: a new adapter with the same secret asks where the stored transfer stands.
    const restarted = createSolanaAdapter(f.chain, { masterSecret: Uint8Array.from(f.masterSecret) });
    expect(await restarted.transferState(prepared)).toBe("pending");
    await restarted.broadcast(prepared);
    f.finalize();
    expect(await restarted.transferState(prepared)).toBe("confirmed");
    expect(await f.adapter.balanceOf(f.adapter.treasuryAddress())).toBe(400n);
    expect(await f.adapter.balanceOf(owner)).toBe(600n);
  });

  it("reports a prepared transfer that was never sent as dropped once its blockhash expired, then pays a fresh one once", async () => {
    const f = await fixture({ blockhashValidSlots: 10 });
    const owner = f.adapter.depositAddress("acct_1");
    await f.dev.mintTo(owner, 1_000n);
    const order = { id: "set_lost", accountId: "acct_1", to: f.adapter.treasuryAddress(), amount: 250n };
    const lost = await f.adapter.prepareTransfer(order);
    f.dev.advanceSlots(10);
    // Still sendable at processed, and not yet expired as of the finalized height.
    expect(await f.adapter.transferState(lost)).toBe("pending");
    f.dev.advanceSlots(10);
    expect(await f.adapter.transferState(lost)).toBe("dropped");
    await expect(f.adapter.broadcast(lost)).rejects.toThrow(/Blockhash not found/);
    expect(await f.adapter.transferState(lost)).toBe("dropped");
    const fresh = await f.adapter.prepareTransfer(order);
    expect(fresh.txHash).not.toBe(lost.txHash);
    await f.adapter.broadcast(fresh);
    f.finalize();
    expect(await f.adapter.transferState(fresh)).toBe("confirmed");
    expect(await f.adapter.balanceOf(f.adapter.treasuryAddress())).toBe(250n);
    expect(await f.adapter.balanceOf(owner)).toBe(750n);
  });

  it("reports a transfer that landed and failed as failed, with nothing moved", async () => {
    const f = await fixture();
    const owner = f.adapter.depositAddress("acct_1");
    await f.dev.mintTo(owner, 100n);
    const prepared = await f.adapter.prepareTransfer({
      id: "set_over",
      accountId: "acct_1",
      to: f.adapter.treasuryAddress(),
      amount: 101n,
    });
    // Preflight refuses it …
    await expect(f.adapter.broadcast(prepared)).rejects.toThrow(/broadcast of .* failed/);
    expect(await f.adapter.transferState(prepared)).toBe("pending");
    // … but a node that skips preflight lands it, failed.
    await f.connection.sendRawTransaction(Buffer.from(prepared.raw, "base64"), { skipPreflight: true });
    expect(await f.adapter.transferState(prepared)).toBe("pending");
    f.finalize();
    expect(await f.adapter.transferState(prepared)).toBe("failed");
    expect(await f.adapter.balanceOf(owner)).toBe(100n);
    expect(await f.adapter.balanceOf(f.adapter.treasuryAddress())).toBe(0n);
  });

  it("withdraws to an arbitrary wallet, creating its token account at the treasury's expense", async () => {
    const f = await fixture();
    const owner = f.adapter.depositAddress("acct_1");
    await f.dev.mintTo(owner, 9_000n);
    const wallet = Keypair.generate().publicKey.toBase58();
    expect(
      await f.connection.getAccountInfo(getAssociatedTokenAddressSync(f.mint, new PublicKey(wallet))),
    ).toBeNull();
    const prepared = await f.adapter.prepareTransfer({
      id: "wd_1",
      accountId: "acct_1",
      to: wallet,
      amount: 8_999n,
    });
    await f.adapter.broadcast(prepared);
    f.finalize();
    expect(await f.adapter.transferState(prepared)).toBe("confirmed");
    expect(await f.adapter.balanceOf(wallet)).toBe(8_999n);
    expect(await f.adapter.balanceOf(owner)).toBe(1n);
    expect(await lamportsOf(f.connection, new PublicKey(wallet))).toBe(0);
    // A second withdrawal to the same wallet finds the account there.
    const again = await f.adapter.prepareTransfer({
      id: "wd_2",
      accountId: "acct_1",
      to: wallet,
      amount: 1n,
    });
    await f.adapter.broadcast(again);
    f.finalize();
    expect(await f.adapter.transferState(again)).toBe("confirmed");
    expect(await f.adapter.balanceOf(wallet)).toBe(9_000n);
  });

  it("gives equal orders distinct transactions, so both are paid", async () => {
    const f = await fixture();
    const owner = f.adapter.depositAddress("acct_1");
    await f.dev.mintTo(owner, 100n);
    const a = await f.adapter.prepareTransfer({
      id: "o_a",
      accountId: "acct_1",
      to: f.adapter.treasuryAddress(),
      amount: 30n,
    });
    const b = await f.adapter.prepareTransfer({
      id: "o_b",
      accountId: "acct_1",
      to: f.adapter.treasuryAddress(),
      amount: 30n,
    });
    expect(a.txHash).not.toBe(b.txHash);
    await f.adapter.broadcast(a);
    await f.adapter.broadcast(b);
    f.finalize();
    expect([await f.adapter.transferState(a), await f.adapter.transferState(b)]).toEqual([
      "confirmed",
      "confirmed",
    ]);
    expect(await f.adapter.balanceOf(f.adapter.treasuryAddress())).toBe(60n);
  });

  it("refuses bad orders before signing anything", async () => {
    const f = await fixture();
    const treasury = f.adapter.treasuryAddress();
    await expect(
      f.adapter.prepareTransfer({ id: "x", accountId: "a", to: treasury, amount: 0n }),
    ).rejects.toThrow(/amount/);
    await expect(
      f.adapter.prepareTransfer({ id: "x", accountId: "a", to: treasury, amount: 1n << 64n }),
    ).rejects.toThrow(/amount/);
    await expect(
      f.adapter.prepareTransfer({ id: "x", accountId: "a", to: "0xabc", amount: 1n }),
    ).rejects.toThrow(/not a valid Solana address/);
    const own = f.adapter.depositAddress("a");
    await expect(f.adapter.prepareTransfer({ id: "x", accountId: "a", to: own, amount: 1n })).rejects.toThrow(
      /own deposit address/,
    );
    // A raw transaction some other program made is not a prepared transfer of this adapter.
    const tx = new Transaction({
      feePayer: Keypair.generate().publicKey,
      recentBlockhash: PublicKey.default.toBase58(),
    });
    tx.add(
      SystemProgram.transfer({ fromPubkey: PublicKey.default, toPubkey: PublicKey.default, lamports: 1 }),
    );
    const raw = tx.serialize({ requireAllSignatures: false, verifySignatures: false }).toString("base64");
    await expect(f.adapter.transferState({ orderId: "x", txHash: "1111", raw })).rejects.toThrow(
      /not one this adapter/,
    );
  });

  it("reads a balance of 0 for an address without a token account", async () => {
    const f = await fixture();
    expect(await f.adapter.balanceOf(Keypair.generate().publicKey.toBase58())).toBe(0n);
    await expect(f.adapter.balanceOf("nope")).rejects.toThrow(/not a Solana address/);
    // A config naming the dev chain through solanaChainConfig agrees with the fixture's.
    expect(solanaChainConfig(f.dev).asset.address).toBe(f.dev.mint);
  });
});
