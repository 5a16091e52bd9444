import { type JsonValue, toJson } from "@bufbuild/protobuf";
import { type Timestamp, timestampDate } from "@bufbuild/protobuf/wkt";
import {
  type Account,
  AccountSchema,
  AccountStatus,
  type ApiKey,
  ApiKeySchema,
  KeyStatus,
} from "../gen/tollgate/auth/v1/auth_pb.js";
import { capCommand, capsCommand } from "./cap-commands.js";
import { type Command, type CommandContext, option, positional, table } from "./command.js";

const accountJson = (a: Account): JsonValue => toJson(AccountSchema, a);
const keyJson = (k: ApiKey): JsonValue => toJson(ApiKeySchema, k);

function when(ts: Timestamp | undefined): string {
  return ts === undefined ? "-" : timestampDate(ts).toISOString();
}

function accountStatus(status: AccountStatus): string {
  return status === AccountStatus.SUSPENDED ? "suspended" : "active";
}

function printAccounts(context: CommandContext, accounts: readonly Account[]): void {
  context.out(
    table(
      ["ID", "NAME", "STATUS", "CREATED"],
      accounts.map((a) => [a.id, a.name, accountStatus(a.status), when(a.createdAt)]),
    ),
  );
}

function printAccount(context: CommandContext, verb: string, account: Account | undefined): void {
  if (account === undefined) throw new Error("the core returned no account");
  context.out(
    context.json
      ? JSON.stringify(accountJson(account))
      : `${verb} account ${account.id} (${accountStatus(account.status)})`,
  );
}

/** `tollgate account …` */
export const accountCommands: Record<string, Command> = {
  create: {
    options: { name: { type: "string" } },
    positionals: 0,
    database: "writes",
    async run(args, context) {
      const { account } = await context.auth.createAccount({ name: option(args, "name") });
      printAccount(context, "Created", account);
    },
  },
  list: {
    options: {},
    positionals: 0,
    database: "reads",
    async run(_args, context) {
      const accounts: Account[] = [];
      let pageToken = "";
      do {
        const page = await context.auth.listAccounts({ pageSize: 1000, pageToken });
        accounts.push(...page.accounts);
        pageToken = page.nextPageToken;
      } while (pageToken !== "");
      if (context.json) return context.out(JSON.stringify(accounts.map(accountJson)));
      printAccounts(context, accounts);
    },
  },
  suspend: {
    options: { reason: { type: "string" } },
    positionals: 1,
    database: "writes",
    async run(args, context) {
      const { account } = await context.auth.suspendAccount({
        accountId: positional(args, "account id"),
        reason: option(args, "reason"),
      });
      printAccount(context, "Suspended", account);
    },
  },
  reactivate: {
    options: {},
    positionals: 1,
    database: "writes",
    async run(args, context) {
      const { account } = await context.auth.reactivateAccount({ accountId: positional(args, "account id") });
      printAccount(context, "Reactivated", account);
    },
  },
};

/** `tollgate key …` */
export const keyCommands: Record<string, Command> = {
  cap: capCommand,
  caps: capsCommand,
  create: {
    options: { account: { type: "string" }, name: { type: "string" } },
    positionals: 0,
    database: "writes",
    async run(args, context) {
      const { key, secret } = await context.auth.createKey({
        accountId: option(args, "account", true),
        name: option(args, "name"),
      });
      if (key === undefined) throw new Error("the core returned no key");
      if (context.json) return context.out(JSON.stringify({ ...(keyJson(key) as object), secret }));
      context.out(
        `Created key ${key.id} for account ${key.accountId}.\n\n  ${secret}\n\n` +
          "Store it now: this is the only time the secret is shown.",
      );
    },
  },
  list: {
    options: { account: { type: "string" } },
    positionals: 0,
    database: "reads",
    async run(args, context) {
      const { keys } = await context.auth.listKeys({ accountId: option(args, "account", true) });
      if (context.json) return context.out(JSON.stringify(keys.map(keyJson)));
      context.out(
        table(
          ["ID", "NAME", "PREFIX", "STATUS", "CREATED", "LAST USED"],
          keys.map((k) => [
            k.id,
            k.name,
            `${k.prefix}…`,
            k.status === KeyStatus.REVOKED ? "revoked" : "active",
            when(k.createdAt),
            when(k.lastUsedAt),
          ]),
        ),
      );
    },
  },
  revoke: {
    options: {},
    positionals: 1,
    database: "writes",
    async run(args, context) {
      const { key } = await context.auth.revokeKey({ keyId: positional(args, "key id") });
      if (key === undefined) throw new Error("the core returned no key");
      if (context.json) return context.out(JSON.stringify(keyJson(key)));
      context.out(`Revoked key ${key.id} (${key.prefix}…).`);
    },
  },
};
