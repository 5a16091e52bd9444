/**
 * The Solana dev chain through the real @solana/web3.js Connection and @solana/spl-token:
 * slots and commitments, the stable test mint, the faucet, blocks, signature statuses,
 * blockhash expiry, failed and duplicate transactions.
 */

import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  createAssociatedTokenAccount,
  createMint,
  createTransferCheckedInstruction,
  getAccount,
  getAssociatedTokenAddressSync,
  getMint,
  mintTo,
  transfer,
} from "@solana/spl-token";
import { Connection, Keypair, LAMPORTS_PER_SOL, PublicKey, SystemProgram } from "@solana/web3.js";
import { afterEach, describe, expect, it } from "vitest";
import { memoInstruction } from "../../../src/chains/solana/memo.js";
import {
  type SolanaDevChain,
  solanaDevMintAddress,
  startSolanaDevChain,
} from "../../../src/dev/chains/solana/dev-chain.js";
import { tempDir } from "../../helpers/process.js";
import { lamportsOf, sendTx, statusOf } from "./helpers.js";

const chains: SolanaDevChain[] = [];
afterEach(async () => {
  await Promise.all(chains.splice(0).map((c) => c.close()));
});

async function start(options: Parameters<typeof startSolanaDevChain>[0] = {}) {
  const dev = await startSolanaDevChain({ slotMs: 0, finalizedLag: 4, ...options });
  chains.push(dev);
  return { dev, connection: new Connection(dev.rpcUrl, "confirmed"), mint: new PublicKey(dev.mint) };
}

