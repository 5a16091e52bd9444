import { type Client, Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";
import type { Redis } from "ioredis";
import { createPublicClient, type Hash, http } from "viem";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { operatorCallerResolver } from "../../src/core/caller.js";
import type { Core } from "../../src/core/core.js";
import { errorInfo } from "../../src/core/errors.js";
import { SYSTEM_WITHDRAWAL_FEES, SYSTEM_WITHDRAWALS } from "../../src/core/ports/ledger.js";
import type { RateLimiter } from "../../src/core/ports/rate-limits.js";
import { AuthService } from "../../src/gen/tollgate/auth/v1/auth_pb.js";
import {
  BillingService,
  TransferStatus,
  type WithdrawResponse,
} from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { memoryRateLimiter } from "../../src/limits/memory.js";
import { connectRedis, REDIS_KEY_PREFIX, redisRateLimiter } from "../../src/limits/redis.js";
import { type OnchainFixture, onchainFixture } from "../chains/evm/onchain-fixture.js";
import { coreOver } from "../helpers/core.js";
import { type RedisServer, startRedis } from "../helpers/redis.js";

// Issue 18, item 7: the treasury signs and pays the gas of every withdrawal's transfer, so an
// account must not make it pay for dust, for free, or without end. A withdrawal sends at least
// its chain's minimum, its chain's network fee is debited with it (to system:withdrawal-fees, in
// the same transaction), and an account's own callers make at most N per hour, counted behind
// the rate-limit port (in memory, or in Redis across hosts). On a real anvil chain with the real
// chains runtime, core and SQLite store; every test ends with the ledger audit.

/** The shipped EVM terms (the fixture's chain uses the family defaults): $1 minimum, $0.05 fee. */
const MINIMUM = 1_000_000n;
const FEE = 50_000n;
const PER_HOUR = 3;
const TO = "0x1111111111111111111111111111111111111111";

let f: OnchainFixture;
afterEach(async () => {
  if (f === undefined) return;
  f.expectSoundLedger();
  await f.close();
});

/** A second core over the fixture's store whose withdrawals are rated by `limit` (a gateway host). */
function host(limit: RateLimiter): Core {
  return coreOver(f.db, {
    chains: f.core.billing.chains,
    chainDirectory: f.runtime,
    withdrawalLimit: limit,
  });
}

/** What a test asks to withdraw (to {@link TO} on base). */
interface Ask {
  readonly amount: bigint;
  readonly withdrawalId?: string;
}

/** Billing as the holder of a key of `accountId` (rated), created through the operator. */
async function keyHolder(core: Core, accountId: string): Promise<(req: Ask) => Promise<WithdrawResponse>> {
  const operator = createRouterTransport(core.routes, {
    router: core.routerOptionsFor(operatorCallerResolver),
  });
  const { secret } = await createClient(AuthService, operator).createKey({ accountId });
  const billing: Client<typeof BillingService> = createClient(
    BillingService,
    createRouterTransport(core.routes, { router: core.routerOptions }),
  );
  return (req) =>
    billing.withdraw({ chain: "base", toAddress: TO, ...req }, { headers: { "x-api-key": secret } });
}

/** Funds an account onchain and waits for the watcher to credit it. */
async function fund(accountId: string, amount: bigint): Promise<string> {
  const address = await f.runtime.depositAddress("base", accountId);
  await f.dev.mintTo(address, amount);
  await f.dev.mine(2);
  await f.runtime.scanOnce();
  return address;
}

/** Runs settlement passes until every transfer is confirmed. */
async function settleAll(): Promise<void> {
  for (let i = 0; i < 8; i++) {
    await f.runtime.settleOnce();
    await f.dev.mine(2);
    await new Promise((resolve) => setTimeout(resolve, 60));
  }
}

/** What a refused withdrawal threw, with its reason. */
async function refusal(
  attempt: Promise<unknown>,
): Promise<{ code: Code; reason: string; error: ConnectError }> {
  const error = await attempt.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ConnectError);
  const connect = error as ConnectError;
  return { code: connect.code, reason: errorInfo(connect)?.reason ?? "", error: connect };
}

