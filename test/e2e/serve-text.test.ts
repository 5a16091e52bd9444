import { afterEach, describe, expect, it } from "vitest";
import { cliJson, runCli, startGateway, tempDir } from "../helpers/process.js";

// The gateway exactly as the README's run command starts it (`make run` is `tollgate dev`): with
// no provider configured, text calls are served by the built-in dev upstream, and the ready line
// says so.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe("serve on its embedded defaults", () => {
  it("answers /v1/messages from the built-in dev upstream, billed, and says so at start", async () => {
    const dir = tempDir();
    cleanups.push(dir.cleanup);
    const env = { TOLLGATE_DATA_DIR: dir.path };
    const gateway = await startGateway(env);
    cleanups.push(() => gateway.stop("SIGKILL"));
    expect(gateway.stdout()).toMatch(
      /tollgate ready: .*text: built-in dev upstream http:\/\/127\.0\.0\.1:\d+, generated/,
    );

    const account = await cliJson<{ id: string }>(["account", "create", "--name", "readme"], env);
    const key = await cliJson<{ secret: string }>(["key", "create", "--account", account.id], env);
    const credit = await runCli(
      ["credit", "--account", account.id, "--chain", "base", "--amount", "5", "--reason", "trial"],
      env,
    );
    expect(credit.code).toBe(0);

    const response = await fetch(`${gateway.facadeUrl}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key.secret}` },
      body: JSON.stringify({
        model: "claude-sonnet-4-6",
        max_tokens: 64,
        messages: [{ role: "user", content: "hi" }],
      }),
    });
    expect(response.status).toBe(200);
    expect(response.headers.get("x-gateway-billing-chain")).toBe("base");
    const message = (await response.json()) as { content: { text: string }[] };
    expect(message.content[0]!.text).toContain("dev-upstream");

    // Ledger units of the 6-decimal base asset: $5 is 5,000,000; one small call costs cents.
    const balance = await cliJson<{ balances: { chain: { id: string }; available: string }[] }>(
      ["balance", "--account", account.id],
      env,
    );
    const base = balance.balances.find((b) => b.chain.id === "base")!;
    expect(BigInt(base.available)).toBeLessThan(5_000_000n);
    expect(BigInt(base.available)).toBeGreaterThan(4_990_000n);

    // A call with web search: `tollgate usage` says what it was charged for. (A server-tool loop
    // holds its worst case, ten context windows, so the wallet gets more first.)
    await runCli(
      ["credit", "--account", account.id, "--chain", "base", "--amount", "200", "--reason", "search"],
      env,
    );
    const searched = await fetch(`${gateway.facadeUrl}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key.secret}` },
      body: JSON.stringify({
        model: "claude-sonnet-4-6",
        max_tokens: 200,
        messages: [{ role: "user", content: "What changed in gateways this week?" }],
        tools: [{ type: "web_search_20250305", name: "web_search", max_uses: 5 }],
      }),
    });
    expect(searched.status).toBe(200);
    const usage = await runCli(["usage", "--account", account.id], env);
    expect(usage.code).toBe(0);
    expect(usage.stdout).toMatch(/3 web searches\s+\$0\.03/);
    expect(usage.stdout).toContain("model-sonnet-4-6 · tokens");
    expect(await gateway.stop("SIGTERM")).toBe(0);
  });
});
