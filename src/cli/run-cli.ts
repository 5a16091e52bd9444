import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { type Config, ConfigError, loadConfig } from "../config/config.js";
import { AuthService } from "../gen/tollgate/auth/v1/auth_pb.js";
import { BillingService } from "../gen/tollgate/billing/v1/billing_pb.js";
import { openRuntime } from "../runtime/runtime.js";
import { DATABASE_FILE } from "../store/sqlite/database.js";
import { accountCommands, keyCommands } from "./auth-commands.js";
import { balanceCommand, creditCommand } from "./billing-commands.js";
import {
  addressesCommand,
  depositsCommand,
  faucetCommand,
  settlementCommand,
  usageCommand,
  withdrawalsCommand,
  withdrawCommand,
} from "./chain-commands.js";
import { type Command, type CommandContext, UsageError } from "./command.js";
import { pricingCommand } from "./pricing-command.js";
import { exitWithLauncher, relaunch, semiSpaceFlags } from "./semi-space.js";
import { x402Commands } from "./x402-commands.js";

const USAGE = `Usage: tollgate <command> [options]

Commands:
  serve                                   run the gateway in production (facade + core, or facade-only with
                                          TOLLGATE_CORE_URL); refuses to start without a provider, a chain
                                          registry and a master secret
  worker                                  run the deposit watchers and settlement of every configured chain
                                          (beside serve, on the same database); refuses to start without a
                                          chain registry and a master secret
  dev                                     run the gateway on local stand-ins: the dev provider, dev chains
                                          and faucet, a public dev secret, the chains worker in a thread
                                          (what make run runs)
  account create [--name NAME]            create an account
  account list                            list accounts
  account suspend ID [--reason TEXT]      suspend an account (its keys stop working at once)
  account reactivate ID                   reactivate a suspended account
  key create --account ID [--name NAME]   create an API key (the secret is shown once)
  key list --account ID                   list an account's keys (never secrets)
  key revoke KEY_ID                       revoke a key (it fails on its very next request)
  key cap --account ID --chain CHAIN [--key KEY_ID] [--daily X] [--monthly X] [--lifetime X]
                                          cap what the account (or one key) may spend on a chain per
                                          UTC day, month or ever (exact decimals; none clears a cap)
  key caps --account ID                   an account's spend caps and what each period has spent
  credit --account ID --chain CHAIN --amount 12.50 --reason TEXT [--credit-id ID]
                                          credit an account by hand, in the chain asset's units
                                          (exact decimals; --credit-id makes a retry credit once)
  balance --account ID                    an account's balances on every chain
  pricing                                 the price catalog: text models (fast mode, residency),
                                          server-tool fees, images, chains
  addresses --account ID                  an account's deposit address on every chain
  deposits --account ID                   deposits seen (pending) and credited (at finality)
  withdraw --account ID --chain CHAIN --amount 1.50 --to ADDRESS [--withdrawal-id ID]
                                          send deposit-backed funds onchain (exact decimals)
  withdrawals --account ID                an account's withdrawals and their transactions
  usage --account ID [--limit N]          an account's calls, each with its charge lines, and
                                          their onchain settlement
  settlement                              the settlement backlog of every chain
  x402 clear --payer ADDRESS              take a keyless x402 payer's calls again after one of its
                                          streams went uncollected (settle what it owed first)
  migrate-store --to POSTGRES_URL         copy the SQLite ledger to an empty PostgreSQL, verify it (gateway stopped)
  faucet --account ID --chain CHAIN --amount 100
                                          mint dev-chain test stablecoin to the account's deposit
                                          address (dev chains only)
  dev-chains                              run local chains for the registry (anvil + test stablecoin;
                                          Solana on litesvm), recorded in $TOLLGATE_DATA_DIR/dev-chains.json
  dev-upstream [--host H] [--port P] [--api-key K]
                                          run a local stand-in provider (Anthropic wire format,
                                          generated labelled text; Gemini and OpenAI image formats,
                                          generated labelled images; not a model; default 127.0.0.1:8789)

Options:
  --json        machine-readable output
  -h, --help    this message

The CLI works on the database in TOLLGATE_DATA_DIR (default ./data), or, when TOLLGATE_CORE_URL
is set, on that core over gRPC with TOLLGATE_ADMIN_TOKEN as the operator token.
`;

const commands: Record<string, Record<string, Command>> = {
  account: accountCommands,
  key: keyCommands,
  x402: x402Commands,
};

/** Commands without a sub-command. */
const topLevelCommands: Record<string, Command> = {
  credit: creditCommand,
  balance: balanceCommand,
  pricing: pricingCommand,
  addresses: addressesCommand,
  deposits: depositsCommand,
  withdraw: withdrawCommand,
  withdrawals: withdrawalsCommand,
  usage: usageCommand,
  settlement: settlementCommand,
  faucet: faucetCommand,
};