describe("Solana dev chain", () => {
  it("listens on 127.0.0.1 with a free port and a mint whose address is fixed across restarts", async () => {
    const a = await start();
    const b = await start({ decimals: 6 });
    expect(a.dev.rpcUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(a.dev.rpcUrl).not.toBe(b.dev.rpcUrl);
    expect(a.dev.mint).toBe(b.dev.mint);
    expect(a.dev.mint).toBe(solanaDevMintAddress());
    const mint = await getMint(a.connection, a.mint);
    expect(mint.decimals).toBe(6);
    expect(mint.mintAuthority?.toBase58()).toBe(a.dev.faucet);
    expect(await a.connection.getVersion()).toMatchObject({
      "solana-core": expect.stringContaining("litesvm"),
    });
  });

  it("keeps confirmed and finalized behind processed by their lags, and moves them when slots advance", async () => {
    const { dev, connection } = await start({ confirmedLag: 1, finalizedLag: 4 });
    const processed = await connection.getSlot("processed");
    expect(await connection.getSlot("confirmed")).toBe(processed - 1);
    expect(await connection.getSlot("finalized")).toBe(processed - 4);
    expect(dev.advanceSlots(3)).toBe(processed + 3);
    expect(await connection.getSlot("processed")).toBe(processed + 3);
    expect(await connection.getSlot("finalized")).toBe(processed - 1);
    expect(await connection.getBlockHeight("processed")).toBe(processed + 3);
  });

  it("advances slots on its own timer", async () => {
    const { connection } = await start({ slotMs: 10 });
    const first = await connection.getSlot("processed");
    await new Promise((resolve) => setTimeout(resolve, 120));
    expect(await connection.getSlot("processed")).toBeGreaterThan(first + 3);
  });

  it("mints to an owner's associated token account, creating it; two equal mints in one slot both land", async () => {
    const { dev, connection, mint } = await start();
    const owner = Keypair.generate().publicKey;
    const first = await dev.mintTo(owner.toBase58(), 1_500_000n);
    const second = await dev.mintTo(owner.toBase58(), 1_500_000n);
    expect(first).not.toBe(second);
    const ata = getAssociatedTokenAddressSync(mint, owner);
    const balance = await connection.getTokenAccountBalance(ata, "processed");
    expect(balance.value).toMatchObject({ amount: "3000000", decimals: 6, uiAmountString: "3" });
    expect((await getAccount(connection, ata, "processed")).owner.toBase58()).toBe(owner.toBase58());
    // The owner holds no SOL: the faucet paid the account's rent and the fees.
    expect(await lamportsOf(connection, owner)).toBe(0);
  });

  it("reports a signature processed, then confirmed, then finalized, and serves its block only from confirmed", async () => {
    const { dev, connection, mint } = await start({ confirmedLag: 1, finalizedLag: 3 });
    const owner = Keypair.generate().publicKey;
    const signature = await dev.mintTo(owner.toBase58(), 42n);
    const { value } = await connection.getSignatureStatuses([signature]);
    const slot = value[0]!.slot;
    expect(value[0]).toMatchObject({ err: null, confirmationStatus: "processed", confirmations: 0 });
    await expect(connection.getBlock(slot, { maxSupportedTransactionVersion: 0 })).rejects.toThrow(
      /Block not available/,
    );
    dev.advanceSlots(1);
    expect(await statusOf(connection, signature)).toBe("confirmed");
    const block = await connection.getBlock(slot, { maxSupportedTransactionVersion: 0, rewards: false });
    const tx = block!.transactions.find((t) => t.transaction.signatures[0] === signature)!;
    expect(tx.meta!.err).toBeNull();
    const ata = getAssociatedTokenAddressSync(mint, owner).toBase58();
    const keys = tx.transaction.message.staticAccountKeys.map((k) => k.toBase58());
    expect(tx.meta!.postTokenBalances).toContainEqual(
      expect.objectContaining({ accountIndex: keys.indexOf(ata), mint: dev.mint, owner: owner.toBase58() }),
    );
    // The ATA program created the account through inner instructions (CPI into Token and System).
    expect(tx.meta!.innerInstructions!.length).toBeGreaterThan(0);
    await expect(connection.getBlock(slot, { commitment: "finalized" })).rejects.toThrow(
      /Block not available/,
    );
    dev.advanceSlots(2);
    expect(await statusOf(connection, signature)).toBe("finalized");
    expect(await connection.getBlocks(slot, slot + 10, "finalized")).toEqual([slot]);
    const fetched = await connection.getTransaction(signature, { maxSupportedTransactionVersion: 0 });
    expect(fetched?.slot).toBe(slot);
  });

  it("airdrops SOL through requestAirdrop and through the faucet method", async () => {
    const { dev, connection } = await start();
    const who = Keypair.generate().publicKey;
    const signature = await connection.requestAirdrop(who, 2 * LAMPORTS_PER_SOL);
    expect(await statusOf(connection, signature)).toBe("processed");
    await dev.airdrop(who.toBase58(), 1n);
    expect(await lamportsOf(connection, who)).toBe(2 * LAMPORTS_PER_SOL + 1);
  });

  it("rejects an expired blockhash in preflight, and drops it silently without preflight", async () => {
    const { dev, connection } = await start({ blockhashValidSlots: 5 });
    const payer = Keypair.generate();
    await dev.airdrop(payer.publicKey.toBase58(), BigInt(LAMPORTS_PER_SOL));
    const { blockhash, lastValidBlockHeight } = await connection.getLatestBlockhash("processed");
    expect(await connection.isBlockhashValid(blockhash, { commitment: "processed" })).toMatchObject({
      value: true,
    });
    dev.advanceSlots(lastValidBlockHeight - (await connection.getBlockHeight("processed")) + 1);
    expect(await connection.isBlockhashValid(blockhash, { commitment: "processed" })).toMatchObject({
      value: false,
    });
    const ix = [memoInstruction("late")];
    await expect(sendTx(connection, ix, [payer], { blockhash })).rejects.toThrow(/Blockhash not found/);
    const { signature } = await sendTx(connection, ix, [payer], { blockhash, skipPreflight: true });
    dev.advanceSlots(10);
    expect(await statusOf(connection, signature)).toBeNull();
  });

  it("lands a failing transaction with its error and fee, and refuses it in preflight", async () => {
    const { dev, connection, mint } = await start();
    const payer = Keypair.generate();
    const owner = Keypair.generate();
    await dev.airdrop(payer.publicKey.toBase58(), BigInt(LAMPORTS_PER_SOL));
    await dev.mintTo(owner.publicKey.toBase58(), 10n);
    const ata = getAssociatedTokenAddressSync(mint, owner.publicKey);
    const overdraw = [createTransferCheckedInstruction(ata, mint, ata, owner.publicKey, 11n, 6)];
    await expect(sendTx(connection, overdraw, [payer, owner])).rejects.toThrow(/simulation failed/);
    expect(await lamportsOf(connection, payer.publicKey)).toBe(LAMPORTS_PER_SOL);
    const { signature } = await sendTx(connection, overdraw, [payer, owner], { skipPreflight: true });
    const { value } = await connection.getSignatureStatuses([signature]);
    expect(value[0]?.err).toEqual({ InstructionError: [0, { Custom: 1 }] });
    expect(await lamportsOf(connection, payer.publicKey)).toBe(LAMPORTS_PER_SOL - 10_000);
    expect((await connection.getTokenAccountBalance(ata, "processed")).value.amount).toBe("10");
  });

  it("tops up a fee payer without SOL from the faucet, unless told not to", async () => {
    const sponsored = await start();
    const payer = Keypair.generate();
    const memo = [memoInstruction("who pays?")];
    const { signature } = await sendTx(sponsored.connection, memo, [payer]);
    expect(await statusOf(sponsored.connection, signature)).toBe("processed");
    expect(await lamportsOf(sponsored.connection, payer.publicKey)).toBe(10 * LAMPORTS_PER_SOL - 5000);

    const strict = await start({ sponsorFeePayers: false });
    const poor = Keypair.generate();
    await expect(sendTx(strict.connection, memo, [poor])).rejects.toThrow(/AccountNotFound/);
    const dropped = await sendTx(strict.connection, memo, [poor], { skipPreflight: true });
    strict.dev.advanceSlots(2);
    expect(await statusOf(strict.connection, dropped.signature)).toBeNull();
  });

  it("lands a transaction once however often it is sent", async () => {
    const { dev, connection } = await start();
    const payer = Keypair.generate();
    const to = Keypair.generate().publicKey;
    await dev.airdrop(payer.publicKey.toBase58(), BigInt(LAMPORTS_PER_SOL));
    const pay = [SystemProgram.transfer({ fromPubkey: payer.publicKey, toPubkey: to, lamports: 1_000_000 })];
    const { signature, raw } = await sendTx(connection, pay, [payer]);
    await expect(connection.sendRawTransaction(raw)).rejects.toThrow(/already been processed/);
    expect(await connection.sendRawTransaction(raw, { skipPreflight: true })).toBe(signature);
    expect(await lamportsOf(connection, to)).toBe(1_000_000);
  });

  it("answers unknown methods and bad params with JSON-RPC errors", async () => {
    const { dev } = await start();
    const call = async (body: unknown) =>
      (await fetch(dev.rpcUrl, { method: "POST", body: JSON.stringify(body) })).json() as Promise<{
        error?: { code: number; message: string };
        result?: unknown;
      }>;
    expect(
      (await call({ jsonrpc: "2.0", id: 1, method: "getProgramAccounts", params: [] })).error?.code,
    ).toBe(-32601);
    expect((await call({ jsonrpc: "2.0", id: 1, method: "getBalance", params: ["nope"] })).error?.code).toBe(
      -32602,
    );
    const batch = (await call([
      { jsonrpc: "2.0", id: 1, method: "getHealth" },
      { jsonrpc: "2.0", id: 2, method: "getSlot", params: [{ commitment: "processed" }] },
    ])) as unknown as { result: unknown }[];
    expect(batch[0]?.result).toBe("ok");
    expect(typeof batch[1]?.result).toBe("number");
  });
});

describe("Solana dev chain websocket", () => {
  it("lets @solana/spl-token's send-and-confirm helpers run unchanged (signatureSubscribe)", async () => {
    const dev = await startSolanaDevChain({ slotMs: 10, finalizedLag: 4 });
    chains.push(dev);
    const connection = new Connection(dev.rpcUrl, { commitment: "confirmed", wsEndpoint: dev.wsUrl });
    const payer = Keypair.generate();
    await dev.airdrop(payer.publicKey.toBase58(), BigInt(LAMPORTS_PER_SOL));
    const mint = await createMint(connection, payer, payer.publicKey, null, 2);
    const alice = await createAssociatedTokenAccount(connection, payer, mint, payer.publicKey);
    await mintTo(connection, payer, mint, alice, payer, 500n);
    const bob = Keypair.generate().publicKey;
    const bobAta = await createAssociatedTokenAccount(connection, payer, mint, bob);
    const signature = await transfer(connection, payer, alice, bobAta, payer, 123n, [], {
      commitment: "finalized",
    });
    expect(await statusOf(connection, signature)).toBe("finalized");
    expect((await getAccount(connection, bobAta)).amount).toBe(123n);
    // slotSubscribe reports slots as the timer advances them.
    const slots: number[] = [];
    const id = connection.onSlotChange((info) => slots.push(info.slot));
    await new Promise((resolve) => setTimeout(resolve, 150));
    await connection.removeSlotChangeListener(id);
    expect(slots.length).toBeGreaterThan(2);
    expect(slots[1]).toBeGreaterThan(slots[0]!);
    // web3.js closes an idle websocket after 500 ms; closing the chain first would leave it
    // reconnecting (and logging) for the rest of the run.
    await new Promise((resolve) => setTimeout(resolve, 800));
  });
});

describe("Solana dev chain state file", () => {
  it("resumes accounts, blocks, statuses and slots after a restart", async () => {
    const dir = tempDir("tollgate-solana-");
    try {
      const statePath = join(dir.path, "dev-chains", "solana.json");
      const first = await startSolanaDevChain({ slotMs: 0, finalizedLag: 4, statePath });
      const owner = Keypair.generate().publicKey;
      const signature = await first.mintTo(owner.toBase58(), 777n);
      first.advanceSlots(10);
      const head = first.slot("processed");
      await first.close();

      const second = await startSolanaDevChain({ slotMs: 0, finalizedLag: 4, statePath });
      chains.push(second);
      const connection = new Connection(second.rpcUrl, "confirmed");
      expect(second.mint).toBe(first.mint);
      expect(second.slot("processed")).toBe(head);
      const ata = getAssociatedTokenAddressSync(new PublicKey(second.mint), owner);
      expect((await connection.getTokenAccountBalance(ata)).value.amount).toBe("777");
      expect(await statusOf(connection, signature)).toBe("finalized");
      const tx = await connection.getTransaction(signature, { maxSupportedTransactionVersion: 0 });
      const block = await connection.getBlock(tx!.slot, { maxSupportedTransactionVersion: 0 });
      expect(block?.transactions.map((t) => t.transaction.signatures[0])).toContain(signature);
      // It goes on from there: the faucet still mints, new slots follow the old ones.
      await second.mintTo(owner.toBase58(), 3n);
      expect((await connection.getTokenAccountBalance(ata, "processed")).value.amount).toBe("780");
      expect(second.advanceSlots(1)).toBe(head + 1);
      // A state made with other decimals is refused rather than silently mixed.
      await second.close();
      chains.pop();
      await expect(startSolanaDevChain({ slotMs: 0, decimals: 2, statePath })).rejects.toThrow(
        /6 decimals, not 2/,
      );
    } finally {
      dir.cleanup();
    }
  });
});

describe("Solana dev chain state file after a kill", () => {
  it("keeps what landed a second before, and resumes past every slot it could have reported", async () => {
    const dir = tempDir("tollgate-solana-");
    try {
      const statePath = join(dir.path, "solana.json");
      const running = await startSolanaDevChain({ slotMs: 20, finalizedLag: 4, statePath });
      const owner = Keypair.generate().publicKey.toBase58();
      const signature = await running.mintTo(owner, 5n);
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      // What a kill -9 now would leave behind: the running chain's own save.
      const leftBehind = readFileSync(statePath, "utf8");
      const headAtKill = running.slot("processed");
      await running.close();
      writeFileSync(statePath, leftBehind);
      expect(JSON.parse(leftBehind).clean).toBe(false);

      const resumed = await startSolanaDevChain({ slotMs: 20, finalizedLag: 4, statePath });
      chains.push(resumed);
      const connection = new Connection(resumed.rpcUrl, "confirmed");
      // 10 s of 20 ms slots past the last save, which was at or before the kill.
      expect(resumed.slot("processed")).toBeGreaterThanOrEqual(headAtKill);
      expect(await statusOf(connection, signature)).not.toBeNull();
      const ata = getAssociatedTokenAddressSync(new PublicKey(resumed.mint), new PublicKey(owner));
      expect((await connection.getTokenAccountBalance(ata, "processed")).value.amount).toBe("5");
      // Closed here, not after the test: closing saves the state, which would re-create the dir.
      await resumed.close();
      chains.pop();
    } finally {
      dir.cleanup();
    }
  });
});
