/**
 * The pure parts of the Solana deposit scan: SPL Token instruction decoding, and matching
 * credits in a block's transactions (including inner instructions, which the dev chain cannot
 * produce without a custom program), without any RPC.
 */
import { describe, expect, it } from "vitest";
import { findDeposits, type ScannedTransaction } from "../../../src/chains/solana/deposit-scan.js";
import { decodeTokenCredit } from "../../../src/chains/solana/token-instructions.js";
import { transactionErrorJson } from "../../../src/dev/chains/solana/dev-svm.js";

function data(tag: number, amount: bigint, decimals?: number): Uint8Array {
  const bytes = Buffer.alloc(decimals === undefined ? 9 : 10);
  bytes[0] = tag;
  bytes.writeBigUInt64LE(amount, 1);
  if (decimals !== undefined) bytes[9] = decimals;
  return bytes;
}

describe("decodeTokenCredit", () => {
  const cases: [string, Uint8Array, number, ReturnType<typeof decodeTokenCredit>][] = [
    [
      "transfer",
      data(3, 5n),
      3,
      { kind: "transfer", amount: 5n, source: 0, mint: undefined, destination: 1 },
    ],
    [
      "transferChecked",
      data(12, 2n ** 64n - 1n, 6),
      4,
      { kind: "transferChecked", amount: 2n ** 64n - 1n, source: 0, mint: 1, destination: 2 },
    ],
    ["mintTo", data(7, 9n), 3, { kind: "mintTo", amount: 9n, source: undefined, mint: 0, destination: 1 }],
    [
      "mintToChecked",
      data(14, 1n, 6),
      3,
      { kind: "mintToChecked", amount: 1n, source: undefined, mint: 0, destination: 1 },
    ],
    ["burn (not a credit)", data(8, 5n), 3, undefined],
    ["approve (not a credit)", data(4, 5n), 3, undefined],
    ["transfer with a truncated amount", data(3, 5n).subarray(0, 8), 3, undefined],
    ["transferChecked without its decimals", data(12, 5n), 4, undefined],
    ["transferChecked with too few accounts", data(12, 5n, 6), 2, undefined],
    ["empty data", new Uint8Array(), 3, undefined],
  ];
  it.each(cases)("%s", (_name, bytes, accounts, expected) => {
    expect(decodeTokenCredit(bytes, accounts)).toEqual(expected);
  });
});

const TOKEN = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA";
const MINT = "Mint111111111111111111111111111111111111111";
const OTHER_MINT = "Other11111111111111111111111111111111111111";
const ALICE = "Alice1111111111111111111111111111111111111";
const BOB = "Bob11111111111111111111111111111111111111111";
const ata = (owner: string) => `ata-of-${owner}`;
const rule = {
  mint: MINT,
  tokenProgram: TOKEN,
  recipients: new Set([ALICE]),
  isDepositAccount: (owner: string, account: string) => account === ata(owner),
};
// Keys: 0 payer, 1 Bob's ATA (source), 2 Alice's ATA, 3 the token program, 4 the mint, 5 some program, 6 Bob
const KEYS = ["payer", ata(BOB), ata(ALICE), TOKEN, MINT, "SomeProgram", BOB];
const balances = [
  { accountIndex: 1, mint: MINT, owner: BOB },
  { accountIndex: 2, mint: MINT, owner: ALICE },
];

function tx(overrides: Partial<ScannedTransaction>): ScannedTransaction {
  return {
    signature: "sig",
    accountKeys: KEYS,
    instructions: [],
    innerInstructions: new Map(),
    preTokenBalances: balances,
    postTokenBalances: balances,
    failed: false,
    ...overrides,
  };
}

describe("findDeposits", () => {
  it("numbers instructions in execution order, inner ones after their parent", () => {
    const deposits = findDeposits(
      7n,
      [
        tx({
          instructions: [
            { programIdIndex: 5, accounts: [], data: new Uint8Array([1]) },
            { programIdIndex: 3, accounts: [1, 2, 6], data: data(3, 10n) },
          ],
          innerInstructions: new Map([
            [
              0,
              [
                { programIdIndex: 3, accounts: [1, 4, 2, 6], data: data(12, 4n, 6) },
                { programIdIndex: 3, accounts: [4, 2, 0], data: data(7, 1n) },
              ],
            ],
          ]),
        }),
      ],
      rule,
    );
    expect(deposits).toEqual([
      { txHash: "sig", index: 1, position: 7n, from: BOB, to: ALICE, amount: 4n },
      { txHash: "sig", index: 2, position: 7n, from: MINT, to: ALICE, amount: 1n },
      { txHash: "sig", index: 3, position: 7n, from: BOB, to: ALICE, amount: 10n },
    ]);
  });

  it("skips failed transactions, other programs, other mints, unwatched owners, other accounts, zero amounts", () => {
    const credit = { programIdIndex: 3, accounts: [1, 2, 6], data: data(3, 10n) };
    const none = [
      tx({ instructions: [credit], failed: true }),
      tx({ instructions: [{ ...credit, programIdIndex: 5 }] }),
      tx({
        instructions: [credit],
        postTokenBalances: [{ accountIndex: 2, mint: OTHER_MINT, owner: ALICE }],
        preTokenBalances: [],
      }),
      tx({ instructions: [{ ...credit, accounts: [2, 1, 6] }] }), // to Bob, who is not watched
      tx({
        instructions: [credit],
        accountKeys: KEYS.map((k) => (k === ata(ALICE) ? "alice-other-account" : k)),
      }),
      tx({ instructions: [{ ...credit, data: data(3, 0n) }] }),
      tx({ instructions: [credit], postTokenBalances: [], preTokenBalances: [] }),
    ];
    for (const [i, t] of none.entries()) expect(findDeposits(1n, [t], rule), `case ${i}`).toEqual([]);
  });

  it("finds a destination closed later in the transaction through its pre balance", () => {
    const deposits = findDeposits(
      1n,
      [
        tx({
          instructions: [{ programIdIndex: 3, accounts: [1, 2, 6], data: data(3, 10n) }],
          postTokenBalances: [{ accountIndex: 1, mint: MINT, owner: BOB }],
        }),
      ],
      rule,
    );
    expect(deposits.map((d) => d.amount)).toEqual([10n]);
  });
});

describe("transactionErrorJson", () => {
  it("writes litesvm errors the way Agave's RPC does", () => {
    class TransactionErrorInstructionError {
      constructor(
        readonly index: number,
        private readonly inner: unknown,
      ) {}
      err() {
        return this.inner;
      }
    }
    class TransactionErrorInsufficientFundsForRent {
      constructor(readonly accountIndex: number) {}
    }
    expect(transactionErrorJson(2)).toBe("AccountNotFound");
    expect(transactionErrorJson(7)).toBe("BlockhashNotFound");
    expect(transactionErrorJson(new TransactionErrorInstructionError(1, { code: 1 }))).toEqual({
      InstructionError: [1, { Custom: 1 }],
    });
    expect(transactionErrorJson(new TransactionErrorInstructionError(0, 5))).toEqual({
      InstructionError: [0, "InsufficientFunds"],
    });
    expect(transactionErrorJson(new TransactionErrorInsufficientFundsForRent(3))).toEqual({
      InsufficientFundsForRent: { account_index: 3 },
    });
  });
});
