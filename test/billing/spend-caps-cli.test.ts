import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { cliJson, runCli, tempDir } from "../helpers/process.js";
import { requireBuild } from "./child-process.js";

// `tollgate key cap` and `key caps`: exact decimal amounts of the chain's asset, `none` clears,
// bad input refused by name before anything is written.

let dir: ReturnType<typeof tempDir>;
let env: Record<string, string>;
let accountId: string;
let keyId: string;

interface Caps {
  accountId: string;
  caps?: {
    keyId?: string;
    chain: string;
    period: string;
    amount?: string;
    spent?: string;
    resetsAtMs?: string;
  }[];
}

beforeAll(async () => {
  requireBuild();
  dir = tempDir();
  env = { TOLLGATE_DATA_DIR: join(dir.path, "data") };
  accountId = (await cliJson<{ id: string }>(["account", "create", "--name", "caps"], env)).id;
  keyId = (await cliJson<{ id: string }>(["key", "create", "--account", accountId], env)).id;
});

afterAll(() => {
  if (dir === undefined) return;
  const db = openDatabase(join(dir.path, "data"));
  expect(auditLedger(db)).toEqual([]);
  db.close();
  dir.cleanup();
});

describe("tollgate key cap", () => {
  it("sets a key's daily and the account's lifetime cap, lists them, and clears one", async () => {
    await cliJson(
      ["key", "cap", "--account", accountId, "--key", keyId, "--chain", "base", "--daily", "5"],
      env,
    );
    const set = await cliJson<Caps>(
      ["key", "cap", "--account", accountId, "--chain", "base", "--lifetime", "12.50"],
      env,
    );
    expect(set.caps?.map((c) => [c.keyId ?? "", c.period, c.amount])).toEqual([
      ["", "SPEND_CAP_PERIOD_LIFETIME", "12500000"],
      [keyId, "SPEND_CAP_PERIOD_DAY", "5000000"],
    ]);
    const text = await runCli(["key", "caps", "--account", accountId], env);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(
      new RegExp(`${keyId}\\s+base\\s+daily\\s+5\\.000000 USDC\\s+0\\.000000 USDC\\s+\\d{4}-`),
    );
    expect(text.stdout).toMatch(/\(account\)\s+base\s+lifetime\s+12\.500000 USDC\s+0\.000000 USDC\s+never/);
    const cleared = await cliJson<Caps>(
      ["key", "cap", "--account", accountId, "--key", keyId, "--chain", "base", "--daily", "none"],
      env,
    );
    expect(cleared.caps?.map((c) => c.period)).toEqual(["SPEND_CAP_PERIOD_LIFETIME"]);
  });

  it("refuses a bad amount, no period and an unknown chain by name", async () => {
    const bad = await runCli(
      ["key", "cap", "--account", accountId, "--chain", "base", "--daily", "1.5.0"],
      env,
    );
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain("--daily");
    const none = await runCli(["key", "cap", "--account", accountId, "--chain", "base"], env);
    expect(none.stderr).toContain("give at least one of --daily, --monthly, --lifetime");
    const chain = await runCli(
      ["key", "cap", "--account", accountId, "--chain", "nowhere", "--daily", "1"],
      env,
    );
    expect(chain.stderr).toContain("--chain must be one of");
    const caps = await cliJson<Caps>(["key", "caps", "--account", accountId], env);
    expect(caps.caps).toHaveLength(1);
  });
});
