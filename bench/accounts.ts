/**
 * Creates many funded accounts in one process, for the store phase's many-account deployments
 * (bench/run.ts). It does what `tollgate account create`, `key create` and `credit` do, the same
 * way (the operator runtime over the TOLLGATE_* configuration in its environment, the Auth and
 * Billing services through their clients), but in one process: three CLI processes per account
 * cost about 2.5 s of start-up on this machine, 64 accounts over two minutes.
 *
 *   node dist/bench/accounts.js COUNT AMOUNT CHAIN
 *
 * Prints one JSON line: `{"keys": [secret, ...]}`, one key per account, in creation order.
 */
import { createClient } from "@connectrpc/connect";
import { loadConfig } from "../src/config/config.js";
import { ledgerDecimals, parseDecimalAmount } from "../src/core/billing/money.js";
import { AuthService } from "../src/gen/tollgate/auth/v1/auth_pb.js";
import { BillingService } from "../src/gen/tollgate/billing/v1/billing_pb.js";
import { openRuntime } from "../src/runtime/runtime.js";

const [countText = "", amountText = "", chainId = ""] = process.argv.slice(2);
const count = Number(countText);
if (!Number.isInteger(count) || count < 1 || amountText === "" || chainId === "") {
  console.error("usage: accounts.js COUNT AMOUNT CHAIN");
  process.exit(2);
}

const runtime = await openRuntime(loadConfig(), { mode: "operator", chainAdapters: false });
try {
  const auth = createClient(AuthService, runtime.transport!);
  const billing = createClient(BillingService, runtime.transport!);
  const { chains } = await billing.getPricing({});
  const chain = chains.find((c) => c.id === chainId);
  if (chain === undefined) throw new Error(`no chain ${chainId} in the registry`);
  const amount = parseDecimalAmount(amountText, ledgerDecimals(chain.asset?.decimals ?? 0));
  const keys: string[] = [];
  for (let i = 0; i < count; i++) {
    const { account } = await auth.createAccount({ name: `bench-${i}` });
    if (account === undefined) throw new Error("the core returned no account");
    const { secret } = await auth.createKey({ accountId: account.id, name: "bench" });
    await billing.credit({ accountId: account.id, chain: chain.id, amount, reason: "bench" });
    keys.push(secret);
  }
  process.stdout.write(`${JSON.stringify({ keys })}\n`);
} finally {
  await runtime.close();
}
