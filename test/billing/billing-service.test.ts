import { Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Caller } from "../../src/core/caller.js";
import type { Core } from "../../src/core/core.js";
import { errorInfo } from "../../src/core/errors.js";
import { BillingService, HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { coreOver } from "../helpers/core.js";
import { expectSoundLedger, type LedgerFixture, ledgerFixture, operatorBillingClient } from "./fixtures.js";

let f: LedgerFixture;
let core: Core;

beforeEach(() => {
  f = ledgerFixture();
  core = coreOver(f.db);
});

afterEach(() => {
  expectSoundLedger(f.db);
  f.db.close();
});

function clientAs(caller: Caller) {
  return createClient(
    BillingService,
    createRouterTransport(core.routes, { router: core.routerOptionsFor(() => caller) }),
  );
}

const keyCaller = (accountId: string): Caller => ({
  kind: "key",
  key: { accountId, keyId: `key_of_${accountId}` },
});
const TEXT = {
  case: "text" as const,
  // inference_geo named: no residency multiplier is held (without it, ×1.1: see the Quote test).
  value: { model: "model-sonnet-5", inputTokens: 2000n, maxTokens: 500n, inferenceGeo: "global" },
};

describe("BillingService RPCs", () => {
  it("Quote returns the worst case on the selected chain without writing", async () => {
    const operator = operatorBillingClient(f.db, core);
    const account = f.account();
    // sonnet-5: 2000 × $4/MTok (1h write) + 500 × $10/MTok = 8000 + 5000 µ$.
    expect(await operator.quote({ accountId: account, chain: "solana", call: TEXT })).toMatchObject({
      chain: "solana",
      amount: 13_000n,
    });
    // No inference_geo: a provider workspace default may run it US-only, so ×1.1 is held.
    const unnamed = { case: "text" as const, value: { ...TEXT.value, inferenceGeo: "" } };
    expect(await operator.quote({ accountId: account, chain: "solana", call: unnamed })).toMatchObject({
      amount: 14_300n,
    });
    // Every billable feature travels in the call: 3 web searches ($0.03) and a server-tool loop.
    const features = {
      case: "text" as const,
      value: { ...TEXT.value, webSearchMaxUses: 3n, serverToolLoop: true, speed: "" },
    };
    const { amount } = await operator.quote({ accountId: account, chain: "solana", call: features });
    // 10 iterations: the prompt, then 9 full 1M-token windows, each at $4/MTok; 10 × 500 output at $10/MTok.
    expect(amount).toBe(8_000n + 9n * 1_000_000n * 4n + 10n * 5_000n + 30_000n);
    await expect(operator.quote({ accountId: account, call: { case: undefined } })).rejects.toMatchObject({
      code: Code.InvalidArgument,
    });
  });

  it("runs the hold cycle and lists one usage row per call, only to its own account", async () => {
    const operator = operatorBillingClient(f.db, core);
    const alice = f.account();
    const bob = f.account();
    for (const id of [alice, bob])
      await operator.credit({ accountId: id, chain: "base", amount: 1_000_000n, reason: "r" });
    const held = await operator.hold({
      accountId: alice,
      requestId: "r1",
      keyId: "key_a",
      chain: "auto",
      call: TEXT,
    });
    expect(held.hold).toMatchObject({ amount: 13_000n, status: HoldStatus.PENDING, chain: "base" });
    await operator.settle({
      holdId: held.hold!.id,
      usage: { inputTokens: 100n, outputTokens: 200n, cacheWrite5mTokens: 300n, cacheReadTokens: 400n },
    });
    const second = await operator.hold({
      accountId: alice,
      requestId: "r2",
      chain: "base",
      call: { case: "image", value: { model: "image-2", size: "1K", count: 2 } },
    });
    await operator.release({ holdId: second.hold!.id });
    await operator.hold({ accountId: bob, requestId: "r1", chain: "base", call: TEXT });

    const rows = (await clientAs(keyCaller(alice)).listUsage({})).rows;
    expect(rows.map((r) => [r.requestId, r.status, r.amount, r.model, r.imageSize])).toEqual([
      ["r2", HoldStatus.RELEASED, 0n, "image-2", "1K"],
      // 100 × 2 + 200 × 10 + 300 × 2.5 + 400 × 0.2 = 200 + 2000 + 750 + 80 µ$.
      ["r1", HoldStatus.SETTLED, 3030n, "model-sonnet-5", ""],
    ]);
    expect(rows[1]).toMatchObject({ keyId: "key_a", heldAmount: 13_000n, chain: "base" });
    expect(rows[1]!.usage).toMatchObject({
      inputTokens: 100n,
      outputTokens: 200n,
      cacheWrite5mTokens: 300n,
      cacheReadTokens: 400n,
    });
    expect(rows[1]!.resolvedAt).toBeDefined();
    await expect(clientAs(keyCaller(alice)).listUsage({ accountId: bob })).rejects.toMatchObject({
      code: Code.PermissionDenied,
    });
    expect((await clientAs(keyCaller(bob)).listUsage({})).rows).toHaveLength(1);
  });

  it("paginates usage", async () => {
    const operator = operatorBillingClient(f.db, core);
    const account = f.account();
    await operator.credit({ accountId: account, chain: "base", amount: 10_000_000n, reason: "r" });
    for (let i = 0; i < 7; i++)
      await operator.hold({ accountId: account, requestId: `r${i}`, chain: "base", call: TEXT });
    const seen: string[] = [];
    let pageToken = "";
    do {
      const page = await clientAs(keyCaller(account)).listUsage({ pageSize: 3, pageToken });
      seen.push(...page.rows.map((r) => r.requestId));
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    expect(seen).toEqual(["r6", "r5", "r4", "r3", "r2", "r1", "r0"]);
    await expect(clientAs(keyCaller(account)).listUsage({ pageToken: "junk" })).rejects.toMatchObject({
      code: Code.InvalidArgument,
    });
  });

  it("SetDefaultChain changes what auto bills, for the caller's own account", async () => {
    const account = f.account();
    const self = clientAs(keyCaller(account));
    expect(await self.setDefaultChain({ chain: "robinhood" })).toMatchObject({
      accountId: account,
      defaultChain: "robinhood",
    });
    expect((await self.getBalances({})).defaultChain).toBe("robinhood");
    const operator = operatorBillingClient(f.db, core);
    expect((await operator.quote({ accountId: account, call: TEXT })).chain).toBe("robinhood");
    const error = await self.setDefaultChain({ chain: "dogecoin" }).catch((e: unknown) => e as ConnectError);
    expect(errorInfo(error as ConnectError)?.metadata).toMatchObject({
      field: "chain",
      allowed: "base,arbitrum,robinhood,solana",
    });
  });

  it("Hold refused for funds carries the chain, needed and available amounts", async () => {
    const operator = operatorBillingClient(f.db, core);
    const account = f.account();
    await operator.credit({ accountId: account, chain: "arbitrum", amount: 100n, reason: "r" });
    const error = await operator
      .hold({ accountId: account, requestId: "r", chain: "arbitrum", call: TEXT })
      .catch((e: unknown) => e as ConnectError);
    expect(error).toBeInstanceOf(ConnectError);
    expect((error as ConnectError).code).toBe(Code.FailedPrecondition);
    expect(errorInfo(error as ConnectError)).toMatchObject({
      reason: "INSUFFICIENT_FUNDS",
      metadata: { chain: "arbitrum", needed: "13000", available: "100" },
    });
  });
});
