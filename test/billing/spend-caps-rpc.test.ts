import Anthropic from "@anthropic-ai/sdk";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { errorInfo } from "../../src/core/errors.js";
import { BillingService, SpendCapPeriod } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { accountWithKey } from "../helpers/app.js";
import { startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

// The spend-cap RPCs: the operator (and a dashboard session, through the same code) sets, reads
// and clears caps; an API key reads its account's but cannot change them; bad input is refused
// by field. A real gateway, a real call through the official SDK, the ledger audit at the end.

let t: TextGateway;
beforeAll(async () => {
  t = await startTextGateway();
  await t.credit(10_000_000n);
});
afterAll(async () => {
  t.expectSoundLedger();
  await t.close();
});

async function refusal(call: Promise<unknown>): Promise<ConnectError> {
  const error = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ConnectError);
  return error as ConnectError;
}

describe("SetSpendCap and ListSpendCaps", () => {
  it("set, read with what each period spent, and clear", async () => {
    const set = await t.billing.setSpendCap({
      accountId: t.accountId,
      keyId: t.keyId,
      chain: "base",
      period: SpendCapPeriod.DAY,
      amount: 5_000_000n,
    });
    expect(set.caps).toHaveLength(1);
    await t.billing.setSpendCap({
      accountId: t.accountId,
      chain: "base",
      period: SpendCapPeriod.LIFETIME,
      amount: 9_000_000n,
    });
    const client = new Anthropic({ apiKey: t.secret, baseURL: t.baseUrl, maxRetries: 0 });
    await client.messages.create({
      model: "model-haiku-4-5",
      max_tokens: 32,
      messages: [{ role: "user", content: "Hi" }],
    });
    const charge = (await t.usage())[0]!.amount;
    expect(charge).toBeGreaterThan(0n);
    const { caps } = await t.billing.listSpendCaps({ accountId: t.accountId });
    expect(caps.map((c) => [c.keyId, c.chain, c.period, c.amount, c.spent])).toEqual([
      ["", "base", SpendCapPeriod.LIFETIME, 9_000_000n, charge],
      [t.keyId, "base", SpendCapPeriod.DAY, 5_000_000n, charge],
    ]);
    expect(caps[0]!.resetsAtMs).toBe(0n);
    // The next UTC midnight.
    const day = 86_400_000n;
    expect(caps[1]!.resetsAtMs % day).toBe(0n);
    expect(caps[1]!.resetsAtMs - BigInt(Date.now())).toBeGreaterThan(0n);
    expect(caps[1]!.resetsAtMs - BigInt(Date.now())).toBeLessThanOrEqual(day);
    const cleared = await t.billing.setSpendCap({
      accountId: t.accountId,
      chain: "base",
      period: SpendCapPeriod.LIFETIME,
    });
    expect(cleared.caps.map((c) => c.period)).toEqual([SpendCapPeriod.DAY]);
  });

  it("an API key reads its own account's caps but cannot change them", async () => {
    const asKey = createClient(
      BillingService,
      createConnectTransport({
        baseUrl: t.gateway.coreUrl,
        httpVersion: "2",
        interceptors: [
          (next) => (req) => {
            req.header.set("authorization", `Bearer ${t.secret}`);
            return next(req);
          },
        ],
      }),
    );
    expect((await asKey.listSpendCaps({})).accountId).toBe(t.accountId);
    const denied = await refusal(asKey.setSpendCap({ chain: "base", period: SpendCapPeriod.DAY }));
    expect(denied.code).toBe(Code.PermissionDenied);
    expect(errorInfo(denied)?.reason).toBe("SPEND_CAPS_OWNER_ONLY");
  });

  it("refuses an unspecified period, a negative amount, another account's key and an unknown chain", async () => {
    const cap = { accountId: t.accountId, chain: "base", period: SpendCapPeriod.DAY, amount: 1n };
    const period = await refusal(t.billing.setSpendCap({ ...cap, period: SpendCapPeriod.UNSPECIFIED }));
    expect([period.code, errorInfo(period)?.metadata.field]).toEqual([Code.InvalidArgument, "period"]);
    const negative = await refusal(t.billing.setSpendCap({ ...cap, amount: -1n }));
    expect([negative.code, errorInfo(negative)?.metadata.field]).toEqual([Code.InvalidArgument, "amount"]);
    const other = await accountWithKey(t.gateway.operator, "other");
    const key = await refusal(t.billing.setSpendCap({ ...cap, keyId: other.keyId }));
    expect([key.code, errorInfo(key)?.metadata.field]).toEqual([Code.InvalidArgument, "key_id"]);
    const chain = await refusal(t.billing.setSpendCap({ ...cap, chain: "nowhere" }));
    expect(errorInfo(chain)?.reason).toBe("CHAIN_UNKNOWN");
    expect((await t.billing.listSpendCaps({ accountId: t.accountId })).caps).toHaveLength(1);
  });
});
