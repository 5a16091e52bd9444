#!/usr/bin/env node
import { parseArgs } from "node:util";
import { createClient } from "@connectrpc/connect";
import { ConfigError, loadConfig } from "../config.js";
import { runDevUpstream } from "../dev/cli/dev-upstream-command.js";
import { AuthService } from "../gen/tollgate/auth/v1/auth_pb.js";
import { BillingService } from "../gen/tollgate/billing/v1/billing_pb.js";
import { runWorker, serve } from "../main.js";
import { openRuntime } from "../runtime.js";
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
      await runDevUpstream(argv.slice(1));
      return -1;
    }
    const config = loadConfig();
    if (group === "serve" || group === "dev") {
      if (argv.length > 1)
        throw new UsageError(`${group} takes no arguments (configure it with TOLLGATE_* variables)`);
      await serve(config, group);
      return -1;
    }
    if (group === "worker") {
      if (argv.length > 1)
        throw new UsageError("worker takes no arguments (configure it with TOLLGATE_* variables)");
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
    const runtime = await openRuntime(config, { mode: "operator" });
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
  const message = error instanceof Error ? error.message : String(error);
  process.stderr.write(`tollgate: ${message}\n`);
  return 1;
}

const code = await runCli(process.argv.slice(2));
if (code >= 0) process.exitCode = code;
