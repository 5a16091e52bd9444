import { create, fromJson } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { formatUsage } from "../../src/cli/chain-commands.js";
import { formatPricing } from "../../src/cli/pricing-command.js";
import { formatMicroDollars } from "../../src/core/billing/charge-format.js";
import {
  ChainSchema,
  GetPricingResponseSchema,
  HoldStatus,
  SettlementStatus,
  UsageRowSchema,
} from "../../src/gen/tollgate/billing/v1/billing_pb.js";
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
    [["dev", "now"], "dev takes no arguments"],
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

  it("serve fails closed: without a provider, a chain registry or a master secret it names each and exits 1", async () => {
    const all = await runCli(["serve"], env);
    expect(all.code).toBe(1);
    for (const variable of ["TOLLGATE_ANTHROPIC_API_KEY", "TOLLGATE_CHAINS", "TOLLGATE_MASTER_SECRET"]) {
      expect(all.stderr).toContain(variable);
    }
    expect(all.stderr).toContain("tollgate dev");
    expect(all.stdout).not.toContain("tollgate ready");
    // Each one is named only while it is missing.
    const withProvider = await runCli(["serve"], {
      ...env,
      TOLLGATE_ANTHROPIC_API_KEY: "sk-test",
      TOLLGATE_MASTER_SECRET: "ab".repeat(32),
    });
    expect(withProvider.code).toBe(1);
    expect(withProvider.stderr).toContain("TOLLGATE_CHAINS");
    expect(withProvider.stderr).not.toContain("TOLLGATE_ANTHROPIC_API_KEY");
    expect(withProvider.stderr).not.toContain("TOLLGATE_MASTER_SECRET (");
  });

  it("prints help with exit 0", async () => {
    const result = await runCli(["--help"], env);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("key create --account ID");
    expect(result.stdout).toContain("pricing ");
  });

  it("prints the whole catalog, and the GetPricing response as proto JSON with --json", async () => {
    const json = await cliJson<Record<string, unknown>>(["pricing"], env);
    // Proto JSON: parsing it back as a GetPricingResponse is lossless.
    const pricing = fromJson(GetPricingResponseSchema, json as never);
    expect(pricing.textModels.length).toBeGreaterThan(0);
    expect(pricing.chains.length).toBeGreaterThan(0);

    const human = await runCli(["pricing"], env);
    expect(human).toMatchObject({ code: 0, stderr: "" });
    expect(human.stdout).toBe(`${formatPricing(pricing)}\n`);
    expect(human.stdout).toMatch(
      /^MODEL +INPUT +OUTPUT +CACHE WRITE 5M +CACHE WRITE 1H +CACHE READ +MAX OUTPUT/m,
    );
    for (const model of pricing.textModels) {
      expect(human.stdout).toMatch(
        new RegExp(
          `^${model.model} +\\${formatMicroDollars(model.inputPerMtok)} +\\${formatMicroDollars(model.outputPerMtok)} `,
          "m",
        ),
      );
    }
    for (const image of pricing.imageModels) expect(human.stdout).toContain(image.model);
    expect(human.stdout).toContain(`Chains (default: ${pricing.defaultChain})`);
    expect(human.stdout).toContain("Code execution is refused");
  });

  it("lists an account's calls (none yet) in human and --json output", async () => {
    const account = await cliJson<{ id: string }>(["account", "create", "--name", "usage"], env);
    const human = await runCli(["usage", "--account", account.id], env);
    expect(human.code).toBe(0);
    expect(human.stdout).toBe("AT  MODEL  CHAIN  CHARGED  SETTLEMENT  TRANSACTION\n");
    expect(await cliJson(["usage", "--account", account.id], env)).toEqual({});
  });
});

