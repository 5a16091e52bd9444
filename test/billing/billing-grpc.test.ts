import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  BillingService,
  ChainFamily,
  type GetBalancesResponse,
  type GetPricingResponse,
} from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { startTestGateway, type TestGateway } from "../helpers/app.js";
import { coreOver } from "../helpers/core.js";
import { grpcClient, unary } from "../helpers/grpc.js";
import { operatorBillingClient } from "./fixtures.js";

const ADMIN = "admin-token-for-billing-tests-0123456789";

let gateway: TestGateway;
let client: grpc.Client;
let accountId: string;
let otherAccountId: string;
let secret: string;

beforeAll(async () => {
  gateway = await startTestGateway({ TOLLGATE_ADMIN_TOKEN: ADMIN });
  client = grpcClient(BillingService, gateway.coreUrl);
  accountId = (await gateway.operator.createAccount({ name: "grpc" })).account!.id;
  otherAccountId = (await gateway.operator.createAccount({ name: "other" })).account!.id;
  secret = (await gateway.operator.createKey({ accountId })).secret;
  const billing = operatorBillingClient(gateway.db, coreOver(gateway.db));
  await billing.credit({ accountId, chain: "arbitrum", amount: 12_500_000n, reason: "grpc test" });
});

afterAll(async () => {
  client?.close();
  if (gateway !== undefined) {
    expect(auditLedger(gateway.db)).toEqual([]);
    await gateway.close();
  }
});

describe("BillingService over a real grpc-js client", () => {
  it("answers GetPricing without credentials: the catalog and the chains", async () => {
    const pricing = await unary<GetPricingResponse>(client, "GetPricing", {});
    const opus = pricing.textModels.find((m) => m.model === "model-opus-5")!;
    expect([
      opus.inputPerMtok,
      opus.outputPerMtok,
      opus.cacheReadPerMtok,
      opus.cacheWrite5mPerMtok,
      opus.cacheWrite1hPerMtok,
    ]).toEqual([5_000_000n, 25_000_000n, 500_000n, 6_250_000n, 10_000_000n]);
    expect(pricing.textModels).toHaveLength(8);
    const pro = pricing.imageModels.find((m) => m.model === "image-pro")!;
    expect(pro.sizes.map((s) => [s.size, s.pricePerImage])).toEqual([
      ["1K", 134_000n],
      ["2K", 134_000n],
      ["4K", 240_000n],
    ]);
    expect(pricing.imageModels.find((m) => m.model === "image-2")!.sizes.map((s) => s.size)).toEqual(["1K"]);
    expect(pricing.chains.map((c) => [c.id, c.family, c.asset?.decimals])).toEqual([
      ["base", ChainFamily.EVM, 6],
      ["arbitrum", ChainFamily.EVM, 6],
      ["robinhood", ChainFamily.EVM, 6],
      ["solana", ChainFamily.SOLANA, 6],
    ]);
    expect(pricing.defaultChain).toBe("base");
  });

  it("answers GetBalances with an API key: the caller's own account", async () => {
    const balances = await unary<GetBalancesResponse>(client, "GetBalances", {}, { "x-api-key": secret });
    expect(balances.accountId).toBe(accountId);
    expect(balances.defaultChain).toBe("base");
    const arbitrum = balances.balances.find((b) => b.chain?.id === "arbitrum")!;
    expect(arbitrum.available).toBe(12_500_000n);
    expect(arbitrum.creditsPosted).toBe(12_500_000n);
    expect(balances.balances.find((b) => b.chain?.id === "base")!.available).toBe(0n);
  });

  it("answers GetBalances for the operator naming an account", async () => {
    const balances = await unary<GetBalancesResponse>(
      client,
      "GetBalances",
      { accountId },
      { authorization: `Bearer ${ADMIN}` },
    );
    expect(balances.balances.find((b) => b.chain?.id === "arbitrum")!.available).toBe(12_500_000n);
  });

  it("never shows another account's balances", async () => {
    await expect(
      unary(client, "GetBalances", { accountId: otherAccountId }, { "x-api-key": secret }),
    ).rejects.toMatchObject({ code: grpc.status.PERMISSION_DENIED });
    await expect(unary(client, "GetBalances", {})).rejects.toMatchObject({
      code: grpc.status.UNAUTHENTICATED,
    });
  });

  it("keeps Credit and the internal hold cycle operator-only", async () => {
    for (const method of ["Credit", "Hold", "Settle", "Release", "Quote"]) {
      await expect(unary(client, method, {}, { "x-api-key": secret })).rejects.toMatchObject({
        code: grpc.status.PERMISSION_DENIED,
      });
    }
  });
});