function rows(table: string): number {
  return (f.db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;
}

function systemBalance(account: string): bigint {
  const row = f.db
    .prepare(
      "SELECT credits_posted - debits_posted AS net FROM ledger_balances WHERE account = ? AND chain = 'base'",
    )
    .safeIntegers(true)
    .get(account) as { net: bigint } | undefined;
  return row?.net ?? 0n;
}

describe("withdrawals cannot drain the treasury's gas", () => {
  it("a withdrawal below the chain's minimum is refused in words about withdrawals, with nothing written and no rate used", async () => {
    f = await onchainFixture({ confirmations: 1, mode: "per-call" });
    const core = host(memoryRateLimiter("withdrawals", PER_HOUR, 3_600_000));
    const account = f.account();
    await fund(account, 5_000_000n);
    const withdraw = await keyHolder(core, account);
    const entries = rows("ledger_entries");
    for (let i = 0; i < PER_HOUR + 2; i++) {
      const { code, reason, error } = await refusal(withdraw({ amount: MINIMUM - 1n }));
      expect(code).toBe(Code.InvalidArgument);
      expect(reason).toBe("WITHDRAWAL_BELOW_MINIMUM");
      expect(error.rawMessage).toBe(
        "amount: a withdrawal on base sends at least 1.000000 USDC; 0.999999 USDC was asked.",
      );
      expect(errorInfo(error)?.metadata).toMatchObject({
        field: "amount",
        minimum: "1000000",
        chain: "base",
      });
    }
    expect(rows("ledger_entries")).toBe(entries);
    expect(rows("chain_transfers")).toBe(0);
    // Refused input used none of the hour's withdrawals: the minimum itself goes through.
    await withdraw({ amount: MINIMUM });
    expect(rows("chain_transfers")).toBe(1);
  });

  it("the network fee is debited with the amount in one transaction; amount + fee must fit; the address receives exactly the amount", async () => {
    f = await onchainFixture({ confirmations: 1, mode: "per-call" });
    const adapter = f.runtime.adapter("base")!;
    const account = f.account();
    const address = await fund(account, 3_000_000n);
    const withdraw = await keyHolder(host(memoryRateLimiter("withdrawals", PER_HOUR, 3_600_000)), account);

    // 2.95 + 0.05 leaves exactly the 3.00 deposited; 2.950001 is one unit too many.
    const over = await refusal(withdraw({ amount: 2_950_001n }));
    expect(over.code).toBe(Code.FailedPrecondition);
    expect(over.reason).toBe("INSUFFICIENT_FUNDS");
    expect(over.error.rawMessage).toBe(
      "Not enough to withdraw 2.950001 USDC on base: with the 0.050000 USDC network fee, 3.000001 USDC " +
        "would leave the balance, and 3.000000 USDC may leave it now (funds that are spendable and backed " +
        "by deposits; operator credit cannot be withdrawn). At most 2.950000 USDC can be withdrawn.",
    );
    expect(errorInfo(over.error)?.metadata).toMatchObject({
      needed: "3000001",
      available: "3000000",
      fee: "50000",
    });
    expect(rows("chain_transfers")).toBe(0);

    const written = await withdraw({ amount: 2_950_000n, withdrawalId: "all" });
    const withdrawal = written.withdrawal!;
    const balance = written.balance;
    expect(withdrawal).toMatchObject({ amount: 2_950_000n, fee: FEE });
    expect(balance).toMatchObject({ available: 0n, debitsPosted: 3_000_000n });
    // One transaction wrote both entries, each to its own system account.
    const entries = f.db
      .prepare(
        "SELECT id, debit_account, credit_account, amount FROM ledger_entries WHERE kind = 'withdrawal'",
      )
      .safeIntegers(true)
      .all();
    expect(entries).toEqual([
      {
        id: `${withdrawal.id}/withdrawal`,
        debit_account: account,
        credit_account: SYSTEM_WITHDRAWALS,
        amount: 2_950_000n,
      },
      {
        id: `${withdrawal.id}/fee`,
        debit_account: account,
        credit_account: SYSTEM_WITHDRAWAL_FEES,
        amount: FEE,
      },
    ]);
    expect(systemBalance(SYSTEM_WITHDRAWAL_FEES)).toBe(FEE);

    await settleAll();
    const { withdrawals } = await f.billing.listWithdrawals({ accountId: account });
    expect(withdrawals[0]).toMatchObject({ status: TransferStatus.CONFIRMED, fee: FEE });
    expect(await adapter.balanceOf(TO)).toBe(2_950_000n);
    // The fee's tokens stay at the deposit address, committed: nothing is left to withdraw.
    expect(await adapter.balanceOf(address)).toBe(FEE);
    expect((await refusal(withdraw({ amount: MINIMUM }))).reason).toBe("INSUFFICIENT_FUNDS");

    // What the treasury paid for it: one transaction, within the 120,000 gas the chain's health
    // check budgets per transfer.
    const rpc = createPublicClient({ transport: http(f.dev.rpcUrl) });
    const receipt = await rpc.getTransactionReceipt({ hash: withdrawals[0]!.txHash as Hash });
    expect(receipt.from.toLowerCase()).toBe(adapter.treasuryAddress().toLowerCase());
    expect(receipt.gasUsed).toBeLessThan(120_000n);
    console.log(
      `withdrawal transfer: ${receipt.gasUsed} gas at ${receipt.effectiveGasPrice} wei/gas (anvil), ` +
        `fee charged ${FEE} ledger units`,
    );
  });

  it("an account's own callers make at most N withdrawals an hour; a retry of an existing id is answered; other accounts and the operator are not held back", async () => {
    f = await onchainFixture({ confirmations: 1, mode: "per-call" });
    const core = host(memoryRateLimiter("withdrawals", PER_HOUR, 3_600_000));
    const [alice, bob] = [f.account(), f.account()];
    await fund(alice, 20_000_000n);
    await fund(bob, 5_000_000n);
    const aliceWithdraws = await keyHolder(core, alice);
    for (let i = 0; i < PER_HOUR; i++) await aliceWithdraws({ amount: MINIMUM, withdrawalId: `w${i}` });
    const entries = rows("ledger_entries");
    const limited = await refusal(aliceWithdraws({ amount: MINIMUM, withdrawalId: "one-more" }));
    expect(limited.code).toBe(Code.ResourceExhausted);
    expect(limited.reason).toBe("WITHDRAWAL_RATE_LIMITED");
    expect(limited.error.rawMessage).toMatch(
      /^This account may make at most 3 withdrawals per hour and has made them; the next one may be made in \d+ s\.$/,
    );
    const retryAfter = Number(errorInfo(limited.error)?.metadata.retry_after);
    expect(retryAfter).toBeGreaterThan(3_500);
    expect(retryAfter).toBeLessThanOrEqual(3_600);
    expect(rows("ledger_entries")).toBe(entries);
    // A client retrying a withdrawal it already made gets it back: nothing new is written or charged.
    const retried = await aliceWithdraws({ amount: MINIMUM, withdrawalId: "w1" });
    expect(retried.withdrawal?.fee).toBe(FEE);
    expect(rows("ledger_entries")).toBe(entries);
    // Another account has its own count; the operator, moving money on alice's behalf, has none.
    await (await keyHolder(core, bob))({ amount: MINIMUM });
    const operator = createClient(
      BillingService,
      createRouterTransport(core.routes, { router: core.routerOptionsFor(operatorCallerResolver) }),
    );
    await operator.withdraw({ accountId: alice, chain: "base", amount: MINIMUM, toAddress: TO });
    expect(rows("chain_transfers")).toBe(PER_HOUR + 2);
    expect(systemBalance(SYSTEM_WITHDRAWAL_FEES)).toBe(FEE * BigInt(PER_HOUR + 2));
  });

  it("an account trying to drain the treasury gets at most N transfers an hour, each paid by its fee", async () => {
    f = await onchainFixture({ confirmations: 1, mode: "per-call" });
    const account = f.account();
    await fund(account, 100_000_000n);
    const withdraw = await keyHolder(host(memoryRateLimiter("withdrawals", PER_HOUR, 3_600_000)), account);
    const outcomes: string[] = [];
    // Fifty attempts of every kind at once: dust, the minimum, and what is left.
    await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        withdraw({ amount: [1n, MINIMUM, 90_000_000n][i % 3]! }).then(
          () => outcomes.push("written"),
          (e: unknown) => outcomes.push(errorInfo(e as ConnectError)?.reason ?? String(e)),
        ),
      ),
    );
    const written = outcomes.filter((o) => o === "written").length;
    expect(written).toBeLessThanOrEqual(PER_HOUR);
    expect(written).toBeGreaterThan(0);
    expect(new Set(outcomes)).toEqual(
      new Set([
        "written",
        "WITHDRAWAL_BELOW_MINIMUM",
        "WITHDRAWAL_RATE_LIMITED",
        ...(written < PER_HOUR ? ["INSUFFICIENT_FUNDS"] : []),
      ]),
    );
    await settleAll();
    // The treasury signed one transaction per written withdrawal, and each paid its fee.
    const transfers = f.db
      .prepare("SELECT status, fee FROM chain_transfers WHERE kind = 'withdrawal'")
      .safeIntegers(true)
      .all();
    expect(transfers).toEqual(Array(written).fill({ status: "confirmed", fee: FEE }));
    expect(systemBalance(SYSTEM_WITHDRAWAL_FEES)).toBe(FEE * BigInt(written));
    const rpc = createPublicClient({ transport: http(f.dev.rpcUrl) });
    const sent = await rpc.getTransactionCount({
      address: f.runtime.adapter("base")!.treasuryAddress() as `0x${string}`,
    });
    expect(sent).toBe(written);
  });
});