/** Runs the CLI with `argv` (without node and script); resolves to the exit code. */
export async function runCli(argv: readonly string[]): Promise<number> {
  const [group, action] = argv;
  if (group === undefined || group === "help" || group === "-h" || group === "--help") {
    process.stdout.write(USAGE);
    return group === undefined ? 2 : 0;
  }
  try {
    // Before loadConfig: the stand-in needs none of the gateway's configuration.
    if (group === "dev-upstream") {
      const { runDevUpstream } = await import("../dev/cli/dev-upstream-command.js");
      await runDevUpstream(argv.slice(1));
      return -1;
    }
    const config = loadConfig();
    // The gateway's modules (Fastify, the facade, the provider clients) are loaded by the
    // commands that run them: an operator's command starts without them.
    if (group === "serve" || group === "dev") {
      if (argv.length > 1)
        throw new UsageError(`${group} takes no arguments (configure it with TOLLGATE_* variables)`);
      // serve runs with its own semi-space unless the operator chose one (docs/performance.md §21).
      const flags = group === "serve" ? semiSpaceFlags(process.env, process.execArgv) : undefined;
      if (flags !== undefined) return await relaunch(flags);
      exitWithLauncher();
      const { serve } = await import("../main.js");
      await serve(config, group);
      return -1;
    }
    if (group === "worker") {
      if (argv.length > 1)
        throw new UsageError("worker takes no arguments (configure it with TOLLGATE_* variables)");
      const { runWorker } = await import("../main.js");
      await runWorker(config);
      return -1;
    }
    if (group === "dev-chains") {
      // Loaded on demand, like the chains runtime: commands that touch no chain start fast.
      const { runDevChains } = await import("../dev/cli/dev-chains-command.js");
      await runDevChains(argv.slice(1), config);
      return -1;
    }
    if (group === "migrate-store") {
      // On the database files themselves, with the gateway stopped: no runtime, no core.
      const { runMigrateStore } = await import("./migrate-store-command.js");
      return await runMigrateStore(argv.slice(1), config);
    }
    const topLevel = topLevelCommands[group];
    const command = topLevel ?? commands[group]?.[action ?? ""];
    if (command === undefined) throw new UsageError(`unknown command: ${argv.slice(0, 2).join(" ")}`);
    const parsed = parse(command, argv.slice(topLevel === undefined ? 2 : 1));
    // The operator's way into the core: over gRPC with the operator token when a remote core is
    // configured, else the core built in-process over the local database, as the operator.
    const runtime = await openRuntime(databaseFor(command, config), {
      mode: "operator",
      chainAdapters: command.chains === true,
    });
    const transport = runtime.transport!;
    try {
      const context: CommandContext = {
        auth: createClient(AuthService, transport),
        billing: createClient(BillingService, transport),
        json: parsed.values.json === true,
        out: (text) => process.stdout.write(text.endsWith("\n") ? text : `${text}\n`),
      };
      await command.run(parsed, context);
      return 0;
    } finally {
      await runtime.close();
    }
  } catch (error) {
    return reportError(error);
  }
}

/**
 * The configuration a command's runtime opens, so that a command that only reads never creates
 * the database: on SQLite, a missing database file is refused for `reads` (naming its path: an
 * empty answer would hide a wrong TOLLGATE_DATA_DIR) and stood in for by an empty in-memory one
 * for `catalog`. A remote core or PostgreSQL is used as configured.
 */
function databaseFor(command: Command, config: Config): Config {
  if (command.database === "writes" || config.coreUrl !== undefined || config.databaseUrl !== undefined) {
    return config;
  }
  const path = resolve(config.dataDir, DATABASE_FILE);
  if (existsSync(path)) return config;
  if (command.database === "catalog") return { ...config, dataDir: ":memory:" };
  throw new Error(
    `no database yet at ${path}: nothing to show (the first command that writes, such as ` +
      "`tollgate account create`, or `tollgate dev` creates it; TOLLGATE_DATA_DIR chooses the directory)",
  );
}

function parse(command: Command, args: readonly string[]) {
  try {
    return parseArgs({
      args: [...args],
      options: { ...command.options, json: { type: "boolean" } },
      allowPositionals: command.positionals > 0,
      strict: true,
    });
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error));
  }
}

function reportError(error: unknown): number {
  if (error instanceof UsageError) {
    process.stderr.write(`tollgate: ${error.message}\n\n${USAGE}`);
    return 2;
  }
  if (error instanceof ConfigError) {
    process.stderr.write(`tollgate: invalid configuration: ${error.message}\n`);
    return 2;
  }
  // The core's own words, without Connect's "[failed_precondition]" code prefix: its messages
  // say what was refused and why (a refused withdrawal names what may leave the balance).
  const message =
    error instanceof ConnectError ? error.rawMessage : error instanceof Error ? error.message : String(error);
  process.stderr.write(`tollgate: ${message}\n`);
  // A remote core refusing the CLI is refusing its operator token: say which variable sets it.
  if (error instanceof ConnectError && error.code === Code.Unauthenticated && process.env.TOLLGATE_CORE_URL) {
    process.stderr.write(
      "tollgate: the core at TOLLGATE_CORE_URL refused this command: set TOLLGATE_ADMIN_TOKEN to its operator token\n",
    );
  }
  return 1;
}
