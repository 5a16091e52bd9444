#!/usr/bin/env node
import { parseArgs } from "node:util";
import { createClient, createRouterTransport, type Transport } from "@connectrpc/connect";
import { remoteCoreTransport } from "../app.js";
import { type Config, ConfigError, loadConfig } from "../config.js";
import { operatorCallerResolver } from "../core/caller.js";
import { createCore } from "../core/core.js";
import { AuthService } from "../gen/tollgate/auth/v1/auth_pb.js";
import { BillingService } from "../gen/tollgate/billing/v1/billing_pb.js";
import { serve } from "../main.js";
import { openDatabase } from "../store/database.js";
import { accountCommands, keyCommands } from "./auth-commands.js";
import { balanceCommand, creditCommand } from "./billing-commands.js";
import { type Command, type CommandContext, UsageError } from "./command.js";
import { runDevUpstream } from "./dev-upstream-command.js";

const USAGE = `Usage: tollgate <command> [options]

Commands:
  serve                                   run the gateway (facade + core, or facade-only with TOLLGATE_CORE_URL)
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
    if (group === "serve") {
      if (argv.length > 1)
        throw new UsageError(`serve takes no arguments (configure it with TOLLGATE_* variables)`);
      await serve(config);
      return -1;
    }
    const topLevel = topLevelCommands[group];
    const command = topLevel ?? commands[group]?.[action ?? ""];
    if (command === undefined) throw new UsageError(`unknown command: ${argv.slice(0, 2).join(" ")}`);
    const parsed = parse(command, argv.slice(topLevel === undefined ? 2 : 1));
    const { transport, close } = operatorTransport(config);
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
      close();
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

/**
 * The operator's way into the core: over gRPC with the operator token when a remote core is
 * configured, else the core built in-process over the local database, as the operator.
 */
function operatorTransport(config: Config): { transport: Transport; close: () => void } {
  if (config.coreUrl !== undefined) {
    return { transport: remoteCoreTransport(config.coreUrl, config.adminToken), close: () => {} };
  }
  const db = openDatabase(config.dataDir);
  const core = createCore({ db, chains: config.chains, catalog: config.catalog });
  const transport = createRouterTransport(core.routes, {
    router: core.routerOptionsFor(operatorCallerResolver),
  });
  return { transport, close: () => db.close() };
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
