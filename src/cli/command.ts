import type { ParseArgsConfig } from "node:util";
import type { Client } from "@connectrpc/connect";
import type { AuthService } from "../gen/tollgate/auth/v1/auth_pb.js";
import type { BillingService } from "../gen/tollgate/billing/v1/billing_pb.js";

/** Wrong command-line arguments: reported with the usage text and exit code 2. */
export class UsageError extends Error {}

/** What a command runs against. */
export interface CommandContext {
  readonly auth: Client<typeof AuthService>;
  readonly billing: Client<typeof BillingService>;
  /** `--json`: print one JSON document instead of human text. */
  readonly json: boolean;
  readonly out: (text: string) => void;
}

/** Parsed arguments of one command. */
export interface ParsedArgs {
  readonly values: Record<string, string | boolean | (string | boolean)[] | undefined>;
  readonly positionals: string[];
}

/**
 * What a command does with the local database (SQLite in the data directory): `writes` may create
 * it; `reads` refuses a missing one, naming its path, rather than create it; `catalog` reads
 * none of it and runs over an empty in-memory one when the file is missing.
 */
export type DatabaseUse = "writes" | "reads" | "catalog";

/** One CLI command: its options, how many positionals it takes, and what it does. */
export interface Command {
  readonly options: NonNullable<ParseArgsConfig["options"]>;
  readonly positionals: number;
  readonly database: DatabaseUse;
  /**
   * Uses the chain adapters (deposit addresses, address checks, treasury addresses). Only these
   * commands load the chain libraries (viem, @solana/*): the others start without them.
   */
  readonly chains?: true;
  run(args: ParsedArgs, context: CommandContext): Promise<void>;
}

/** The single positional argument a command requires, named for the usage message. */
export function positional(args: ParsedArgs, name: string): string {
  if (args.positionals.length !== 1) throw new UsageError(`expected exactly one ${name}`);
  return args.positionals[0]!;
}

/** A string option's value; `required` makes its absence a usage error. */
export function option(args: ParsedArgs, name: string, required = false): string {
  const value = args.values[name];
  if (typeof value === "string" && value !== "") return value;
  if (required) throw new UsageError(`--${name} is required`);
  return "";
}

/** Formats rows as an aligned text table with a header. */
export function table(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join("  ")
      .trimEnd();
  return [line(headers), ...rows.map(line)].join("\n");
}