// The renderers behind `tollgate pricing` and `tollgate usage`, fed constructed messages: the
// new fields are filled by the core, and these pin the text the CLI prints for them.
describe("CLI formatting of the catalog and the charge lines", () => {
  const base = create(ChainSchema, { id: "base", enabled: true, asset: { symbol: "USDC", decimals: 6 } });
  const at = (iso: string) => timestampFromDate(new Date(iso));

  it("prints each call's charge lines under it, and what was not priced", () => {
    const rows = [
      create(UsageRowSchema, {
        requestId: "req_1",
        model: "model-opus-4-8",
        chain: "base",
        status: HoldStatus.SETTLED,
        amount: 211_501n,
        createdAt: at("2026-11-24T10:00:00Z"),
        settlementStatus: SettlementStatus.QUEUED,
        charges: [
          {
            kind: "tokens",
            pass: "message",
            model: "model-opus-4-8",
            tokens: { inputTokens: 12_000n, outputTokens: 800n, cacheReadTokens: 5_000n },
            speed: "fast",
            multiplierBp: 11_000,
            amountPico: 181_500_000_000n,
            description: "model-opus-4-8 · tokens · fast mode ×2 · US-only ×1.1",
          },
          {
            kind: "tokens",
            pass: "compaction",
            model: "model-opus-4-8",
            tokens: { inputTokens: 300n, outputTokens: 20n },
            speed: "fast",
            multiplierBp: 11_000,
            amountPico: 4_400_000n,
            description: "model-opus-4-8 · compaction pass · fast mode ×2 · US-only ×1.1",
          },
          { kind: "web_search", quantity: 3n, amountPico: 30_000_000_000n, description: "3 web searches" },
        ],
        unpriced: ["usage.server_tool_use.foo_requests"],
      }),
      create(UsageRowSchema, {
        requestId: "req_0",
        model: "model-opus-5",
        chain: "base",
        status: HoldStatus.SETTLED,
        amount: 5_100n,
        createdAt: at("2026-11-24T09:59:00Z"),
        settlementStatus: SettlementStatus.OFFCHAIN,
        charges: [
          {
            kind: "tokens",
            pass: "declined",
            model: "model-opus-5",
            tokens: { inputTokens: 2_000n },
            multiplierBp: 10_000,
            description: "model-opus-5 · declined attempt (not charged)",
          },
          {
            kind: "tokens",
            pass: "fallback",
            model: "model-sonnet-5",
            tokens: { inputTokens: 2_000n, outputTokens: 110n },
            multiplierBp: 10_000,
            amountPico: 5_100_000_000n,
            description: "model-sonnet-5 · fallback attempt",
          },
        ],
      }),
    ];
    expect(formatUsage(rows, new Map([["base", base]]))).toBe(
      [
        "AT                    MODEL           CHAIN  CHARGED        SETTLEMENT  TRANSACTION",
        "2026-11-24T10:00:00Z  model-opus-4-8  base   0.211501 USDC  queued",
        "    model-opus-4-8 · tokens · fast mode ×2 · US-only ×1.1           12,000 in · 800 out · 5,000 cache read     $0.1815",
        "    model-opus-4-8 · compaction pass · fast mode ×2 · US-only ×1.1  300 in · 20 out                         $0.0000044",
        "    3 web searches                                                                                               $0.03",
        "    ! Not priced: usage.server_tool_use.foo_requests. The call was charged for everything else, and the operator was told.",
        "2026-11-24T09:59:00Z  model-opus-5    base   0.005100 USDC  off-chain",
        "    model-opus-5 · declined attempt (not charged)  2,000 in              $0.00",
        "    model-sonnet-5 · fallback attempt              2,000 in · 110 out  $0.0051",
      ].join("\n"),
    );
  });

  it("says what a gateway without the new catalog fields does not report", () => {
    const text = formatPricing(
      create(GetPricingResponseSchema, {
        textModels: [{ model: "model-x", inputPerMtok: 1n, maxOutputTokens: 10 }],
        chains: [base],
        defaultChain: "base",
      }),
    );
    expect(text).toContain("Catalog version not reported by this gateway.");
    expect(text).toContain('Fast mode: no model offers it (speed: "fast" is refused).');
    expect(text).toContain("Server tools: none reported by this gateway.");
    expect(text).toMatch(/^model-x +\$0\.000001 +\$0\.00 .* 10 +- +-$/m);
  });
});