describe("the withdrawal rate across gateway hosts (Redis)", () => {
  let redis: RedisServer;
  const clients: Redis[] = [];
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    for (const c of clients) c.disconnect();
    await redis?.stop();
  });

  it("two hosts sharing Redis count one account's withdrawals once", async () => {
    f = await onchainFixture({ confirmations: 1, mode: "per-call" });
    const fallbacks: string[] = [];
    const hostOf = async () => {
      const client = await connectRedis(redis.url);
      clients.push(client);
      return host(
        redisRateLimiter(client, (reason) => fallbacks.push(reason))("withdrawals", PER_HOUR, 3_600_000),
      );
    };
    const [a, b] = [await hostOf(), await hostOf()];
    const account = f.account();
    await fund(account, 10_000_000n);
    const [viaA, viaB] = [await keyHolder(a, account), await keyHolder(b, account)];
    await viaA({ amount: MINIMUM });
    await viaB({ amount: MINIMUM });
    await viaA({ amount: MINIMUM });
    expect((await refusal(viaB({ amount: MINIMUM }))).reason).toBe("WITHDRAWAL_RATE_LIMITED");
    expect((await refusal(viaA({ amount: MINIMUM }))).reason).toBe("WITHDRAWAL_RATE_LIMITED");
    expect(rows("chain_transfers")).toBe(PER_HOUR);
    expect(await clients[0]!.exists(`${REDIS_KEY_PREFIX}:withdrawals:${account}`)).toBe(1);
    expect(fallbacks).toEqual([]);
  });
});
