/**
 * The real Claude Code CLI (test/helpers/claude-code.ts: headless, unmodified, non-essential
 * traffic off) against a gateway whose providers file routes its model past an Anthropic
 * endpoint answering 529 to Amazon Bedrock (SigV4), to Google Vertex AI (OAuth) or to the next
 * Anthropic endpoint (test/helpers/platform-gateway.ts): the CLI's answer arrives, and each of
 * its calls is charged once, at the gateway model's listed price, named by the endpoint that
 * served it.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEV_TEXT_LABEL } from "../../src/dev/provider/dev-upstream.js";
import { HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { runClaude } from "../helpers/claude-code.js";
import { type PlatformGateway, startPlatformGateway } from "../helpers/platform-gateway.js";
import { expectedCharge, type RATES } from "../helpers/text-gateway.js";

const RUNS: readonly { cli: string; model: keyof typeof RATES; endpoint: string }[] = [
  { cli: "claude-haiku-4-5", model: "model-haiku-4-5", endpoint: "bedrock" },
  { cli: "claude-sonnet-4-6", model: "model-sonnet-4-6", endpoint: "vertex" },
  { cli: "claude-opus-4-8", model: "model-opus-4-8", endpoint: "anthropic" },
];

describe("the Claude Code CLI through the gateway, routed to Bedrock, Vertex and past a 529", () => {
  let p: PlatformGateway;
  beforeAll(async () => {
    p = await startPlatformGateway();
    // Claude Code asks max_tokens 64000: Opus 4.8 holds $1.60 of output per call.
    await p.t.credit(50_000_000n);
  });
  afterAll(async () => {
    p.t.expectSoundLedger();
    await p.close();
  });

  for (const { cli, model, endpoint } of RUNS) {
    it(`--model ${cli}: the answer arrives from ${endpoint}, each call charged once`, async () => {
      const rowsBefore = (await p.t.usage()).length;
      const overloadedBefore = p.overloaded.messageRequests().length;
      const run = await runClaude({
        baseUrl: p.t.baseUrl,
        token: p.t.secret,
        prompt: "Say hello through the platforms",
        args: ["--model", cli],
      });
      expect(run.stderr).toBe("");
      expect(run.code).toBe(0);
      expect(run.stdout).toContain(DEV_TEXT_LABEL);
      const all = await p.settledRows(rowsBefore + 1);
      const rows = all.slice(0, all.length - rowsBefore);
      // Every call of the CLI met the 529 first and was served once by the next endpoint.
      expect(p.overloaded.messageRequests().length - overloadedBefore).toBe(rows.length);
      for (const row of rows) {
        expect(row.status).toBe(HoldStatus.SETTLED);
        expect(row.model).toBe(model);
        expect(p.endpointOf(row.requestId)).toBe(endpoint);
        // One charge line at the gateway model's listed price for the tokens delivered.
        expect(row.charges).toHaveLength(1);
        const tokens = row.charges[0]!.tokens!;
        expect(row.charges[0]!.model).toBe(model);
        expect(row.amount).toBe(
          expectedCharge(model, {
            input: Number(tokens.inputTokens),
            output: Number(tokens.outputTokens),
            w5m: Number(tokens.cacheWrite5mTokens),
            w1h: Number(tokens.cacheWrite1hTokens),
            read: Number(tokens.cacheReadTokens),
          }),
        );
        expect(row.amount).toBeGreaterThan(0n);
      }
    });
  }
});
