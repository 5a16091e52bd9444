import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { cliJson, runCli, tempDir } from "../helpers/process.js";
import { requireBuild } from "./child-process.js";
import { chainsJson } from "./fixtures.js";

let dir: ReturnType<typeof tempDir>;
let env: Record<string, string>;
let accountId: string;

beforeAll(async () => {
  requireBuild();
  dir = tempDir();
  // The operator's registry: robinhood re-pointed at an 18-decimal token.
  const chains = chainsJson();
  chains.chains[2] = {
    ...chains.chains[2],
    asset: { symbol: "DAI", decimals: 18, address: "0x50c5725949A6F0c72E6C4a641F24049A917DB0Cb" },
  };
  const chainsFile = join(dir.path, "chains.json");
  writeFileSync(chainsFile, JSON.stringify(chains));
  env = { TOLLGATE_DATA_DIR: join(dir.path, "data"), TOLLGATE_CHAINS: chainsFile };
  accountId = (await cliJson<{ id: string }>(["account", "create", "--name", "cli"], env)).id;
});

afterAll(() => {
  if (dir === undefined) return;
  const db = openDatabase(join(dir.path, "data"));
  expect(auditLedger(db)).toEqual([]);
  db.close();
  dir.cleanup();
});

describe("tollgate credit and balance", () => {
  it("credits an exact decimal amount and shows it as a balance", async () => {
    const credit = await cliJson<{ entryId: string; balance: { available: string } }>(
      [
        "credit",
        "--account",
        accountId,
        "--chain",
        "base",
        "--amount",
        "12.50",
        "--reason",
        "welcome credit",
      ],
      env,
    );
    expect(credit.balance.available).toBe("12500000");
    expect(credit.entryId).toMatch(/^credit_/);

    const balance = await cliJson<{
      accountId: string;
      defaultChain: string;
      balances: { chain: { id: string }; available?: string }[];
    }>(["balance", "--account", accountId], env);
    expect(balance.accountId).toBe(accountId);
    expect(balance.defaultChain).toBe("base");
    expect(balance.balances.find((b) => b.chain.id === "base")?.available).toBe("12500000");

    const human = await runCli(["balance", "--account", accountId], env);
    expect(human.code).toBe(0);
    expect(human.stdout).toMatch(/base \(default\)\s+USDC\s+12\.500000/);
  });

  it("parses amounts with the chain's ledger scale (9 digits for an 18-decimal asset)", async () => {
    const credit = await cliJson<{ balance: { available: string } }>(
      ["credit", "--account", accountId, "--chain", "robinhood", "--amount", "0.5", "--reason", "r"],
      env,
    );
    expect(credit.balance.available).toBe("500000000");
    const human = await runCli(
      ["credit", "--account", accountId, "--chain", "robinhood", "--amount", "0.000000001", "--reason", "r"],
      env,
    );
    expect(human.code).toBe(0);
    expect(human.stdout).toContain("Credited 0.000000001 DAI on robinhood");
    expect(human.stdout).toContain("Available on robinhood: 0.500000001 DAI.");
  });

  it("credits 1,000,000,000 whole tokens of an 18-decimal asset", async () => {
    const credit = await cliJson<{ balance: { available: string } }>(
      ["credit", "--account", accountId, "--chain", "robinhood", "--amount", "1000000000", "--reason", "r"],
      env,
    );
    expect(credit.balance.available).toBe("1000000000500000001");
    const human = await runCli(["balance", "--account", accountId], env);
    expect(human.stdout).toMatch(/robinhood\s+DAI\s+1000000000\.500000001/);
  });

  it("credits once per --credit-id", async () => {
    const args = [
      "credit",
      "--account",
      accountId,
      "--chain",
      "solana",
      "--amount",
      "1",
      "--reason",
      "r",
      "--credit-id",
      "t-1",
    ];
    const first = await cliJson<{ entryId: string }>(args, env);
    const again = await cliJson<{ entryId: string; balance: { available: string } }>(args, env);
    expect(again.entryId).toBe(first.entryId);
    expect(again.balance.available).toBe("1000000");
  });

  it.each([
    [["--amount", "12.1234567", "--chain", "base"], /more than 6 decimal places/],
    [["--amount", "0.0000000001", "--chain", "robinhood"], /more than 9 decimal places.*to 9 decimals/],
    [["--amount", "9223372037", "--chain", "robinhood"], /beyond the ledger's int64 range/],
    [["--amount=-1", "--chain", "base"], /not a plain decimal amount/],
    [["--amount", "1e3", "--chain", "base"], /not a plain decimal amount/],
    [["--amount", "0", "--chain", "base"], /more than zero/],
    [["--amount", "1", "--chain", "ethereum"], /--chain must be one of base, arbitrum, robinhood, solana/],
  ])("refuses %j with a usage error", async (args, message) => {
    const result = await runCli(["credit", "--account", accountId, "--reason", "r", ...args], env);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(message);
  });

  it("wrote nothing for the refused credits", async () => {
    const balance = await cliJson<{ balances: { chain: { id: string }; available?: string }[] }>(
      ["balance", "--account", accountId],
      env,
    );
    expect(balance.balances.find((b) => b.chain.id === "base")?.available).toBe("12500000");
  });

  it("requires --reason", async () => {
    const result = await runCli(["credit", "--account", accountId, "--chain", "base", "--amount", "1"], env);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("--reason is required");
  });

  it("reports an unknown account", async () => {
    const result = await runCli(["balance", "--account", "acct_nobody"], env);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("No account");
  });

  it("shows each chain's withdrawal minimum and fee in its ledger units: the shipped terms, and an operator's own", async () => {
    type Chains = { chains: { id: string; withdrawalMinimum: string; withdrawalFee: string }[] };
    const terms = (pricing: Chains) =>
      Object.fromEntries(pricing.chains.map((c) => [c.id, [c.withdrawalMinimum, c.withdrawalFee]]));
    // robinhood is 18-decimal DAI here: its ledger counts 10^-9, so $1 is 10^9 units.
    expect(terms(await cliJson<Chains>(["pricing"], env))).toEqual({
      base: ["1000000", "50000"],
      arbitrum: ["1000000", "50000"],
      robinhood: ["1000000000", "50000000"],
      solana: ["1000000", "500000"],
    });
    const own = chainsJson();
    own.chains[0] = { ...own.chains[0], withdrawal_minimum: "5", withdrawal_fee: "0.12" };
    // An entry without the fields gets its family's defaults.
    const { withdrawal_minimum: _min, withdrawal_fee: _fee, ...bare } = own.chains[3]!;
    own.chains[3] = bare;
    const file = join(dir.path, "own-terms.json");
    writeFileSync(file, JSON.stringify(own));
    const pricing = await cliJson<Chains>(["pricing"], { ...env, TOLLGATE_CHAINS: file });
    expect(terms(pricing).base).toEqual(["5000000", "120000"]);
    expect(terms(pricing).solana).toEqual(["1000000", "500000"]);
  });

  it.each([
    [
      { withdrawal_fee: 0.05 },
      /\$\.chains\[0\]\.withdrawal_fee must be a decimal amount of the asset as a string/,
    ],
    [{ withdrawal_minimum: "1.0000001" }, /\$\.chains\[0\]\.withdrawal_minimum .*at most 6 decimals/],
    [{ withdrawal_fee: "-1" }, /\$\.chains\[0\]\.withdrawal_fee must be a decimal amount/],
  ])("refuses withdrawal terms %j in TOLLGATE_CHAINS, naming the field", async (terms, message) => {
    const bad = chainsJson();
    bad.chains[0] = { ...bad.chains[0], ...terms };
    const file = join(dir.path, "bad-terms.json");
    writeFileSync(file, JSON.stringify(bad));
    const result = await runCli(["pricing"], { ...env, TOLLGATE_CHAINS: file });
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/TOLLGATE_CHAINS: /);
    expect(result.stderr).toMatch(message);
  });

  it("refuses a broken TOLLGATE_CHAINS file, naming the variable", async () => {
    const bad = join(dir.path, "bad-chains.json");
    writeFileSync(bad, JSON.stringify({ default_chain: "base", chains: [] }));
    const result = await runCli(["balance", "--account", accountId], { ...env, TOLLGATE_CHAINS: bad });
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/TOLLGATE_CHAINS: .*at least one chain/);
  });
});
