import Fastify from "fastify";
import { describe, expect, it } from "vitest";
import { chainUnknown, insufficientFunds } from "../core/billing/billing-errors.js";
import { defaultChainRegistry } from "../core/billing/default-chains.js";
import { anthropicErrorHandler } from "./anthropic/envelope.js";
import { openaiErrorHandler } from "./openai/envelope.js";

// The core's billing errors as each REST format must answer them. The billed routes that raise
// them end to end arrive with the text and image issues; this pins the translation now.
const base = defaultChainRegistry().byId.get("base")!;

async function answer(handler: typeof anthropicErrorHandler, error: Error) {
  const app = Fastify();
  app.setErrorHandler(handler);
  app.post("/", async () => {
    throw error;
  });
  const response = await app.inject({ method: "POST", url: "/" });
  await app.close();
  return {
    status: response.statusCode,
    chain: response.headers["x-gateway-billing-chain"],
    shouldRetry: response.headers["x-should-retry"],
    body: response.json(),
  };
}

describe("billing errors in each envelope", () => {
  const funds = insufficientFunds(base, 2_500_000n, 1_000_000n);

  it("402 billing_error naming chain, need and availability (Anthropic)", async () => {
    const r = await answer(anthropicErrorHandler, funds);
    expect(r.status).toBe(402);
    expect(r.chain).toBe("base");
    expect(r.body.error.type).toBe("billing_error");
    expect(r.body.error.message).toBe(
      "Insufficient funds on base: this call needs up to 2.500000 USDC, 1.000000 USDC is available. " +
        "Add funds on the Wallet page: http://localhost:80/dashboard#/wallet",
    );
    // A retry cannot fund the wallet: the SDKs and Claude Code stop at once.
    expect(r.shouldRetry).toBe("false");
  });

  it("402 with code insufficient_funds (OpenAI)", async () => {
    const r = await answer(openaiErrorHandler, funds);
    expect(r.status).toBe(402);
    expect(r.shouldRetry).toBe("false");
    expect(r.chain).toBe("base");
    expect(r.body).toEqual({
      error: {
        message: expect.stringContaining("on base"),
        type: "billing_error",
        param: null,
        code: "insufficient_funds",
      },
    });
  });

  it("an unknown chain is a 400 naming the header and the allowed values", async () => {
    const error = chainUnknown("dogecoin", ["base", "arbitrum", "robinhood", "solana"]);
    const a = await answer(anthropicErrorHandler, error);
    expect(a.status).toBe(400);
    expect(a.chain).toBeUndefined();
    expect(a.body.error.message).toContain("base, arbitrum, robinhood, solana");
    const o = await answer(openaiErrorHandler, error);
    expect(o.body.error).toMatchObject({ type: "invalid_request_error", param: "x-gateway-billing-chain" });
  });
});
