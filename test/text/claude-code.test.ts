import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { accountWithKey } from "../helpers/app.js";
import { runClaude } from "../helpers/claude-code.js";
import type { CliResult } from "../helpers/process.js";
import { startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

// The real Claude Code CLI (npm @anthropic-ai/claude-code), headless, pointed at the gateway's
// origin with a gateway key as its auth token, unmodified.

/** Runs the CLI against the gateway with `token`, bounded in time. */
function claude(
  baseUrl: string,
  token: string,
  prompt: string,
  timeoutMs = 90_000,
  args: readonly string[] = [],
): Promise<CliResult> {
  return runClaude({ baseUrl, token, prompt, timeoutMs, args });
}

describe("the Claude Code CLI through the gateway", () => {
  let t: TextGateway;
  beforeAll(async () => {
    t = await startTextGateway();
    await t.credit(20_000_000n); // $20: Opus 4.8 with max_tokens 64000 holds a few dollars per call.
  });
  afterAll(async () => {
    t.expectSoundLedger();
    await t.close();
  });

  it("prints the upstream's answer, and the call is billed on the default chain", async () => {
    const run = await claude(t.baseUrl, t.secret, "Say hello to the gateway");
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    expect(run.stdout).toContain("dev-upstream");
    // What the CLI sent: its own headers and vendor model name, streamed, with the beta list intact.
    const sent = t.upstream.messageRequests();
    expect(sent.length).toBeGreaterThanOrEqual(1);
    const main = sent.at(-1)!;
    expect(main.path).toBe("/v1/messages");
    expect(main.headers["anthropic-beta"]).toContain("claude-code-20250219");
    expect(main.body).toMatchObject({ stream: true });
    const rows = await t.usage();
    expect(rows.length).toBe(sent.length);
    for (const row of rows) {
      expect(row).toMatchObject({ status: HoldStatus.SETTLED, chain: "base", keyId: t.keyId });
      expect(row.amount).toBeGreaterThan(0n);
    }
  });

  it("stops at once with the billing error when the wallet cannot cover the call", async () => {
    const { account } = await t.gateway.operator.createAccount({ name: "broke" });
    const { secret } = await t.gateway.operator.createKey({ accountId: account!.id });
    const calls = t.upstream.requests.length;
    const run = await claude(t.baseUrl, secret, "Say hello", 60_000);
    expect(run.code).toBe(1);
    const shown = `${run.stdout}${run.stderr}`;
    expect(shown).toMatch(/Insufficient funds on base/);
    expect(shown).toMatch(/Not even max_tokens 1 would fit/);
    expect(shown).toContain(`${t.baseUrl}/dashboard#/wallet`);
    expect(t.upstream.requests.length).toBe(calls);
  });

  it("shows a short wallet the largest max_tokens it covers, and where to add funds", async () => {
    const { account } = await t.gateway.operator.createAccount({ name: "short" });
    const { secret } = await t.gateway.operator.createKey({ accountId: account!.id });
    // $1.50: less than Opus 4.8 with max_tokens 64,000 holds, more than its prompt alone.
    await t.credit(1_500_000n, "base", account!.id);
    const calls = t.upstream.requests.length;
    const run = await claude(t.baseUrl, secret, "Say hello", 60_000);
    expect(run.code).toBe(1);
    const shown = `${run.stdout}${run.stderr}`;
    expect(shown).toMatch(/this call needs up to \d+\.\d{6} USDC, 1\.500000 USDC is available/);
    const affordable = Number(/max_tokens up to (\d+)/.exec(shown)?.[1]);
    expect(affordable).toBeGreaterThan(0);
    expect(affordable).toBeLessThan(64_000);
    expect(shown).toContain(`${t.baseUrl}/dashboard#/wallet`);
    expect(t.upstream.requests.length).toBe(calls);
  });

  it("runs its WebSearch tool through the gateway, and the search call is billed per search", async () => {
    // A call with a server tool holds its provider loop's worst case (ten context windows).
    await t.credit(300_000_000n);
    const before = (await t.usage()).length;
    const run = await claude(t.baseUrl, t.secret, "search the web for tollgate pricing", 90_000, [
      "--allowedTools",
      "WebSearch",
    ]);
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    // The CLI's own web-search request went through as it sent it (max_uses 8: nothing repaired).
    const search = t.upstream
      .messageRequests()
      .find((r) => JSON.stringify((r.body as { tools?: unknown }).tools ?? []).includes("web_search_2"));
    expect(search).toBeDefined();
    expect((search!.body as { tools: unknown[] }).tools[0]).toMatchObject({
      type: "web_search_20250305",
      max_uses: 8,
    });
    const all = await t.usage();
    const rows = all.slice(0, all.length - before);
    expect(rows.length).toBe(3); // the main call, the search, the follow-up with the results
    const searched = rows.filter((row) => row.charges.some((c) => c.kind === "web_search"));
    expect(searched).toHaveLength(1);
    const line = searched[0]!.charges.find((c) => c.kind === "web_search")!;
    // The dev upstream runs 3 searches: $0.03 on top of the tokens.
    expect(line).toMatchObject({
      quantity: 3n,
      amountPico: 30_000n * 1_000_000n,
      description: "3 web searches",
    });
    for (const row of rows) {
      expect(row.status).toBe(HoldStatus.SETTLED);
      expect(row.amount).toBeLessThanOrEqual(row.heldAmount);
    }
    expect(t.gateway.app.counters?.count("capped_charge")).toBe(0);
  });

  it("runs its WebSearch tool on a $5 wallet: the search is held pass by pass and charged its priced usage", async () => {
    // Before pass-by-pass holds the search call alone held its loop's worst case (tens of dollars).
    const { accountId, secret } = await accountWithKey(t.gateway.operator, "five-dollars");
    await t.credit(5_000_000n, "base", accountId);
    // Haiku 4.5: on Opus 4.8 each pass may write Claude Code's max_tokens 64000 at $25/M ($1.60),
    // so a $5 wallet holds a pass or two of a search there and the turn pauses (docs/billing.md).
    const run = await claude(t.baseUrl, secret, "search the web for tollgate pricing", 90_000, [
      "--allowedTools",
      "WebSearch",
      "--model",
      "claude-haiku-4-5",
    ]);
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    const rows = await t.usage(accountId);
    expect(rows.length).toBe(3); // the main call, the search, the follow-up with the results
    const searched = rows.filter((row) => row.charges.some((c) => c.kind === "web_search"));
    expect(searched).toHaveLength(1);
    const search = searched[0]!;
    // Held pass by pass: the first pass and a raise per search, far below the whole loop.
    expect(search.heldAmount).toBeLessThan(5_000_000n);
    expect(search.charges.find((c) => c.kind === "web_search")).toMatchObject({ quantity: 3n });
    // Charged exactly its priced usage: the sum of its charge lines, no cap.
    const pico = search.charges.reduce((sum, c) => sum + c.amountPico, 0n);
    expect(search.amount).toBe((pico + 999_999n) / 1_000_000n); // µ$ on base, rounded up once
    let spent = 0n;
    for (const row of rows) {
      expect(row.status).toBe(HoldStatus.SETTLED);
      expect(row.amount).toBeLessThanOrEqual(row.heldAmount);
      spent += row.amount;
    }
    expect(await t.available("base", accountId)).toBe(5_000_000n - spent);
    expect(t.gateway.app.counters?.count("capped_charge")).toBe(0);
  });
});
