import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cliJson, runCli, tempDir } from "../helpers/process.js";

let dir: ReturnType<typeof tempDir>;
let env: Record<string, string>;

beforeAll(() => {
  dir = tempDir();
  env = { TOLLGATE_DATA_DIR: dir.path };
});
afterAll(() => dir.cleanup());

describe("tollgate CLI (child process)", () => {
  it("manages accounts and keys, in --json and in human output", async () => {
    const account = await cliJson<{ id: string; status: string }>(
      ["account", "create", "--name", "alice"],
      env,
    );
    expect(account.id).toMatch(/^acct_[a-z2-7]{20}$/);
    expect(account.status).toBe("ACCOUNT_STATUS_ACTIVE");

    const key = await cliJson<{ id: string; secret: string; prefix: string }>(
      ["key", "create", "--account", account.id, "--name", "laptop"],
      env,
    );
    expect(key.secret).toMatch(/^tg_[0-9A-Za-z]{49}$/);
    expect(key.secret.startsWith(key.prefix)).toBe(true);

    const human = await runCli(["key", "list", "--account", account.id], env);
    expect(human.code).toBe(0);
    expect(human.stdout).toMatch(/ID\s+NAME\s+PREFIX\s+STATUS\s+CREATED\s+LAST USED/);
    expect(human.stdout).toContain(key.id);
    expect(human.stdout).not.toContain(key.secret);

    const listed = await cliJson<{ id: string }[]>(["account", "list"], env);
    expect(listed.map((a) => a.id)).toContain(account.id);

    const suspended = await cliJson<{ status: string; suspendedReason: string }>(
      ["account", "suspend", account.id, "--reason", "fraud check"],
      env,
    );
    expect(suspended).toMatchObject({ status: "ACCOUNT_STATUS_SUSPENDED", suspendedReason: "fraud check" });
    const reactivated = await runCli(["account", "reactivate", account.id], env);
    expect(reactivated).toMatchObject({ code: 0 });
    expect(reactivated.stdout).toContain(`Reactivated account ${account.id} (active)`);

    const revoked = await cliJson<{ status: string }>(["key", "revoke", key.id], env);
    expect(revoked.status).toBe("KEY_STATUS_REVOKED");

    const created = await runCli(["key", "create", "--account", account.id], env);
    expect(created.stdout).toMatch(/tg_[0-9A-Za-z]{49}/);
    expect(created.stdout).toContain("only time the secret is shown");
  });

  it.each([
    [[], "Usage: tollgate"],
    [["frobnicate"], "unknown command: frobnicate"],
    [["key", "create"], "--account is required"],
    [["key", "create", "--account", "a", "--bogus"], "Unknown option '--bogus'"],
    [["account", "suspend"], "expected exactly one account id"],
    [["key", "revoke", "a", "b"], "expected exactly one key id"],
    [["serve", "now"], "serve takes no arguments"],
  ])("bad arguments %j → usage on stderr, exit 2, no stack trace", async (args, message) => {
    const result = await runCli(args, env);
    expect(result.code).toBe(2);
    expect(result.stdout + result.stderr).toContain(message);
    expect(result.stdout + result.stderr).toContain("Usage: tollgate <command>");
    expect(result.stderr).not.toMatch(/^\s+at /m);
  });

  it("reports a domain error in one line with exit 1", async () => {
    const result = await runCli(["key", "create", "--account", "acct_missing"], env);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/^tollgate: .*No account "acct_missing"/);
    expect(result.stderr).not.toMatch(/^\s+at /m);
  });

  it("refuses invalid configuration naming the variable", async () => {
    const result = await runCli(["serve"], { ...env, TOLLGATE_PORT: "eighty" });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("TOLLGATE_PORT");
  });

  it("prints help with exit 0", async () => {
    const result = await runCli(["--help"], env);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("key create --account ID");
  });
});
