import { spawn } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { create, fromJson } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { formatUsage } from "../../src/cli/chain-commands.js";
import { formatPricing } from "../../src/cli/pricing-command.js";
import { formatMicroDollars } from "../../src/core/billing/charge-format.js";
import { DEFAULT_CHAINS_JSON } from "../../src/core/billing/default-chains.js";
import {
  ChainSchema,
  GetPricingResponseSchema,
  HoldStatus,
  SettlementStatus,
  UsageRowSchema,
} from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { CLI, childEnv, cliJson, runCli, tempDir, until } from "../helpers/process.js";

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

  it("serve fails closed: without a provider, a chain registry, a master secret or a public URL it names each and exits 1", async () => {
    const all = await runCli(["serve"], env);
    expect(all.code).toBe(1);
    for (const variable of [
      "TOLLGATE_ANTHROPIC_API_KEY",
      "TOLLGATE_CHAINS",
      "TOLLGATE_MASTER_SECRET",
      "TOLLGATE_PUBLIC_URL",
    ]) {
      expect(all.stderr).toContain(variable);
    }
    expect(all.stderr).toContain("tollgate dev");
    expect(all.stdout).not.toContain("tollgate ready");
    // Each one is named only while it is missing.
    const withProvider = await runCli(["serve"], {
      ...env,
      TOLLGATE_ANTHROPIC_API_KEY: "sk-test",
      TOLLGATE_MASTER_SECRET: "ab".repeat(32),
      TOLLGATE_PUBLIC_URL: "https://gw.example.com",
    });
    expect(withProvider.code).toBe(1);
    expect(withProvider.stderr).toContain("TOLLGATE_CHAINS");
    expect(withProvider.stderr).not.toContain("TOLLGATE_ANTHROPIC_API_KEY");
    expect(withProvider.stderr).not.toContain("TOLLGATE_MASTER_SECRET (");
    expect(withProvider.stderr).not.toContain("TOLLGATE_PUBLIC_URL");
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

/**
 * Writes a module hook that appends every URL the child's modules resolve to `log` (Node's
 * module hooks see each `import`, static or dynamic); returns the NODE_OPTIONS that load it.
 */
function recordImports(dir: string, log: string): string {
  const hooks = join(dir, "record-hooks.mjs");
  writeFileSync(
    hooks,
    `import { appendFileSync } from "node:fs";\n` +
      "export async function resolve(specifier, context, next) {\n" +
      "  const resolved = await next(specifier, context);\n" +
      `  appendFileSync(${JSON.stringify(log)}, resolved.url + "\\n");\n` +
      "  return resolved;\n}\n",
  );
  const register = join(dir, "record-register.mjs");
  writeFileSync(
    register,
    `import { register } from "node:module";\nregister(${JSON.stringify(pathToFileURL(hooks).href)});\n`,
  );
  return `--import ${pathToFileURL(register).href}`;
}

/** The packages (node_modules names) among the URLs a recorded run resolved. */
function packagesIn(log: string): Set<string> {
  const names = readFileSync(log, "utf8")
    .split("\n")
    .map((url) => /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)?.[1])
    .filter((name) => name !== undefined);
  return new Set(names);
}

/** Libraries an operator's command on a local database has no use for. */
const HEAVY =
  /^(viem|ox|@solana\/.*|litesvm|@foundry-rs\/.*|fastify|@fastify\/.*|undici|pg|ioredis|@connectrpc\/connect-node)$/;

describe("tollgate CLI start-up", () => {
  it("account list, balance, usage and key create load no chain library, HTTP server or provider client", async () => {
    const dir = tempDir();
    try {
      // Chains as a newcomer has them (dev chains on the public dev secret): the commands that
      // need the chain adapters still get them (addresses, the control below).
      const env = { TOLLGATE_DATA_DIR: join(dir.path, "data"), TOLLGATE_DEV_CHAINS: "auto" };
      const account = await cliJson<{ id: string }>(["account", "create"], env);
      const runs = [
        ["account", "list"],
        ["balance", "--account", account.id],
        ["usage", "--account", account.id],
        ["key", "create", "--account", account.id],
        ["addresses", "--account", account.id],
      ];
      const loaded: Set<string>[] = [];
      for (const [i, args] of runs.entries()) {
        const log = join(dir.path, `imports-${i}.log`);
        writeFileSync(log, "");
        const result = await runCli(args, { ...env, NODE_OPTIONS: recordImports(dir.path, log) });
        expect(result.code, result.stderr).toBe(0);
        loaded.push(packagesIn(log));
      }
      const control = loaded.pop()!;
      for (const packages of loaded) {
        expect(packages).toContain("better-sqlite3");
        expect([...packages].filter((name) => HEAVY.test(name))).toEqual([]);
      }
      // The recording sees chain libraries when a command loads them.
      expect(control).toContain("viem");
      expect(control).toContain("@solana/web3.js");
    } finally {
      dir.cleanup();
    }
  });

  it.each([
    [["account", "list"]],
    [["key", "list", "--account", "acct_x"]],
    [["balance", "--account", "acct_x"]],
    [["usage", "--account", "acct_x"]],
    [["deposits", "--account", "acct_x"]],
    [["withdrawals", "--account", "acct_x"]],
    [["settlement"]],
  ])("%j on a missing database names its path, exits 1 and creates nothing", async (args) => {
    const dir = tempDir();
    try {
      const data = join(dir.path, "data");
      const result = await runCli(args, { TOLLGATE_DATA_DIR: data });
      expect(result.code).toBe(1);
      expect(result.stdout).toBe("");
      expect(result.stderr).toBe(
        `tollgate: no database yet at ${join(data, "tollgate.db")}: nothing to show (the first command ` +
          "that writes, such as `tollgate account create`, or `tollgate dev` creates it; TOLLGATE_DATA_DIR " +
          "chooses the directory)\n",
      );
      expect(existsSync(data)).toBe(false);
    } finally {
      dir.cleanup();
    }
  });

  it("pricing on a missing database prints the catalog and creates nothing; a write creates the database", async () => {
    const dir = tempDir();
    try {
      const env = { TOLLGATE_DATA_DIR: join(dir.path, "data") };
      const pricing = await cliJson<{ textModels: unknown[] }>(["pricing"], env);
      expect(pricing.textModels.length).toBeGreaterThan(0);
      expect(existsSync(env.TOLLGATE_DATA_DIR)).toBe(false);
      const account = await cliJson<{ id: string }>(["account", "create"], env);
      expect(existsSync(join(env.TOLLGATE_DATA_DIR, "tollgate.db"))).toBe(true);
      expect(await cliJson<{ id: string }[]>(["account", "list"], env)).toEqual([
        expect.objectContaining({ id: account.id }),
      ]);
    } finally {
      dir.cleanup();
    }
  });
});

/** Paths of the object keys in `value` that are not lowerCamelCase. */
function nonCamelKeys(value: unknown, path = "$"): string[] {
  if (Array.isArray(value)) return value.flatMap((item, i) => nonCamelKeys(item, `${path}[${i}]`));
  if (value === null || typeof value !== "object") return [];
  return Object.entries(value).flatMap(([key, item]) => [
    ...(/^[a-z][a-zA-Z0-9]*$/.test(key) ? [] : [`${path}.${key}`]),
    ...nonCamelKeys(item, `${path}.${key}`),
  ]);
}

// Every command's --json over real dev chains (an anvil for base, its faucet): one naming
// convention, lowerCamelCase (proto JSON's), the hand-built documents included.
describe("tollgate --json, every command", () => {
  let dir: ReturnType<typeof tempDir>;
  let env: Record<string, string>;
  let stopChains: () => Promise<void>;

  beforeAll(async () => {
    dir = tempDir();
    const chains = JSON.parse(JSON.stringify(DEFAULT_CHAINS_JSON)) as { chains: { id: string }[] };
    chains.chains = chains.chains.filter((chain) => chain.id === "base");
    const registry = join(dir.path, "chains.json");
    writeFileSync(registry, JSON.stringify(chains));
    env = { TOLLGATE_DATA_DIR: join(dir.path, "data"), TOLLGATE_CHAINS: registry, TOLLGATE_DEV_CHAINS: "on" };
    const child = spawn(process.execPath, [CLI, "dev-chains"], {
      env: childEnv(env),
      stdio: ["ignore", "pipe", "pipe"],
    });
    const exited = new Promise((done) => child.on("exit", done));
    stopChains = async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      await exited;
    };
    let output = "";
    child.stdout.on("data", (chunk) => {
      output += chunk;
    });
    child.stderr.on("data", (chunk) => {
      output += chunk;
    });
    await until(
      "tollgate dev-chains to be ready",
      async () => {
        if (child.exitCode !== null) throw new Error(`dev-chains exited ${child.exitCode}: ${output}`);
        return output.includes("tollgate dev-chains ready") ? true : undefined;
      },
      30_000,
    );
  }, 40_000);

  afterAll(async () => {
    await stopChains?.();
    dir?.cleanup();
  });

  it("prints lowerCamelCase keys only, faucet's txHash included", async () => {
    const account = await cliJson<{ id: string }>(["account", "create", "--name", "json"], env);
    const key = await cliJson<{ id: string }>(["key", "create", "--account", account.id], env);
    const id = ["--account", account.id];
    const faucet = await cliJson(["faucet", ...id, "--chain", "base", "--amount", "1"], env);
    expect(Object.keys(faucet).sort()).toEqual(["address", "amount", "chain", "txHash"]);
    expect(faucet.txHash).toMatch(/^0x[0-9a-f]{64}$/);
    const documents = [
      account,
      key,
      faucet,
      await cliJson(["account", "list"], env),
      await cliJson(["key", "list", ...id], env),
      await cliJson(["credit", ...id, "--chain", "base", "--amount", "2", "--reason", "json"], env),
      await cliJson(["balance", ...id], env),
      await cliJson(["pricing"], env),
      await cliJson(["addresses", ...id], env),
      await cliJson(["deposits", ...id], env),
      await cliJson(["withdrawals", ...id], env),
      await cliJson(["usage", ...id], env),
      await cliJson(["settlement"], env),
      await cliJson(["key", "revoke", key.id], env),
      await cliJson(["account", "suspend", account.id, "--reason", "json"], env),
      await cliJson(["account", "reactivate", account.id], env),
    ];
    expect(documents.flatMap((document) => nonCamelKeys(document))).toEqual([]);
  });

  it("refuses a withdrawal of operator credit in a withdrawal's words", async () => {
    const account = await cliJson<{ id: string }>(["account", "create"], env);
    const id = ["--account", account.id];
    await cliJson(["credit", ...id, "--chain", "base", "--amount", "5", "--reason", "operator credit"], env);
    const to = "0x000000000000000000000000000000000000dEaD";
    const result = await runCli(["withdraw", ...id, "--chain", "base", "--amount", "1.5", "--to", to], env);
    expect(result.code).toBe(1);
    expect(result.stdout).toBe("");
    expect(result.stderr).toMatch(
      /^tollgate: Not enough to withdraw 1\.500000 USDC on base: .* 0\.000000 USDC may leave it now .*operator credit cannot be withdrawn\)\. .*nothing can be withdrawn now\.\n$/,
    );
    expect(result.stderr).not.toContain("this call needs");
    expect(result.stderr).not.toContain("[failed_precondition]");
    const balance = await cliJson<{ balances: { chain: { id: string }; available?: string }[] }>(
      ["balance", ...id],
      env,
    );
    expect(balance.balances.find((b) => b.chain.id === "base")?.available).toBe("5000000");
    const db = openDatabase(env.TOLLGATE_DATA_DIR!);
    try {
      expect(auditLedger(db)).toEqual([]);
    } finally {
      db.close();
    }
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
